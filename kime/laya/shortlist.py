"""Wide label sets: Laya's embedding shortlist and its tournament (`laya/shortlist.py`, 0.4.15).

Every option of a choice shares one `head_max_len` budget, so a question over dozens of labels
leaves each a few tokens. Two ways narrow it, with Laya's names, signatures, metadata, warnings
and refusals:

- `predict_shortlist` ranks each choice's options against the state by the cosine of a
  caller's `embed_fn` vectors, keeps the top `k` (`shortlist_choice`), and answers once;
- `predict_tournament` needs no embedder: it answers a wide choice in groups of at most
  `group_size` labels, the winners meet again until one group is left, then answers once more.

Both are callers of the call pipeline, never a copy of it: every answer is the agent's own
`predict` (an `Agent`, a `Router` with `model=` and the other keywords forwarded), and one
tournament round's groups go as separate questions of one call, so the engine answers them in
one shared forward pass. The tournament is written once, as a pipeline of the calls it needs
(`_tournament`), which the call pipeline's own drivers run: `driver.run` for
`predict_tournament`, `driver.run_async` for `predict_tournament_async`.
`embed_fn_from_agent` and `cached_embed_fn` live in `kime.laya.embedding`; they are re-exported
here, at Laya's import path, on first use.
"""
from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..errors import InvalidArgument, InvalidRequest, problem, warn_caller
from ..render import Question, render_options, serialize_state
from .driver import Blocking, Step, run, run_async

DEFAULT_SHORTLIST_K = 20
DEFAULT_TOURNAMENT_GROUP = 16

EmbedFn = Callable[[Sequence[str]], Any]
"""Texts -> an array of shape (len(texts), dim): the caller's embedder."""
Questions = Dict[Any, Any]
Result = Dict[str, Any]
Loc = List[Any]


# --- the shortlist ------------------------------------------------------------------------------

def shortlist_choice(state: Any, criteria: Any, embed_fn: EmbedFn, k: int = DEFAULT_SHORTLIST_K,
                     *, instructions: Optional[str] = None, return_scores: bool = False) -> Any:
    """The `k` choice labels of `criteria` closest to `state`, best first.

    `embed_fn` is called once, on the query (the state, after `instructions` when given) and
    then each option as a choice renders it. With `k` at least the label count it is not called
    and the labels come back in criteria order. The rank is the signed cosine, ties keeping the
    earlier label, a zero vector scoring 0. `return_scores=True` returns `(labels, scores)`,
    `scores` None when nothing was dropped (as in `predict_shortlist`'s metadata).
    """
    labels, scores, _passthrough, _n = _rank(state, criteria, embed_fn, k, instructions,
                                             ["criteria"])
    return (labels, scores) if return_scores else labels


def predict_shortlist(agent: Any, state: Any, questions: Dict[str, Dict[str, Any]],
                      embed_fn: EmbedFn, k: int = DEFAULT_SHORTLIST_K,
                      **predict_kwargs: Any) -> Dict[str, Any]:
    """Narrow each choice question to its top `k` labels (`shortlist_choice`), then answer
    every question in one `predict` (or `system_one`) call with `predict_kwargs` forwarded.

    A choice of at most `k` labels, and every other question, goes through unchanged; the
    caller's dict is left alone. A narrowed choice loses its `option_order` (it has one slot
    per original label), with one `RuntimeWarning` naming the question. The result is the
    call's, plus `shortlist`: per choice id, `labels` (kept, in rank order, or criteria order
    on a passthrough), `scores` (their signed cosines, None when nothing was dropped), `k`, `n`
    (the label count before narrowing) and `passthrough`.
    """
    _check_questions(questions)
    checked = _check_k(k)
    reduced: Questions = {}
    meta: Dict[Any, Dict[str, Any]] = {}
    warned: Set[Any] = set()
    for qid, qdef in questions.items():
        if not _is_choice(qdef):
            reduced[qid] = qdef
            continue
        criteria = _criteria_of(qid, qdef)
        labels, scores, passthrough, n = _rank(state, criteria, embed_fn, checked,
                                               qdef.get("instructions"),
                                               ["questions", qid, "criteria"])
        meta[qid] = {"labels": list(labels), "scores": scores, "k": checked, "n": n,
                     "passthrough": passthrough}
        reduced[qid] = qdef if passthrough else _narrowed(qid, qdef, labels, warned)
    out = dict(_ask(agent, state, reduced, predict_kwargs))
    out["shortlist"] = meta
    return out


