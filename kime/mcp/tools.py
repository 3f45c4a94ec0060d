"""laya-mcp-server's decision tools over a kime `Router` (or one `Agent`): `laya_predict`,
`laya_route`, `laya_predict_batch`, `laya_route_batch`, `laya_decide`, `laya_preset` and
`laya_predict_long`, with Laya 0.4.15's arguments, JSON results and refusals
(`laya/mcp/tools.py`). The wide-choice tools are `kime.mcp.wide`, the status `kime.mcp.status`.

Each is a caller of a `Decider` (`kime.laya.decider`: the Router, the one Agent, or the
`RemoteRouter` over a server), which answers through Laya's call pipeline (`kime.laya.call`) or
over HTTP: a tool checks its arguments (`kime.mcp.validate`) into one `CallOptions`, asks, and
shapes the answer (`routing`, `device`, `latency_ms`). `run_tool` is what the server calls:
it turns whatever a tool raises into `ToolError`'s `{"error", "message"}`, a caller's mistake
found by the engine (`kime.InvalidRequest`) as `invalid_request`, where laya reports its
`ValueError`s as `internal_error`.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..errors import InvalidRequest
from ..laya.options import ROUTING_HINTS, CallOptions
from ..laya.limits import STATE_CHARS
from .validate import (AUTO, ToolError, refuse_pinned, validate_batch,
                       validate_budget, validate_hooks_timeout, validate_lang,
                       validate_lang_guess, validate_min_confidence, validate_model,
                       validate_positive, validate_questions, validate_state, validate_task)

Result = Dict[str, Any]
NO_ROUTER = {"model": None, "repo": None, "reason": "auto routing without router"}


def run_tool(fn: Callable[..., Result], **kwargs: Any) -> Result:
    """`fn(**kwargs)`, or the `ToolError` a client reads: its own, `invalid_request` for a
    request the engine refused, `internal_error` (`Type: message`) for anything else."""
    try:
        return fn(**kwargs)
    except ToolError:
        raise
    except InvalidRequest as exc:
        raise ToolError("invalid_request", str(exc)) from exc
    except Exception as exc:
        raise ToolError("internal_error", "%s: %s" % (type(exc).__name__, exc)) from exc


def resolver(router: Any) -> Optional[Callable[[Any], str]]:
    """The serving Router's name resolution (its registered checkpoints too), if any."""
    return getattr(router, "resolve", None) if router is not None else None


def device_of(agent: Any) -> Optional[str]:
    """The device type an agent answers on (`cpu`, `cuda`), None when unreadable."""
    device = getattr(agent, "device", None)
    kind = getattr(device, "type", None)
    if isinstance(kind, str) and kind:
        return kind
    return device if isinstance(device, str) and device else None


def resident(router: Any, name: Any) -> Any:
    """The agent the Router holds for `name` now, without loading or touching its LRU."""
    snapshot = getattr(router, "resident", None)
    if not callable(snapshot) or not isinstance(name, str):
        return None
    return snapshot().get(name)


def reading_device(router: Any, agent: Any, model: str, routing: Any) -> Optional[str]:
    """The device of the checkpoint that answered: the pinned agent's, or the routed one's."""
    if model != AUTO and agent is not None:
        return device_of(agent)
    used = (routing or {}).get("model") if isinstance(routing, dict) else None
    return device_of(resident(router, used)) if used else None


def answerer(model: str, router: Any, agent: Any) -> Tuple[Any, Dict[str, Any]]:
    """Who answers a tool's call, and the `model` pin to send it: the one agent (auto without a
    Router, or any pinned model: it answers on its own checkpoint), else the Router, pinned
    when a model is named. `models_not_ready` when neither is there."""
    if model == AUTO and router is None:
        if agent is None:
            raise ToolError("models_not_ready", "Router is not loaded (auto mode)")
        return agent, {}
    if model != AUTO and agent is not None:
        return agent, {}
    if router is None:
        raise ToolError("models_not_ready", "no agent/router loaded")
    return router, ({} if model == AUTO else {"model": model})


def answers_of(result: Any, what: str = "predict") -> Dict[str, Any]:
    if not isinstance(result, dict):
        raise ToolError("internal_error", "%s returned non-object" % what)
    answers = result.get("answers")
    if not isinstance(answers, dict):
        raise ToolError("internal_error", "%s result has no 'answers' object" % what)
    return answers


def decision_dict(decision: Any) -> Dict[str, Any]:
    """A routing decision as the tools report it: model, repo and reason."""
    get = decision.get if isinstance(decision, dict) else (
        lambda key: getattr(decision, key, None))
    return {"model": get("model"), "repo": get("repo"), "reason": get("reason")}


