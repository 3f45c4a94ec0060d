"""Laya's `predict_long`: questions over a state longer than one sequence, read in overlapping
token windows and answered per question from the deciding window.

The rules are Laya 0.4.15's (`Agent.predict_long`, `common.window_budget`):

- the state is tokenized once; a window is `window` tokens (default: the config's state budget
  `max(64, max_len - head_max_len - 8)`), capped at the room the tightest question leaves, with a
  `RuntimeWarning` when the caller's window is cut (or the default is cut to half or less);
  `stride` defaults to half the effective window, and one past the window is refused, since the
  tokens between two windows would reach no model;
- each window is decoded back to text and answered as an ordinary state, so its rows are exactly
  Laya's (the re-tokenized window, not the raw slice);
- a noul takes the window with the highest P(true); a choice or a score the window with the
  highest `answer_confidence`; the answer carries `window` (index, token span, count), and
  `usage` sums the windows' numbers and adds `windows`;
- a state that fits the room (or an explicit window) is answered whole, exactly as `predict`
  answers it, with `usage["windows"] = 1`.

Laya scores the windows in padded forward passes; here the Agent's `predict_long` hands the
window texts to its own `predict_batch` (so hooks see them as `ctx.states`, as in Laya), whose
rows the engine packs with each other (and with concurrent callers) in unpadded batches. This
module owns the two ends: `plan` checks the arguments and splits the state, `combine` aggregates
the per-window results. `LongScan` is `Router.predict_long`'s step: the chosen agent's
`predict_long`, run by the call pipeline after the Router's start hooks.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from ..errors import InvalidRequest, Problem, problem, warn_caller
from ..render import State
from ..request import (Questions, questions_arg_problems, raise_if, state_problems,
                       validated_questions)
from . import wire
from .calibration import normalise_lang
from .call import agent_call, said_language
from .driver import run
from .hooks import PredictContext, aggregate_usage, as_sequence, defaults_skipped
from .options import CallOptions, reads
from .routing import refusal

AGGREGATES = ("auto",)
"""The `aggregate` values Laya accepts: "auto" (the per-type rules) only."""

_CLAMP_WARN_RATIO = 2
"""The default window cut to 1/this of itself or less is worth a warning (Laya's rule): the
scan then costs that many times the forward passes the caller would estimate."""


@dataclass
class Plan:
    """One `predict_long` call, checked and split: what to score and how to attribute it."""

    state: State
    questions: Questions
    lang: Optional[str]
    window: int
    stride: int
    room: int
    state_tokens: int
    windows: List[str]
    starts: List[int]
    fits: bool
    batch_size: Optional[int]

    @property
    def states(self) -> List[State]:
        """What gets scored: the state itself when it fits, else the window texts in order."""
        return [self.state] if self.fits else list(self.windows)


def _int_or_none(name: str, value: Any) -> List[Problem]:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return []
    return [problem([name], "%s must be an integer or None, got %r"
                    % (name, value), "type_error.integer", value)]


def plan(agent: Any, state: State, questions: Any, window: Optional[int] = None,
         stride: Optional[int] = None, aggregate: str = "auto", batch_size: Optional[int] = None,
         lang: Optional[str] = None) -> Plan:
    """Check the arguments (Laya's refusals, in Laya's order), size the window against the room
    the questions leave, and split the tokenized state into window texts."""
    raise_if([], state_problems(state, ["state"]) + questions_arg_problems(questions))
    if aggregate not in AGGREGATES:
        raise InvalidRequest([problem(["aggregate"], "predict_long: only aggregate='auto' is "
                                      "supported", "value_error.aggregate", aggregate)])
    raise_if([], _int_or_none("window", window) + _int_or_none("stride", stride)
             + _int_or_none("batch_size", batch_size))
    lang_key = normalise_lang(lang)
    checked = validated_questions(questions)
    engine = agent.engine
    lay = engine.layouter
    max_len, head_max_len = lay.budgets(None, None)
    rooms = [max(0, max_len - len(lay.head(q, head_max_len).ids) - 1) for q in checked.items]
    size, step, room = _window_budget(rooms, max_len, head_max_len, window, stride)
    ids = lay.state_ids(state)
    n = len(ids)
    explicit = bool(window and window > 0)
    if n <= (size if explicit else room):
        return Plan(state, checked, lang_key, size, step, room, n, [], [], True, batch_size)
    windows, starts = [], []
    i = 0
    while i < n:
        windows.append(lay.tok.decode(ids[i:i + size]))
        starts.append(i)
        if i + size >= n:
            break
        i += step
    return Plan(state, checked, lang_key, size, step, room, n, windows, starts, False, batch_size)


def _window_budget(rooms: List[int], max_len: int, head_max_len: int, window: Optional[int],
                   stride: Optional[int]) -> "tuple[int, int, int]":
    """(window, stride, room): Laya's `window_budget` over the questions' rooms."""
    explicit = bool(window and window > 0)
    requested = window if explicit and window is not None else max(64, max_len - head_max_len - 8)
    size = requested
    room = min(rooms) if rooms else size
    if room <= 0:
        raise InvalidRequest([problem(["questions"], (
            "predict_long: the questions' options fill the whole sequence (max_len=%d,"
            " head_max_len=%d), leaving no room for the state; no window can carry any of it."
            " A label set this large is what laya.shortlist.predict_shortlist is for"
            % (max_len, head_max_len)), "value_error.too_long", room)])
    if size > room:
        if explicit:
            warn_caller(
                "kime: predict_long: window=%d is wider than the %d state tokens these questions"
                " leave inside max_len=%d, so every window would be truncated to %d on the way to"
                " the model; scanning with window=%d instead" % (size, room, max_len, room, room),
                RuntimeWarning)
        elif size >= room * _CLAMP_WARN_RATIO:
            warn_caller(
                "kime: predict_long: these questions leave only %d of max_len=%d for the state"
                " (their heads take the rest), so the scan window is capped %d -> %d and roughly"
                " %.1fx as many windows -- each a full forward pass -- are needed to read the"
                " document. Fewer or shorter options, a larger max_len, or"
                " laya.shortlist.predict_shortlist for a large label set will all cost less than"
                " scanning at this width" % (room, max_len, size, room, size / room),
                RuntimeWarning)
        size = room
    step = stride if (stride and stride > 0) else max(1, size // 2)
    if step > size:
        if size < requested and stride and stride <= requested:
            # The caller's pair was consistent; the cap made it not. Keep the no-gap guarantee.
            warn_caller(
                "kime: predict_long: stride=%d was a 50%% step for the window=%d you asked for, but"
                " the window was reduced to %d to fit the room these questions leave; scanning with"
                " stride=%d instead" % (step, requested, size, max(1, size // 2)),
                RuntimeWarning)
            step = max(1, size // 2)
        else:
            raise InvalidRequest([problem(["stride"], (
                "predict_long: stride=%d steps past the %d-token window%s, so %d tokens between"
                " every pair of windows would be read by no window at all; pass stride <= %d"
                % (step, size, " these questions leave room for" if size < requested else "",
                   step - size, size)), "value_error.stride", stride)])
    return size, step, room


def combine(p: Plan, results: List[Dict[str, Any]], attributed: bool = True) -> Dict[str, Any]:
    """One result for the document from the per-state `results` of `p.states`.

    A state that fit: its result with `usage["windows"] = 1`. Windows: per question, the
    deciding window's answer (the highest P(true) for a noul, the highest `answer_confidence`
    otherwise, the first on a tie) with `window` naming its span when `attributed` (a hook that
    rewrote the states makes the spans meaningless, and Laya then names none); numeric `usage`
    fields summed over the windows (so `truncated` counts cut windows), per-question ones
    merged, others the last window's; `output_tokens` 0 and `windows` the count."""
    if p.fits and len(results) == 1:
        single = dict(results[0])
        single["usage"] = {**(single.get("usage") or {}), "windows": 1}
        return single
    answers: Dict[Any, Dict[str, Any]] = {}
    for q in p.questions.items:
        per = [r["answers"][q.id] for r in results]
        field_ = "noul" if q.qtype == "noul" else "answer_confidence"
        best = max(range(len(per)), key=lambda j: float(per[j][field_]))
        ans = per[best]
        if attributed:
            ans["window"] = {"index": best, "token_start": p.starts[best],
                             "token_end": min(p.starts[best] + p.window, p.state_tokens),
                             "count": len(results)}
        answers[q.id] = ans
    usage: Dict[str, Any] = {}
    for r in results:
        for key, val in r["usage"].items():
            prev = usage.get(key)
            if isinstance(val, (int, float)):
                usage[key] = (prev if isinstance(prev, (int, float)) else 0) + val
            elif isinstance(val, dict) and isinstance(prev, dict):
                usage[key] = {**prev, **val}
            else:
                usage[key] = val
    usage["output_tokens"] = 0
    usage["windows"] = len(results)
    return {"model": wire.LAYA_MODEL, "answers": answers, "usage": usage}


