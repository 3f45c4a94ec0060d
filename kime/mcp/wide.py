"""laya-mcp-server's two tools for choices of many options: `laya_shortlist` (the answering
checkpoint's own embeddings keep the `k` closest labels, then one forward pass) and
`laya_tournament` (elimination rounds in groups, no embeddings), with Laya 0.4.15's arguments,
results and refusals (`laya/mcp/tools.py`).

Both are callers of `kime.laya.shortlist` (`predict_shortlist`, `predict_tournament`), whose
every answer is a Router's or Agent's `predict`. The route is decided once, up front, and the
answering checkpoint is then pinned for every call. A narrowed question loses its
`option_order`; the client cannot see the process's warning, so the result says so in
`option_order_dropped`.

Where laya refuses: in-process, laya-mcp-server answers both; over `--base-url` a tournament's
rounds are `/v1/systemone` calls like any other, so kime answers it there too, where laya says
`unsupported_remote`. The shortlist needs the checkpoint's encoder in this process, which a
laya-serve-compatible server does not expose, so it stays `unsupported_remote`.
"""
from __future__ import annotations

import threading
import time
import weakref
from typing import Any, Dict, Optional, Tuple

from .tools import AUTO, Result, answers_of, decision_dict, device_of, laya_predict, resident
from ..laya.limits import STATE_CHARS
from .validate import (ToolError, refuse_pinned, validate_budget,
                       validate_lang, validate_lang_guess, validate_min_confidence,
                       validate_model, validate_positive, validate_questions, validate_state,
                       validate_task)

_EMBEDDERS: "weakref.WeakKeyDictionary[Any, Any]" = weakref.WeakKeyDictionary()
_EMBEDDERS_LOCK = threading.Lock()


def is_remote(router: Any) -> bool:
    """Whether `router` answers from a server (`kime.mcp.remote.RemoteRouter`)."""
    return getattr(router, "remote", False) is True


def _embedder(agent: Any) -> Any:
    """The agent's `embed_fn_from_agent` behind Laya's LRU of vectors, one per agent for its
    lifetime: a fixed label set is embedded once, and a reloaded checkpoint starts afresh."""
    from ..laya.embedding import cached_embed_fn, embed_fn_from_agent

    with _EMBEDDERS_LOCK:
        cached = _EMBEDDERS.get(agent)
        if cached is None:
            cached = cached_embed_fn(embed_fn_from_agent(agent))
            _EMBEDDERS[agent] = cached
        return cached


def _routing_controls(task: Any, lang: Any, lang_guess: Any, resolve: Any) -> Dict[str, Any]:
    return {k: v for k, v in (("task", validate_task(task, resolve)),
                              ("lang", validate_lang(lang)),
                              ("lang_guess", validate_lang_guess(lang_guess))) if v is not None}


def _answering(max_len: Any, head_max_len: Any, min_confidence: Any) -> Dict[str, Any]:
    values = {"max_len": validate_budget(max_len, "max_len"),
              "head_max_len": validate_budget(head_max_len, "head_max_len"),
              "min_confidence": validate_min_confidence(min_confidence)}
    return {k: v for k, v in values.items() if v is not None}


def _route_once(router: Any, state: Any, questions: Any, controls: Dict[str, Any],
                forward: Dict[str, Any]) -> Tuple[Dict[str, Any], str]:
    """The auto route, decided once: its report and model; the language it detected goes to
    the answering calls (a pinned call detects nothing) unless the caller named one."""
    decision = router.route(state, questions, **controls)
    routing = decision_dict(decision)
    routed = routing["model"]
    if not isinstance(routed, str) or not routed:
        raise ToolError("internal_error", "router.route returned no model")
    detection = (decision.get("detection") if isinstance(decision, dict)
                 else getattr(decision, "detection", None))
    detected = detection.get("language") if isinstance(detection, dict) else None
    if isinstance(detected, str) and detected and "lang" not in forward:
        forward["lang"] = detected
    return routing, routed


def _dropped(questions: Dict[str, Any], meta: Dict[str, Any], kept: str) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for name, entry in meta.items():
        narrowed = entry.get("rounds") if kept == "rounds" else not entry.get("passthrough")
        if narrowed and "option_order" in questions.get(name, {}):
            out[name] = {"n": entry["n"] if "n" in entry else len(questions[name]["criteria"]),
                         "kept": len(entry["labels"])}
    return out