def _controls(task: Any, lang: Any, max_len: Any, head_max_len: Any, lang_guess: Any,
              min_confidence: Any, resolve: Any) -> Dict[str, Any]:
    values = {"task": validate_task(task, resolve), "lang": validate_lang(lang),
              "max_len": validate_budget(max_len, "max_len"),
              "head_max_len": validate_budget(head_max_len, "head_max_len"),
              "lang_guess": validate_lang_guess(lang_guess),
              "min_confidence": validate_min_confidence(min_confidence)}
    return {k: v for k, v in values.items() if v is not None}


def laya_predict(state: Any, questions: Any, model: Any = AUTO, *, task: Any = None,
                 lang: Any = None, lang_guess: Any = None, max_len: Any = None,
                 head_max_len: Any = None, min_confidence: Any = None, router: Any = None,
                 agent: Any = None, max_state_chars: int = STATE_CHARS) -> Result:
    """Answer typed questions in one forward pass: the Router routes (or `model` pins), the
    answers come back with `routing`, `latency_ms` and the answering `device`."""
    state_d = validate_state(state, max_state_chars)
    questions_d = validate_questions(questions)
    resolve = resolver(router)
    model_name = validate_model(model, resolve)
    controls = _controls(task, lang, max_len, head_max_len, lang_guess, min_confidence, resolve)
    refuse_pinned(model_name, task=controls.get("task"), lang_guess=controls.get("lang_guess"))
    target, pin = answerer(model_name, router, agent)
    options = CallOptions(**controls, **pin)
    if target is agent:
        options = options.without(*ROUTING_HINTS)
    started = time.perf_counter()
    result = target.answer(state_d, questions_d, options)
    latency_ms = (time.perf_counter() - started) * 1000.0
    answers = answers_of(result)
    unrouted = router is None and model_name == AUTO
    routing = result.get("routing")
    if unrouted or (not routing and model_name == AUTO):
        routing = dict(NO_ROUTER)
    elif not routing:
        routing = {"model": model_name, "repo": None, "reason": "explicit model"}
    out: Result = {"answers": answers, "routing": routing, "latency_ms": round(latency_ms, 3)}
    device = None if unrouted else reading_device(router, agent, model_name,
                                                  result.get("routing"))
    if device:
        out["device"] = device
    return out


def laya_route(state: Any, questions: Any, *, model: Any = None, task: Any = None,
               lang: Any = None, lang_guess: Any = None, router: Any = None,
               max_state_chars: int = STATE_CHARS) -> Result:
    """The checkpoint `laya_predict` with the same controls would answer from, loading none."""
    state_d = validate_state(state, max_state_chars)
    questions_d = validate_questions(questions)
    resolve = resolver(router)
    model_name = validate_model(model, resolve)
    task_name = validate_task(task, resolve)
    hint = validate_lang_guess(lang_guess)
    refuse_pinned(model_name, task=task_name, lang_guess=hint)
    overrides = {k: v for k, v in (("model", None if model_name == AUTO else model_name),
                                   ("task", task_name), ("lang", validate_lang(lang)),
                                   ("lang_guess", hint)) if v is not None}
    if router is None:
        raise ToolError("models_not_ready", "Router is not loaded")
    return decision_dict(router.route(state_d, questions_d, **overrides))


def _counts(models: List[Any]) -> Dict[str, int]:
    counts: Dict[str, int] = {}
    for name in models:
        key = name if isinstance(name, str) and name else "unknown"
        counts[key] = counts.get(key, 0) + 1
    return counts


def laya_predict_batch(requests: Any, batch_size: Any = None, hooks_timeout: Any = None,
                       min_confidence: Any = None, sort_by_length: bool = False, *,
                       router: Any = None, max_state_chars: int = STATE_CHARS) -> Result:
    """Many requests in one `Router.predict_batch`: routed, grouped by checkpoint and question
    set, answered in shared forward passes; results in input order with `model_counts`."""
    items = validate_batch(requests, resolver(router), max_state_chars)
    options: Dict[str, Any] = {}
    if batch_size is not None:
        options["batch_size"] = validate_positive(batch_size, "batch_size", 1,
                                                  "a positive integer")
    gate = validate_min_confidence(min_confidence)
    timeout = validate_hooks_timeout(hooks_timeout)
    if timeout is not None:
        options["hooks_timeout"] = timeout
    if gate is not None:
        options["min_confidence"] = gate
    if sort_by_length:
        options["sort_by_length"] = True
    if router is None:
        raise ToolError("models_not_ready", "Router is not loaded")
    started = time.perf_counter()
    results = router.predict_batch(items, **options)
    latency_ms = (time.perf_counter() - started) * 1000.0
    if not isinstance(results, list) or len(results) != len(items):
        raise ToolError("internal_error", "predict_batch returned %r results for %d requests"
                        % (len(results) if isinstance(results, list)
                           else type(results).__name__, len(items)))
    out: List[Result] = []
    for result in results:
        entry: Result = {"answers": answers_of(result), "routing": result.get("routing") or {}}
        device = reading_device(router, None, AUTO, result.get("routing"))
        if device:
            entry["device"] = device
        out.append(entry)
    return {"requests": out, "model_counts": _counts([e["routing"].get("model") for e in out]),
            "total_latency_ms": round(latency_ms, 3),
            "per_request_latency_ms": round(latency_ms / len(items), 3)}