def _rank(state: Any, criteria: Any, embed_fn: EmbedFn, k: Any, instructions: Any, loc: Loc
          ) -> Tuple[List[Any], Optional[List[float]], bool, int]:
    """(kept labels, their scores or None, passthrough, label count)."""
    checked = _check_k(k)
    items = _criteria_items(criteria, loc)
    keys = [key for key, _value in items]
    if checked >= len(items):
        return keys, None, True, len(items)
    choice = Question(id="shortlist", qtype="choice", instructions="", crit=dict(items))
    vectors = _embeddings(embed_fn, [_query_text(state, instructions)] + render_options(choice))
    sims = _cosine(vectors[0], vectors[1:])
    order = np.argsort(-sims, kind="mergesort")[:checked]  # stable: a tie keeps the earlier
    return ([keys[int(i)] for i in order], [float(sims[int(i)]) for i in order], False,
            len(items))


def _query_text(state: Any, instructions: Any) -> str:
    body = serialize_state(state)
    if instructions is None or instructions == "":
        return body
    if not isinstance(instructions, str):
        instructions = json.dumps(instructions, ensure_ascii=False)
    return "%s\n%s" % (instructions, body)


def _embeddings(embed_fn: EmbedFn, texts: List[str]) -> np.ndarray:
    """`embed_fn(texts)` as float64, checked for shape, non-finite values as 0 (Laya's rule)."""
    if not callable(embed_fn):
        raise InvalidArgument([problem(["embed_fn"], "embed_fn must be callable",
                                       "type_error.callable", embed_fn)])
    raw = embed_fn(list(texts))
    if hasattr(raw, "detach"):  # a torch tensor from the caller's own embedder
        raw = raw.detach().float().cpu().numpy()
    vectors = np.asarray(raw, dtype=np.float64)
    if vectors.ndim != 2 or vectors.shape[0] != len(texts) or vectors.shape[1] < 1:
        raise InvalidRequest([problem(
            ["embed_fn"], "embed_fn must return an array of shape (%d, dim), got %s"
            % (len(texts), tuple(vectors.shape)), "value_error.shape", list(vectors.shape))])
    return np.nan_to_num(vectors, copy=True, nan=0.0, posinf=0.0, neginf=0.0)


def _cosine(query: np.ndarray, docs: np.ndarray) -> np.ndarray:
    """The signed cosine of each row of `docs` with `query`; 0 against a zero vector."""
    sims = np.zeros(docs.shape[0], dtype=np.float64)
    query_norm = float(np.linalg.norm(query))
    if query_norm == 0.0 or docs.shape[0] == 0:
        return sims
    denom = np.linalg.norm(docs, axis=1) * query_norm
    ok = denom > 0.0
    if np.any(ok):
        sims[ok] = np.clip(np.dot(docs[ok], query) / denom[ok], -1.0, 1.0)
    return sims


# --- the tournament -----------------------------------------------------------------------------

def predict_tournament(agent: Any, state: Any, questions: Dict[str, Dict[str, Any]],
                       group_size: int = DEFAULT_TOURNAMENT_GROUP,
                       **predict_kwargs: Any) -> Dict[str, Any]:
    """Narrow each choice of more than `group_size` labels by elimination, then answer every
    question in one more `predict` call; `predict_kwargs` go to every call.

    A round cuts each such choice, in criteria order, into near-equal groups of at most
    `group_size` labels; one call answers every group of every choice (the groups are separate
    questions, so they share one forward pass) and each group's answer goes on. Rounds repeat
    until no choice has more than `group_size` labels (one round up to `group_size ** 2`). A
    choice that played a round loses its `option_order`, with one `RuntimeWarning` naming it.
    The result is the final call's, plus `tournament`: per choice id, `labels` (the finalists,
    in criteria order), `n` (the label count before the first round) and `rounds`. Every
    reply is checked to be a dict, a round's to hold an `answers` dict.
    """
    return run(_tournament(agent, state, questions, group_size, predict_kwargs))


