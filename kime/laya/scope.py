"""One call's hooks and gate, in Laya 0.4.15's order around the work: start hooks, the work,
`on_error` on a failure (a failing error hook is chained to the original error, never hides
it), then always the end (elapsed time, usage totals, the `min_confidence` gate, end hooks).

An Agent and a Router open a scope the same way (`open_scope`): the gate is
checked first, then the call's hooks are composed after the process defaults and the owner's
(`hooks.compose_hooks`), then `hooks_raise` and `hooks_timeout` are resolved. The pipeline
(`kime.laya.call`) runs the scope's steps as `driver.Blocking` effects, inline when there is
no hook to run.
"""
from __future__ import annotations

import time
from typing import Any, Callable, List, Optional, Sequence

from .confidence import MinConfidence, apply_confidence_gate
from .driver import Blocking, Step
from .options import CallOptions
from .hooks import (HookOwner, PredictContext, aggregate_usage, compose_hooks, dispatch,
                    validate_timeout)

CALL_EVENTS = ("on_predict_start", "on_predict_end", "on_error")
"""The events a call's scope dispatches."""


class HookScope:
    """The hooks of one call (already composed), how they run, and the gate."""

    __slots__ = ("hooks", "raise_errors", "lock", "timeout", "gate", "offload")

    def __init__(self, hooks: List[Any], raise_errors: bool, lock: Any,
                 timeout: Optional[float], gate: Optional[MinConfidence]):
        self.hooks = hooks
        # A hook may block, so the async driver moves a step off the loop, but only when a hook
        # answers one of the call's events: a Router's lifecycle hooks (`on_load`, ...) do not.
        self.offload = any(hasattr(hook, event) for hook in hooks for event in CALL_EVENTS)
        self.raise_errors = raise_errors
        self.lock = lock
        self.timeout = timeout
        self.gate = gate

    def context(self, states: Any, questions: Any, **fields: Any) -> PredictContext:
        """A context for this call (one per request on a Router)."""
        return PredictContext(states=states, questions=questions, **fields)

    def step(self, fn: Callable[..., None], *args: Any) -> Blocking:
        """`fn(*args)` as a pipeline step: off the event loop only when a hook may run."""
        return Blocking(lambda: fn(*args), offload=self.offload)

    def end(self, ctx: PredictContext, error: Optional[BaseException]) -> Step[None]:
        """How a call ends: `on_error` on a failure, then always the end hooks; the failure is
        raised last. A step of its own, so no caller yields from an exception handler."""
        if error is not None:
            yield self.step(self.fail, ctx, error)
        yield self.step(self.finish, ctx)
        if error is not None:
            raise error

    def dispatch(self, event: str, ctx: PredictContext) -> None:
        dispatch(self.hooks, event, ctx, raise_errors=self.raise_errors, lock=self.lock,
                 timeout=self.timeout)

    def start(self, ctx: PredictContext) -> None:
        self.dispatch("on_predict_start", ctx)

    def fail(self, ctx: PredictContext, exc: BaseException) -> None:
        ctx.error = exc
        try:
            self.dispatch("on_error", ctx)
        except BaseException as hook_exc:
            exc.__context__ = hook_exc

    def finish(self, ctx: PredictContext) -> None:
        ctx.elapsed_ms = (time.perf_counter() - ctx.started_at) * 1000.0
        if ctx.results is not None:
            ctx.usage = aggregate_usage(ctx.results)
            apply_confidence_gate(ctx.results, self.gate)
        try:
            self.dispatch("on_predict_end", ctx)
        except BaseException as hook_exc:
            if ctx.error is None:
                raise
            ctx.error.__context__ = hook_exc

    def finish_all(self, contexts: Sequence[PredictContext],
                   error: Optional[BaseException]) -> None:
        """End every request of a Router group as `finish` ends one, the last started first (a
        hook that sets something in start and resets it in end must unwind in reverse). Each
        context gets its end hooks even when another's raise; the first such failure is
        raised after. On `error`, every context gets `on_error` first."""
        now = time.perf_counter()
        for ctx in contexts:
            ctx.elapsed_ms = (now - ctx.started_at) * 1000.0
            if error is None:
                ctx.usage = aggregate_usage(ctx.results or [])
            else:
                ctx.error = error
            if ctx.results:
                apply_confidence_gate(ctx.results, self.gate)
        first: Optional[BaseException] = None
        for ctx in reversed(contexts):
            for event in (("on_error", "on_predict_end") if ctx.error is not None
                          else ("on_predict_end",)):
                try:
                    self.dispatch(event, ctx)
                except BaseException as hook_exc:
                    if ctx.error is not None:
                        ctx.error.__context__ = hook_exc
                    elif first is None:
                        first = hook_exc
        if first is not None:
            raise first


def open_scope(owner: HookOwner, options: CallOptions, gate: Optional[MinConfidence],
               skip_defaults: bool = False) -> HookScope:
    """The scope of one call on `owner` (an Agent or a Router: `hooks`, `hooks_raise`,
    `hooks_timeout`, `hooks_lock`) with the call's hook options, refused in Laya's order: the
    call's hooks, then its timeout. The gate is checked by the caller, before either."""
    active = compose_hooks(owner.hooks, options.hooks, options.on_predict_start,
                           options.on_predict_end, skip_defaults=skip_defaults)
    raise_errors = owner.hooks_raise if options.hooks_raise is None else bool(options.hooks_raise)
    timeout = (owner.hooks_timeout if options.hooks_timeout is None
               else validate_timeout(options.hooks_timeout))
    return HookScope(active, raise_errors, owner.hooks_lock, timeout, gate)


__all__ = ["HookScope", "open_scope"]