def laya_shortlist(state: Any, questions: Any, model: Any = AUTO, k: Any = None, *,
                   task: Any = None, lang: Any = None, lang_guess: Any = None,
                   max_len: Any = None, head_max_len: Any = None, min_confidence: Any = None,
                   router: Any = None, agent: Any = None, embed_fn: Any = None,
                   max_state_chars: int = STATE_CHARS) -> Result:
    """Each wide choice narrowed to its `k` labels closest to the state (cosine of the
    answering checkpoint's mean-pooled encoder vectors), then one forward pass; `shortlist`
    reports the kept labels and scores per question."""
    from ..laya.shortlist import DEFAULT_SHORTLIST_K, predict_shortlist

    if router is not None and agent is None and is_remote(router):
        raise ToolError("unsupported_remote", "laya_shortlist embeds options with the answering "
                        "checkpoint's encoder in this process, which a server at --base-url does "
                        "not expose; use laya_tournament (answered by the server's rounds) or "
                        "laya_predict with head_max_len raised, or run kime mcp without "
                        "--base-url")
    state_d = validate_state(state, max_state_chars)
    questions_d = validate_questions(questions)
    resolve = getattr(router, "resolve", None)
    model_name = validate_model(model, resolve)
    controls = _routing_controls(task, lang, lang_guess, resolve)
    forward = _answering(max_len, head_max_len, min_confidence)
    refuse_pinned(model_name, task=controls.get("task"), lang_guess=controls.get("lang_guess"))
    if "lang" in controls:
        forward["lang"] = controls["lang"]
    k = DEFAULT_SHORTLIST_K if k is None else validate_positive(k, "k", 1, "a positive integer")
    target: Any = router
    embed_agent: Any = agent
    if model_name == AUTO and router is None and agent is not None:
        routing: Dict[str, Any] = {"model": None, "repo": None,
                                   "reason": "auto routing without router"}
        target = agent
    elif model_name == AUTO:
        if router is None:
            raise ToolError("models_not_ready", "Router is not loaded (auto mode)")
        routing, routed = _route_once(router, state_d, questions_d, controls, forward)
        forward["model"] = routed
        embed_agent = resident(router, routed) or router.load(routed)
    else:
        routing = {"model": model_name, "repo": None, "reason": "explicit model"}
        if agent is not None:
            target = agent
        elif router is None:
            raise ToolError("models_not_ready", "no agent/router loaded")
        else:
            forward["model"] = model_name
            embed_agent = resident(router, model_name) or router.load(model_name)
    if embed_fn is None:
        try:
            embed_fn = _embedder(embed_agent)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ToolError("models_not_ready", "cannot build shortlist embeddings from "
                            "checkpoint %r: %s" % (routing["model"], exc)) from exc
    started = time.perf_counter()
    result = predict_shortlist(target, state_d, questions_d, embed_fn, k=k, **forward)
    latency_ms = (time.perf_counter() - started) * 1000.0
    meta = result.get("shortlist") or {}
    out: Result = {"answers": answers_of(result), "routing": routing, "shortlist": meta,
                   "latency_ms": round(latency_ms, 3)}
    dropped = _dropped(questions_d, meta, "passthrough")
    if dropped:
        out["option_order_dropped"] = dropped
    device = device_of(embed_agent)
    if device:
        out["device"] = device
    return out


class _Rounds:
    """The tournament's predictor: every call is `laya_predict` on the pinned checkpoint, and
    each round's winner must be one of its group's labels."""

    def __init__(self, model: str, router: Any, agent: Any, forward: Dict[str, Any],
                 max_state_chars: int):
        self.model, self.router, self.agent = model, router, agent
        self.forward, self.max_state_chars = forward, max_state_chars

    def predict(self, state: Any, questions: Dict[str, Any]) -> Result:
        result = laya_predict(state, questions, model=self.model, router=self.router,
                              agent=self.agent, max_state_chars=self.max_state_chars,
                              **self.forward)
        for name, spec in questions.items():
            if spec["type"] != "choice":
                continue
            answer = result["answers"].get(name)
            if (not isinstance(answer, dict) or not isinstance(answer.get("choice"), str)
                    or answer["choice"] not in spec["criteria"]):
                raise ToolError("internal_error", "tournament prediction for question %r must "
                                "return a choice from its criteria" % name)
        return result


def laya_tournament(state: Any, questions: Any, model: Any = AUTO, group_size: Any = 16, *,
                    task: Any = None, lang: Any = None, lang_guess: Any = None,
                    max_len: Any = None, head_max_len: Any = None, min_confidence: Any = None,
                    router: Any = None, agent: Any = None,
                    max_state_chars: int = STATE_CHARS) -> Result:
    """Wide choices answered by balanced elimination (`predict_tournament`): each round's
    groups share one forward pass, the winners meet until they fit one group, then one final
    call answers everything; `tournament` gives the finalists, `n` and `rounds`."""
    from ..laya.shortlist import predict_tournament

    state_d = validate_state(state, max_state_chars)
    questions_d = validate_questions(questions)
    resolve = getattr(router, "resolve", None)
    model_name = validate_model(model, resolve)
    if isinstance(group_size, bool) or not isinstance(group_size, int) or group_size < 2:
        raise ToolError("invalid_group_size", "group_size must be an integer of at least 2, "
                        "got %r" % (group_size,))
    controls = _routing_controls(task, lang, lang_guess, resolve)
    forward = _answering(max_len, head_max_len, min_confidence)
    refuse_pinned(model_name, task=controls.get("task"), lang_guess=controls.get("lang_guess"))
    if "lang" in controls:
        forward["lang"] = controls["lang"]
    started = time.perf_counter()
    routing: Optional[Dict[str, Any]] = None
    answering_agent = agent
    if model_name == AUTO and router is not None:
        routing, model_name = _route_once(router, state_d, questions_d, controls, forward)
        answering_agent = None
    rounds = _Rounds(model_name, router, answering_agent, forward, max_state_chars)
    out = predict_tournament(rounds, state_d, questions_d, group_size=group_size)
    if routing is not None:
        out["routing"] = routing
    out["latency_ms"] = round((time.perf_counter() - started) * 1000.0, 3)
    dropped = _dropped(questions_d, out["tournament"], "rounds")
    if dropped:
        out["option_order_dropped"] = dropped
    return out