async def predict_tournament_async(agent: Any, state: Any, questions: Dict[str, Dict[str, Any]],
                                   group_size: int = DEFAULT_TOURNAMENT_GROUP,
                                   **predict_kwargs: Any) -> Dict[str, Any]:
    """`predict_tournament` for asyncio: each call is the agent's `predict_async` (a kime
    `Agent` or `Router`), or its `predict` on a worker thread, so the loop never blocks."""
    return await run_async(_tournament(agent, state, questions, group_size, predict_kwargs))


def _tournament(agent: Any, state: Any, questions: Any, group_size: Any,
                kwargs: Dict[str, Any]) -> Step[Dict[str, Any]]:
    """The tournament as a pipeline (`kime.laya.driver`): each round's groups, then the final
    set, one `_asking` step each; returns the result with its `tournament` entry."""
    _check_questions(questions)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise InvalidRequest([problem(["group_size"], "group_size must be an integer of at "
                                      "least 2, got %r" % (group_size,), "value_error",
                                      group_size)])
    meta: Dict[Any, Dict[str, Any]] = {}
    for qid, qdef in questions.items():
        if _is_choice(qdef):
            labels = choice_labels(_criteria_of(qid, qdef), ["questions", qid, "criteria"])
            meta[qid] = {"labels": labels, "n": len(labels), "rounds": 0}
    warned: Set[Any] = set()
    while True:
        groups = [(qid, part) for qid, entry in meta.items()
                  for part in _groups(entry["labels"], group_size)]
        if not groups:
            break
        reply = yield _asking(agent, state, {
            str(i): _narrowed(qid, questions[qid], labels, warned)
            for i, (qid, labels) in enumerate(groups)}, kwargs)
        answers = _round_answers(reply)
        winners: Dict[Any, List[Any]] = {}
        for i, (qid, _labels) in enumerate(groups):
            winners.setdefault(qid, []).append(answers[str(i)]["choice"])
        for qid, labels in winners.items():
            meta[qid]["labels"] = labels
            meta[qid]["rounds"] += 1
    final = dict(questions)
    for qid, entry in meta.items():
        if entry["rounds"]:
            final[qid] = _narrowed(qid, questions[qid], entry["labels"], warned)
    out = dict((yield _asking(agent, state, final, kwargs)))
    out["tournament"] = meta
    return out