def scan_long(agent: Any, state: State, questions: Any, window: Any, stride: Any,
              aggregate: str, batch_size: Any, options: CallOptions) -> Dict[str, Any]:
    """`Agent.predict_long`: plan the windows, answer them through the agent's own call (one
    `predict` when the state fits, else one `predict_batch` over the window texts, so hooks see
    what Laya's see), then combine. A start hook that answers (`ctx.skip`) gives one
    unattributed result with `windows` 0; one that replaces the windows gets the answers of the
    states it left, unattributed."""
    p = plan(agent, state, questions, window, stride, aggregate, batch_size, options.lang)
    seen: Dict[str, Any] = {"answered": False, "states": None}

    def probe(ctx: PredictContext) -> None:  # last start hook: what inference will act on
        seen["answered"] = ctx.results is not None
        seen["states"] = list(ctx.states)

    hooked = options.but(on_predict_start=list(as_sequence(options.on_predict_start)) + [probe])
    if p.fits:
        single = dict(run(agent_call(agent, [state], questions, hooked))[0])
        single["usage"] = {**(single.get("usage") or {}),
                           "windows": 0 if seen["answered"] else 1}
        return single
    results = run(agent_call(agent, list(p.windows), questions, hooked, batch_size=batch_size))
    if seen["answered"]:
        if len(results) != 1:
            raise InvalidRequest([problem(["hooks"], "predict_long: a start hook answered "
                                          "this state with %d results; ctx.skip() takes one "
                                          "result for the document, not one per window"
                                          % len(results), "value_error.hooks", len(results))])
        warn_caller("kime: predict_long: a hook answered the state before it was scanned, so "
                    "no window decided the result and none is reported")
        document = dict(results[0])
        document["usage"] = {**(document.get("usage") or {}), "windows": 0}
        return document
    rewritten = seen["states"] is not None and seen["states"] != p.windows
    if not results:
        warn_caller("kime: predict_long: a start hook left no states to score, so the call "
                    "aggregated nothing and returns no answers")
        return {"model": wire.LAYA_MODEL, "answers": {},
                "usage": {**aggregate_usage(results), "windows": 0}}
    return combine(p, results, attributed=not rewritten)


