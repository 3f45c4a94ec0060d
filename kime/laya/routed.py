"""The Router's calls, as Laya 0.4.15 runs them: `predict` (route, load, start hooks, one
agent call, `routing` on the result, the gate, end hooks) and `predict_batch` (route every
request, then per checkpoint: start hooks per request, one shared `Agent.predict_batch` per
question schema and token budget, end hooks in reverse, results back in the caller's order).

An agent is leased from the Router for as long as a call uses it, so eviction by another
thread (`max_loaded`) never fails a call in flight.
"""
from __future__ import annotations

import contextvars
import inspect
import json
import time
import warnings
from typing import Any, Dict, List, Optional, Sequence

from .confidence import apply_confidence_gate, check_min_confidence
from .hooks import (PredictContext, aggregate_usage, compose_hooks, defaults_skipped, dispatch,
                    validate_timeout)
from .routing import refusal

Router = Any  # kime.laya.router.Router, which imports this module


def _takes_lang(fn: Any) -> bool:
    """Whether `fn` accepts `lang=` as a keyword (or forwards **kwargs); True when its signature
    cannot be read, because silently dropping a language changes the answer."""
    try:
        params = inspect.signature(fn).parameters.values()
    except Exception:  # any failure to introspect means "unknown"
        return True
    return any((p.name == "lang" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
               or p.kind is p.VAR_KEYWORD for p in params)


class Scan:
    """What `Router.predict_long` asks `predict` to run in place of `system_one`: after the
    start hooks, on `ctx.agent` and `ctx.states[0]` as the hooks left them."""

    def __init__(self, window: Any, stride: Any, aggregate: str, batch_size: Any, lang: Any):
        self.options = {"window": window, "stride": stride, "aggregate": aggregate,
                        "batch_size": batch_size}
        self.lang = lang

    def run(self, ctx: PredictContext) -> Dict[str, Any]:
        scan = getattr(ctx.agent, "predict_long", None)
        if scan is None:
            raise refusal(
                ["model"], "%s has no predict_long, so a state longer than its window cannot "
                "be scanned; the PyTorch Agent and ONNXAgent implement it, and an agent "
                "attached by hand needs it too" % type(ctx.agent).__name__, None, "type_error")
        lang = self.lang
        if lang is None:
            lang = ((ctx.decision or {}).get("detection") or {}).get("language")
        options = dict(self.options)
        if _takes_lang(scan):
            options["lang"] = lang
        elif lang is not None:
            # caller data: bounded and escaped before it reaches a log line
            shown = (repr(lang[:32]) + ("..." if len(lang) > 32 else "")
                     if type(lang) is str else "<not a string>")
            warnings.warn("kime: Router.predict_long: %s.predict_long has no `lang` parameter, "
                          "so the %s language %s is not reaching it and the scan runs without it"
                          % (type(ctx.agent).__name__,
                             "requested" if self.lang is not None else "detected", shown),
                          RuntimeWarning, stacklevel=5)
        return scan(ctx.states[0], ctx.questions, **options)


SCAN: "contextvars.ContextVar[Optional[Scan]]" = contextvars.ContextVar("kime_router_scan",
                                                                        default=None)
"""How `predict_long` hands `predict` its scan without a public parameter."""


def call_agent(method: Any, *args: Any, **kwargs: Any) -> Any:
    """Call an agent method, retrying without `lang` / `sort_by_length` for an agent-like
    object (attached by hand) whose method predates them, as Laya does."""
    try:
        return method(*args, **kwargs)
    except TypeError as exc:
        dropped = [k for k in ("lang", "sort_by_length") if kwargs.get(k) is not None
                   and "unexpected keyword argument '%s'" % k in str(exc)]
        if not dropped:
            raise
        return method(*args, **{k: v for k, v in kwargs.items() if k not in dropped})


def _budget(ctx: PredictContext) -> Dict[str, int]:
    """Token-budget overrides, only those set (an agent-like object may not take them)."""
    return {k: v for k, v in (("max_len", ctx.max_len), ("head_max_len", ctx.head_max_len))
            if v is not None}


def run_one(router: Router, scan: Optional[Scan], state: Any, questions: Any, *, model: Any,
            task: Any, lang: Any, lang_guess: Any, hooks: Any, on_predict_start: Any,
            on_predict_end: Any, hooks_raise: Any, hooks_timeout: Any, max_len: Any,
            head_max_len: Any, min_confidence: Any) -> Dict[str, Any]:
    """`Router.predict` (and `predict_long`, with `scan`)."""
    if state is None:
        raise refusal(
            ["state"], "state must not be None; pass a string, dict, or list", None,
            "type_error.none")
    if not isinstance(questions, dict):
        raise refusal(
            ["questions"], "questions must be a dict of question id -> definition, got %s"
            % type(questions).__name__, repr(questions), "type_error")
    gate = check_min_confidence(min_confidence) if min_confidence is not None else None
    active = compose_hooks(router.hooks, hooks, on_predict_start, on_predict_end)
    raise_errors = router.hooks_raise if hooks_raise is None else bool(hooks_raise)
    timeout = router.hooks_timeout if hooks_timeout is None else validate_timeout(hooks_timeout)
    lock = router._hooks_lock
    ctx = PredictContext(states=[state], questions=questions, router=router, max_len=max_len,
                         head_max_len=head_max_len)
    agent = None
    try:
        decision = router.route(state, questions, model=model, task=task, lang=lang,
                                lang_guess=lang_guess, hooks=hooks, hooks_raise=hooks_raise,
                                hooks_timeout=hooks_timeout)
        ctx.decision = dict(decision)
        ctx.model = decision["model"]
        agent = ctx.agent = router._lease(router.resolve(decision["model"]))
        said = lang
        if said is None and decision.get("detection") and decision["detection"].get("language"):
            said = decision["detection"]["language"]
        ctx.started_at = time.perf_counter()  # Laya's elapsed_ms starts after route and load
        dispatch(active, "on_predict_start", ctx, raise_errors=raise_errors, lock=lock,
                 timeout=timeout)
        if ctx.results is None:
            with defaults_skipped():  # they ran around this call already
                result = (scan.run(ctx) if scan is not None else
                          call_agent(agent.system_one, ctx.states[0], ctx.questions, lang=said,
                                     **_budget(ctx)))
            if scan is not None:
                result.setdefault("routing", dict(decision))
            else:
                result["routing"] = dict(decision)
            ctx.results = [result]
        else:  # answered by a start hook (a cache): it still promises `routing`
            for result in ctx.results:
                if isinstance(result, dict):
                    result.setdefault("routing", dict(decision))
    except BaseException as exc:
        ctx.error = exc
        try:
            dispatch(active, "on_error", ctx, raise_errors=raise_errors, lock=lock,
                     timeout=timeout)
        except BaseException as hook_exc:
            exc.__context__ = hook_exc
        raise
    finally:
        if agent is not None:
            router._return(agent)
        ctx.elapsed_ms = (time.perf_counter() - ctx.started_at) * 1000.0
        if ctx.results is not None:
            ctx.usage = aggregate_usage(ctx.results)
            apply_confidence_gate(ctx.results, gate)
        try:
            dispatch(active, "on_predict_end", ctx, raise_errors=raise_errors, lock=lock,
                     timeout=timeout)
        except BaseException as hook_exc:
            if ctx.error is None:
                raise
            ctx.error.__context__ = hook_exc
    return ctx.results[0]


def _schema(questions: Any) -> str:
    """An order-sensitive signature of a question set: options are positional, so the same
    questions in another key order must not share a forward pass."""
    return json.dumps(questions, sort_keys=False, ensure_ascii=False, default=str)


def run_batch(router: Router, requests: Sequence[Dict[str, Any]], *, batch_size: Any,
              hooks_timeout: Any, min_confidence: Any, sort_by_length: bool, hooks: Any,
              on_predict_start: Any, on_predict_end: Any, hooks_raise: Any,
              diagnostics: Optional[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """`Router.predict_batch`."""
    gate = check_min_confidence(min_confidence) if min_confidence is not None else None
    decisions = router.route_batch(requests, hooks=hooks, hooks_raise=hooks_raise,
                                   hooks_timeout=hooks_timeout)
    if not decisions:
        return []
    # by checkpoint, in order of first appearance: at most one load per checkpoint per call
    groups: Dict[str, List[int]] = {}
    for i, decision in enumerate(decisions):
        groups.setdefault(router.resolve(decision["model"]), []).append(i)
    results: List[Any] = [None] * len(requests)
    report = ({"groups": 0, "reordered": 0, "smallest": None, "largest": None}
              if sort_by_length and diagnostics is not None else None)
    active = compose_hooks(router.hooks, hooks, on_predict_start, on_predict_end)
    raise_errors = router.hooks_raise if hooks_raise is None else bool(hooks_raise)
    timeout = router.hooks_timeout if hooks_timeout is None else validate_timeout(hooks_timeout)
    answered = 0
    for key, indices in groups.items():
        agent = router._lease(key)
        try:
            contexts = _run_group(router, agent, key, indices, requests, decisions, active,
                                  raise_errors, timeout, gate, batch_size, sort_by_length, report)
        finally:
            router._return(agent)
        for i, ctx in zip(indices, contexts):
            results[i] = ctx.results[0]  # type: ignore[index]
        answered += len(indices)
    if answered != len(requests):
        raise RuntimeError("internal error: batch execution did not produce every result")
    if report is not None:
        diagnostics["sort_by_length"] = report  # type: ignore[index]
    return results


def _run_group(router: Router, agent: Any, key: str, indices: List[int],
               requests: Sequence[Dict[str, Any]], decisions: List[Any], active: List[Any],
               raise_errors: bool, timeout: Any, gate: Any, batch_size: Any,
               sort_by_length: bool, report: Optional[Dict[str, Any]]) -> List[PredictContext]:
    """One checkpoint's requests: start hooks per request, shared forward passes, the gate,
    end hooks. A failure fails every started request of the group with the same exception."""
    lock = router._hooks_lock
    started: List[PredictContext] = []
    try:
        for i in indices:
            ctx = PredictContext(states=[requests[i]["state"]], questions=requests[i]["questions"],
                                 decision=dict(decisions[i]), model=key, agent=agent,
                                 router=router, max_len=requests[i].get("max_len"),
                                 head_max_len=requests[i].get("head_max_len"))
            started.append(ctx)
            dispatch(active, "on_predict_start", ctx, raise_errors=raise_errors, lock=lock,
                     timeout=timeout)
        batches: List[Dict[str, Any]] = []
        for i, ctx in zip(indices, started):
            if ctx.results is not None:  # answered by a start hook
                for result in ctx.results:
                    if isinstance(result, dict):
                        result.setdefault("routing", dict(decisions[i]))
                continue
            # the language picks temperatures, so it splits groups only on an agent that has them
            lang = None
            if getattr(agent, "lang_temperatures", None):
                lang = requests[i].get("lang")
                if lang is None:
                    lang = (decisions[i].get("detection") or {}).get("language")
            signature = (_schema(ctx.questions), _budget(ctx), lang)
            for batch in batches:
                if batch["signature"] == signature:
                    batch["items"].append((i, ctx))
                    break
            else:
                batches.append({"signature": signature, "questions": ctx.questions,
                                "items": [(i, ctx)]})
        for batch in batches:
            items = batch["items"]
            options = dict(batch["signature"][1])
            if batch["signature"][2] is not None:
                options["lang"] = batch["signature"][2]
            if sort_by_length:
                options["sort_by_length"] = True
            with defaults_skipped():  # they ran per request already
                answers = call_agent(agent.predict_batch, [ctx.states[0] for _, ctx in items],
                                     batch["questions"], batch_size=batch_size, **options)
            if len(answers) != len(items):
                raise RuntimeError("internal error: Agent.predict_batch returned %d results for "
                                   "%d states" % (len(answers), len(items)))
            if report is not None:
                n = len(items)
                report["groups"] += 1
                report["reordered"] += int(bool(sort_by_length and batch_size
                                                and 1 < batch_size < n))
                report["smallest"] = n if report["smallest"] is None else min(report["smallest"], n)
                report["largest"] = n if report["largest"] is None else max(report["largest"], n)
            for (i, ctx), result in zip(items, answers):
                result["routing"] = dict(decisions[i])
                ctx.results = [result]
        usages = [aggregate_usage(ctx.results or []) for ctx in started]
        for ctx, usage in zip(started, usages):
            ctx.usage = usage
    except BaseException as exc:
        for ctx in started:
            if ctx.results:
                apply_confidence_gate(ctx.results, gate)
        _end(active, started, raise_errors, lock, timeout, exc)
        raise
    for ctx in started:
        if ctx.results:
            apply_confidence_gate(ctx.results, gate)
    _end(active, started, raise_errors, lock, timeout, None)
    return started


def _end(active: List[Any], contexts: List[PredictContext], raise_errors: bool, lock: Any,
         timeout: Any, error: Optional[BaseException]) -> None:
    """End every request of a group as `predict` ends one, the last started first (a hook that
    sets something in start and resets it in end must unwind in reverse); every context gets
    its end hooks even when another's raise, and the first such failure is raised after."""
    now = time.perf_counter()
    for ctx in contexts:
        ctx.elapsed_ms = (now - ctx.started_at) * 1000.0
        if error is not None:
            ctx.error = error
    first: Optional[BaseException] = None
    for ctx in reversed(contexts):
        for event in (("on_error", "on_predict_end") if ctx.error is not None
                      else ("on_predict_end",)):
            try:
                dispatch(active, event, ctx, raise_errors=raise_errors, lock=lock,
                         timeout=timeout)
            except BaseException as hook_exc:
                if ctx.error is not None:
                    ctx.error.__context__ = hook_exc
                elif first is None:
                    first = hook_exc
    if first is not None:
        raise first