def _groups(labels: List[Any], group_size: int) -> List[List[Any]]:
    """`labels` in order as near-equal groups of at most `group_size`; none when they fit one."""
    parts = -(-len(labels) // group_size)
    if parts < 2:
        return []
    return [labels[i * len(labels) // parts:(i + 1) * len(labels) // parts] for i in range(parts)]


def _round_answers(reply: Result) -> Dict[str, Any]:
    """A round's `answers`, which the tournament indexes by its own group numbers (a group the
    reply leaves out raises the plain `KeyError` of its number, as in Laya)."""
    answers = reply.get("answers")
    if not isinstance(answers, dict):
        raise TypeError("predict/system_one must return an answers dict, got %s"
                        % type(answers).__name__)
    return answers


# --- what both share ----------------------------------------------------------------------------

def _predictor(agent: Any) -> Callable[..., Any]:
    fn = getattr(agent, "predict", None)
    if fn is None:
        fn = getattr(agent, "system_one", None)
    if fn is None:
        raise InvalidArgument([problem(["agent"], "agent must provide predict or system_one",
                                       "type_error", repr(agent))])
    return fn


def _checked(reply: Any) -> Result:
    """A reply to one call, which these functions return and index: a dict, or a TypeError
    naming the contract instead of an indexing error from in here."""
    if not isinstance(reply, dict):
        raise TypeError("predict/system_one must return a dict, got %s" % type(reply).__name__)
    return reply


def _ask(agent: Any, state: Any, questions: Questions, kwargs: Dict[str, Any]) -> Result:
    return _checked(_predictor(agent)(state, questions, **kwargs))


def _asking(agent: Any, state: Any, questions: Questions, kwargs: Dict[str, Any]) -> Blocking:
    """One call of the agent as a pipeline step: its `predict` (off the loop under the async
    driver), or its `predict_async` when it has one and an event loop drives."""
    twin = getattr(agent, "predict_async", None)
    if twin is None:
        _predictor(agent)  # refused here, under either driver, before anything runs
    return Blocking(lambda: _ask(agent, state, questions, kwargs),
                    awaitable=None if twin is None else
                    lambda: _checked_async(twin(state, questions, **kwargs)))


async def _checked_async(pending: Any) -> Result:
    return _checked(await pending)


def _check_questions(questions: Any) -> None:
    if not isinstance(questions, dict):
        raise InvalidArgument([problem(["questions"], "questions must be a dict of question id "
                                       "-> definition", "type_error.dict", questions)])


def _check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise InvalidRequest([problem(["k"], "k must be a positive integer, got %r" % (k,),
                                      "value_error", k)])
    return k


def _is_choice(qdef: Any) -> bool:
    """Only a dict choice is narrowed; anything else goes to the agent, which judges it."""
    return isinstance(qdef, dict) and qdef.get("type") == "choice"


def _criteria_of(qid: Any, qdef: Dict[str, Any]) -> Any:
    if "criteria" not in qdef:
        raise InvalidRequest([problem(["questions", qid, "criteria"], "question %r is a choice "
                                      "but has no criteria" % (qid,), "value_error.missing",
                                      None)])
    return qdef["criteria"]


def choice_labels(criteria: Any, loc: Sequence[Any] = ("criteria",)) -> List[Any]:
    """A choice's labels in criteria order, refused as the shortlist and the tournament refuse
    them (not a dict or list, empty, a label repeated), the problem located at `loc`: what the
    server asks to plan its tournaments."""
    return [label for label, _value in _criteria_items(criteria, list(loc))]


def _criteria_items(criteria: Any, loc: Loc) -> List[Tuple[Any, Any]]:
    """A choice's (label, description) pairs in order: a list's labels have no description."""
    if isinstance(criteria, dict):
        items = list(criteria.items())
    elif isinstance(criteria, list):
        items = [(label, None) for label in criteria]
    else:
        raise InvalidArgument([problem(loc, "choice criteria must be a dict or list, got %s"
                                       % type(criteria).__name__, "type_error", criteria)])
    if not items:
        raise InvalidRequest([problem(loc, "choice criteria must contain at least one option",
                                      "value_error", criteria)])
    seen: Set[Any] = set()
    for label, _value in items:
        if label in seen:  # 1 and 1.0 (and True) are one answer key, as in a dict
            raise InvalidRequest([problem(loc, "choice criteria label %r is duplicated"
                                          % (label,), "value_error", criteria)])
        seen.add(label)
    return items


def _narrowed(qid: Any, qdef: Dict[str, Any], labels: List[Any], warned: Set[Any]
              ) -> Dict[str, Any]:
    """A copy of the choice `qdef` over `labels` only. An `option_order` is dropped, warned
    once per question per call: it has a slot per original label, and remapping it onto the
    kept ones would move options between slots."""
    criteria = qdef["criteria"]
    narrowed = dict(qdef, criteria=({label: criteria[label] for label in labels}
                                    if isinstance(criteria, dict) else list(labels)))
    if "option_order" not in narrowed:
        return narrowed
    order = narrowed.pop("option_order")
    if qid not in warned:
        warned.add(qid)
        try:
            had = "%d slots" % len(order)
        except TypeError:
            had = repr(order)
        warn_caller("laya.shortlist: question %r: 'option_order' (%s) was dropped because the "
                    "label set was narrowed to %d; the order no longer fits the kept options "
                    "and remapping it onto them would move options between slots."
                    % (qid, had, len(labels)), RuntimeWarning)
    return narrowed


_EMBEDDING = ("embed_fn_from_agent", "cached_embed_fn")


def __getattr__(name: str) -> Any:
    """`embed_fn_from_agent` and `cached_embed_fn` at Laya's path (`laya.shortlist`), loaded
    from `kime.laya.embedding` on first use."""
    if name in _EMBEDDING:
        import importlib

        value = getattr(importlib.import_module("kime.laya.embedding"), name)
        globals()[name] = value
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


__all__ = ["DEFAULT_SHORTLIST_K", "DEFAULT_TOURNAMENT_GROUP", "choice_labels", "predict_shortlist",
           "predict_tournament", "predict_tournament_async", "shortlist_choice"]
"""This module's own names; the two embedding helpers come through `__getattr__`."""
