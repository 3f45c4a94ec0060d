"""Which per-call controls an integration forwards, and where: laya 0.4.15's `_controls` rules.

Every integration ends at a local `runner.predict(state, questions, **overrides)` or at a POST to a
laya-serve-compatible node (`kime.integrations.remote`). This module owns the rule for both, once:
the control names (`*_CONTROLS`), the helpers that drop unset controls (absent, never `None`: a
`None` would override the runner's own default with nothing), and the three refusals laya makes
by name instead of dropping a control silently: hooks sent to a server, a routing hint given to an
`Agent`, and a callable `lang_guess` sent over HTTP.
"""
from __future__ import annotations

import inspect
from typing import Any, Dict, Optional

PREDICT_CONTROLS = ("max_len", "head_max_len")
"""The token budgets; laya-serve takes them in the body up to its `LAYA_MAX_TOKEN_BUDGET`."""

DECISION_CONTROLS = ("lang", "min_confidence")
"""Read by `Agent` and `Router` alike and by the server's body, so safe on both paths."""

HOOK_CONTROLS = ("hooks", "on_predict_start", "on_predict_end", "hooks_raise", "hooks_timeout")
"""Python callables and flags run inside `predict`: local path only."""

ROUTER_ONLY_CONTROLS = ("task", "lang_guess")
"""Routing hints: a `Router` (and the server) reads them, an `Agent` does not."""


def _present(pairs: Any) -> Dict[str, Any]:
    # `is not None`, not truthiness: `lang=""`, `min_confidence=0.0`, `hooks=[]` and
    # `hooks_raise=False` are decisions a caller made.
    return {key: value for key, value in pairs if value is not None}


def budget_kwargs(max_len: Optional[int] = None,
                  head_max_len: Optional[int] = None) -> Dict[str, Any]:
    """The token budgets that are set."""
    return _present((("max_len", max_len), ("head_max_len", head_max_len)))


def decision_kwargs(lang: Optional[str] = None,
                    min_confidence: Optional[float] = None) -> Dict[str, Any]:
    """The language and abstention controls that are set (an empty `lang` and a 0.0 gate count)."""
    return _present((("lang", lang), ("min_confidence", min_confidence)))


def predict_kwargs(model: Optional[str] = None, max_len: Optional[int] = None,
                   head_max_len: Optional[int] = None, lang: Optional[str] = None,
                   min_confidence: Optional[float] = None) -> Dict[str, Any]:
    """The overrides a local `predict` takes: `model` when truthy, then budgets, then decision."""
    kwargs: Dict[str, Any] = {"model": model} if model else {}
    kwargs.update(budget_kwargs(max_len, head_max_len))
    kwargs.update(decision_kwargs(lang, min_confidence))
    return kwargs


def hook_kwargs(hooks: Optional[Any] = None, on_predict_start: Optional[Any] = None,
                on_predict_end: Optional[Any] = None, hooks_raise: Optional[bool] = None,
                hooks_timeout: Optional[float] = None) -> Dict[str, Any]:
    """The per-call hook overrides that are set (`None` means "inherit the runner's")."""
    return _present(zip(HOOK_CONTROLS,
                        (hooks, on_predict_start, on_predict_end, hooks_raise, hooks_timeout)))


def router_kwargs(task: Optional[str] = None, lang_guess: Optional[Any] = None) -> Dict[str, Any]:
    """The routing hints that are set (a blank `lang_guess` is forwarded: "fall to detection")."""
    return _present((("task", task), ("lang_guess", lang_guess)))


def reject_remote_hooks(given: Dict[str, Any], base_url: Optional[str]) -> None:
    """Refuse hooks aimed at a server, which has no way to run a caller's Python callable."""
    if base_url and given:
        raise ValueError(
            "%s run in the local runner and cannot be sent to a laya-serve endpoint; "
            "install them where serve runs, or drop them" % ", ".join(sorted(given)))


def _reads(target: Any, name: str) -> bool:
    """Whether calling `target` can take keyword `name` (yes when it cannot be inspected)."""
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return True
    return name in params


def require_router_controls(runner: Any, entry_point: str, given: Dict[str, Any]) -> Dict[str, Any]:
    """`given` when `runner.<entry_point>` reads each routing hint in it, else a ValueError.

    Asked of the signature about to be called, not of the runner's class, since `predict`,
    `predict_batch` and `route` take different sets; a runner without that method passes.
    """
    if not given:
        return {}
    target = getattr(runner, entry_point, None)
    unread = [name for name in ROUTER_ONLY_CONTROLS if name in given and not _reads(target, name)]
    if unread:
        one = len(unread) == 1
        raise ValueError(
            "%s %s a routing hint, and %s.%s does not read it: this runner answers on the "
            "checkpoint it was built with. Pass a Router as `agent=`, or drop %s."
            % (", ".join(unread), "is" if one else "are", type(runner).__name__, entry_point,
               "it" if one else "them"))
    return given


def reject_remote_lang_guess(given: Dict[str, Any], base_url: Optional[str]) -> None:
    """Refuse a callable `lang_guess` aimed at a server: only a language code crosses HTTP."""
    value = given.get("lang_guess")
    if base_url and value is not None and not isinstance(value, str):
        raise ValueError(
            "lang_guess=%r cannot be sent to a laya-serve endpoint: only a language code string "
            "such as \"de\" crosses HTTP. Install the callable on the Router where serve runs, or "
            "pass a code" % (value,))
