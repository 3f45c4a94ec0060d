"""Where an integration's decision runs: laya 0.4.15's `_get_default_router`, `_execute_decision`,
`_can_batch` and `_execute_batch`, which laya repeats in each integration and kime keeps once.

A decision goes to a server when `base_url` is set (`remote.call_remote`), else to `agent` (a
`kime.load` agent, a `kime.Router`, or any object with `predict`), else to one process-wide
default `kime.Router()` built on first use. The controls each path takes are `controls`' rule.
"""
from __future__ import annotations

import threading
from typing import Any, Dict, List, Optional, Sequence

from .controls import (budget_kwargs, decision_kwargs, hook_kwargs, predict_kwargs,
                       reject_remote_hooks, reject_remote_lang_guess, require_router_controls,
                       router_kwargs)
from .remote import call_remote

_DEFAULT_ROUTER: Optional[Any] = None
_DEFAULT_ROUTER_LOCK = threading.Lock()


def default_router() -> Any:
    """The shared `kime.Router()` for an integration given neither `agent` nor `base_url`."""
    global _DEFAULT_ROUTER
    if _DEFAULT_ROUTER is None:
        with _DEFAULT_ROUTER_LOCK:
            if _DEFAULT_ROUTER is None:
                from ..laya.router import Router
                _DEFAULT_ROUTER = Router()
    return _DEFAULT_ROUTER


def execute_decision(state: Any, questions: Dict[str, Any], agent: Optional[Any] = None,
                     base_url: Optional[str] = None, api_key: Optional[str] = None,
                     model: Optional[str] = None, max_len: Optional[int] = None,
                     head_max_len: Optional[int] = None, lang: Optional[str] = None,
                     min_confidence: Optional[float] = None, task: Optional[str] = None,
                     lang_guess: Optional[Any] = None, hooks: Optional[Any] = None,
                     on_predict_start: Optional[Any] = None, on_predict_end: Optional[Any] = None,
                     hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None,
                     *, timeout: float = 10.0, strict: bool = True) -> Dict[str, Any]:
    """One decision, on the server at `base_url` or on the local runner, every set control kept.

    Remote: hooks and a callable `lang_guess` are refused by name (`controls`), the rest ride in
    the body; `timeout` and `strict` are `call_remote`'s. Local: `runner.predict(state, questions,
    **overrides)`, with `task`/`lang_guess` refused when that `predict` cannot read them.
    """
    hooked = hook_kwargs(hooks, on_predict_start, on_predict_end, hooks_raise, hooks_timeout)
    routing = router_kwargs(task, lang_guess)
    if base_url:
        reject_remote_hooks(hooked, base_url)
        reject_remote_lang_guess(routing, base_url)
        return call_remote(base_url, state, questions, api_key=api_key, model=model,
                           timeout=timeout, strict=strict, **budget_kwargs(max_len, head_max_len),
                           **decision_kwargs(lang, min_confidence), **routing)
    runner = agent if agent is not None else default_router()
    kwargs = predict_kwargs(model, max_len, head_max_len, lang, min_confidence)
    kwargs.update(require_router_controls(runner, "predict", routing))
    kwargs.update(hooked)
    return runner.predict(state, questions, **kwargs)


def can_batch(agent: Optional[Any] = None, base_url: Optional[str] = None,
              hooked: bool = False) -> bool:
    """Whether one batched forward call can answer many inputs on this path.

    No for a server (one POST per decision), for a runner without `predict_batch`, and for a
    Router when per-call hooks are set (laya's `Router.predict_batch` takes none, so the
    per-input loop is what runs them).
    """
    if base_url:
        return False
    runner = agent if agent is not None else default_router()
    if hooked and hasattr(runner, "route_batch"):
        return False
    return getattr(runner, "predict_batch", None) is not None


def execute_batch(states: Sequence[Any], questions: Dict[str, Any], agent: Optional[Any] = None,
                  model: Optional[str] = None, max_len: Optional[int] = None,
                  head_max_len: Optional[int] = None, lang: Optional[str] = None,
                  min_confidence: Optional[float] = None,
                  hook_kwargs: Optional[Dict[str, Any]] = None, task: Optional[str] = None,
                  lang_guess: Optional[Any] = None) -> List[Dict[str, Any]]:
    """One question set over many states in shared forward passes; results in input order.

    A Router (it has `route_batch`) takes one request dict per state, carrying `model`, the
    budgets, `lang` and the routing hints, with `min_confidence` call-level (checked against
    `route`, the signature that reads the hints); an Agent takes the states and the question set
    with every control call-level, hooks included.
    """
    runner = agent if agent is not None else default_router()
    routing = router_kwargs(task, lang_guess)
    if hasattr(runner, "route_batch"):
        item = predict_kwargs(model, max_len, head_max_len, lang)
        item.update(require_router_controls(runner, "route", routing))
        requests = [dict({"state": state, "questions": questions}, **item) for state in states]
        return runner.predict_batch(
            requests, **decision_kwargs(None, min_confidence))
    overrides = predict_kwargs(model, max_len, head_max_len, lang, min_confidence)
    overrides.update(require_router_controls(runner, "predict_batch", routing))
    return runner.predict_batch(
        list(states), questions, **overrides, **(hook_kwargs or {}))