def laya_route_batch(requests: Any, hooks_timeout: Any = None, *, router: Any = None,
                     max_state_chars: int = STATE_CHARS) -> Result:
    """Every request's routing decision, in order, with `model_counts`; no forward pass."""
    items = validate_batch(requests, resolver(router), max_state_chars)
    timeout = validate_hooks_timeout(hooks_timeout)
    if router is None:
        raise ToolError("models_not_ready", "Router is not loaded")
    decisions = (router.route_batch(items) if timeout is None
                 else router.route_batch(items, hooks_timeout=timeout))
    out = [decision_dict(d) for d in decisions]
    return {"decisions": out, "model_counts": _counts([d["model"] for d in out])}


def laya_decide(state: Any, schema: Any, model: Any = AUTO, *, min_confidence: Any = None,
                router: Any = None, agent: Any = None,
                max_state_chars: int = STATE_CHARS) -> Result:
    """A JSON Schema's values (enum members, integer levels, booleans) decided in one forward
    pass (`kime.laya.structured.decide`), with per-field confidence and probabilities."""
    from ..laya.structured import SchemaError, decide

    state_d = validate_state(state, max_state_chars)
    model_name = validate_model(model, resolver(router))
    gate = validate_min_confidence(min_confidence)
    runner, pin = answerer(model_name, router, agent)
    started = time.perf_counter()
    try:
        details = decide(runner, state_d, schema=schema, return_details=True,
                         min_confidence=gate, **pin)
    except SchemaError as exc:
        raise ToolError("invalid_schema", str(exc)) from exc
    latency_ms = (time.perf_counter() - started) * 1000.0
    out: Result = {"values": details.values, "confidence": details.confidence,
                   "probabilities": details.probabilities,
                   "routing": details.routing or {"model": model_name, "repo": None,
                                                  "reason": "explicit model"},
                   "latency_ms": round(latency_ms, 3)}
    if details.usage:
        out["usage"] = details.usage
    device = reading_device(router, agent, model_name, details.routing)
    if device:
        out["device"] = device
    return out


def laya_predict_long(state: Any, questions: Any, model: Any = AUTO, *, window: Any = None,
                      stride: Any = None, task: Any = None, lang: Any = None,
                      router: Any = None, agent: Any = None, max_state_chars: int = 0
                      ) -> Result:
    """A state longer than one window, scanned in overlapping windows and answered per
    question from its deciding window (`predict_long`); `windows` counts them. No state limit
    by default: reading past the first window is this tool's purpose."""
    state_d = validate_state(state, max_state_chars)
    questions_d = validate_questions(questions)
    resolve = resolver(router)
    model_name = validate_model(model, resolve)
    scan = {k: v for k, v in (("task", validate_task(task, resolve)), ("lang", validate_lang(lang)),
                              ("window", validate_budget(window, "window")),
                              ("stride", validate_budget(stride, "stride"))) if v is not None}
    refuse_pinned(model_name, task=scan.get("task"))
    target, pin = answerer(model_name, router, agent)
    if target is agent:
        scan.pop("task", None)
    started = time.perf_counter()
    result = target.predict_long(state_d, questions_d, **scan, **pin)
    latency_ms = (time.perf_counter() - started) * 1000.0
    answers = answers_of(result, "predict_long")
    usage = result.get("usage") or {}
    unrouted = router is None and model_name == AUTO
    if unrouted:
        routing: Any = dict(NO_ROUTER)
    elif model_name == AUTO:
        routing = result.get("routing") or dict(NO_ROUTER)
    else:
        routing = {"model": model_name, "repo": None, "reason": "explicit model"}
    out: Result = {"answers": answers, "routing": routing,
                   "windows": usage.get("windows", 0) if isinstance(usage, dict) else 0,
                   "latency_ms": round(latency_ms, 3)}
    device = None if unrouted else reading_device(router, agent, model_name,
                                                  result.get("routing"))
    if device:
        out["device"] = device
    return out