# --- Router.predict_long -----------------------------------------------------------------------

class LongScan:
    """`Router.predict_long`'s work in place of the agent's call (`call.router_one`'s `long`):
    after the start hooks, the chosen agent's `predict_long` on `ctx.states[0]` as the hooks
    left it."""

    def __init__(self, window: Any, stride: Any, aggregate: str, batch_size: Any, lang: Any):
        self.options = {"window": window, "stride": stride, "aggregate": aggregate,
                        "batch_size": batch_size}
        self.lang = lang

    def __call__(self, ctx: PredictContext) -> Dict[str, Any]:
        scan = getattr(ctx.agent, "predict_long", None)
        if scan is None:
            raise refusal(
                ["model"], "%s has no predict_long, so a state longer than its window cannot "
                "be scanned; the PyTorch Agent and ONNXAgent implement it, and an agent "
                "attached by hand needs it too" % type(ctx.agent).__name__, None, "type_error")
        lang = said_language(self.lang, ctx.decision)
        options = dict(self.options)
        if reads(scan, "lang"):  # unreadable: True, a dropped language changes the answer
            options["lang"] = lang
        elif lang is not None:
            # caller data: bounded and escaped before it reaches a log line
            shown = (repr(lang[:32]) + ("..." if len(lang) > 32 else "")
                     if type(lang) is str else "<not a string>")
            warnings.warn("kime: Router.predict_long: %s.predict_long has no `lang` parameter, "
                          "so the %s language %s is not reaching it and the scan runs without it"
                          % (type(ctx.agent).__name__,
                             "requested" if self.lang is not None else "detected", shown),
                          RuntimeWarning, stacklevel=2)
        with defaults_skipped():
            return scan(ctx.states[0], ctx.questions, **options)
