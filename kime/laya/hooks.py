"""Laya 0.4.15's prediction hooks: code that observes or reshapes every call without forking the
agent. The protocol, the ordering (process defaults, then the agent's, then the call's) and the
failure policy (`hooks_raise`, `hooks_timeout`, `hooks_concurrent`) are Laya's, so a hook object
written for `laya` works here unchanged: hooks are found by method name, not by base class.

A hook implements any of `on_predict_start(ctx)` (may rewrite `ctx.states`/`ctx.questions`, set
`ctx.max_len`/`ctx.head_max_len`, or answer the call with `ctx.skip(results)`),
`on_predict_end(ctx)` (may rewrite `ctx.results`) and `on_error(ctx)`; a method may be `async`.
Pure Python: nothing here touches the engine.
"""
from __future__ import annotations

import contextvars
import inspect
import math
import threading
import warnings
from contextlib import contextmanager
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional,
                    Protocol, Sequence, Tuple, Union)


from .context import BaseHook, Hook, PredictContext
from .coroutines import run_coroutine_sync

if TYPE_CHECKING:  # asyncio costs a third of `import kime`: imported where a hook needs it
    import asyncio


PredictHook = Callable[[PredictContext], Any]
"""A plain callable for `on_predict_start=` / `on_predict_end=`."""
HookArg = Union[Any, Sequence[Any], None]
PredictHookArg = Union[PredictHook, Sequence[PredictHook], None]

HOOK_EVENTS = ("on_predict_start", "on_predict_end", "on_route", "on_load", "on_evict",
               "on_error")


class _StartAdapter:
    """A plain callable given as `on_predict_start=`, as a hook object."""

    __slots__ = ("fn",)

    def __init__(self, fn: PredictHook):
        if not callable(fn):
            raise TypeError("on_predict_start must be callable, got %s" % type(fn).__name__)
        self.fn = fn

    def on_predict_start(self, ctx: PredictContext) -> Any:
        return self.fn(ctx)


class _EndAdapter:
    """A plain callable given as `on_predict_end=`, as a hook object."""

    __slots__ = ("fn",)

    def __init__(self, fn: PredictHook):
        if not callable(fn):
            raise TypeError("on_predict_end must be callable, got %s" % type(fn).__name__)
        self.fn = fn

    def on_predict_end(self, ctx: PredictContext) -> Any:
        return self.fn(ctx)


def as_sequence(value: Any) -> Tuple[Any, ...]:
    """None -> (), a list or tuple -> its items, anything else -> a one-item tuple."""
    if value is None:
        return ()
    if isinstance(value, (list, tuple)):
        return tuple(value)
    return (value,)


def normalise_hooks(hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                    on_predict_end: PredictHookArg = None) -> List[Any]:
    """One ordered list from `hooks=` (objects with event methods) and the two single-event
    callables, refusing with Laya's `TypeError`s what could never be called."""
    out: List[Any] = []
    for hook in as_sequence(hooks):
        if isinstance(hook, type):
            raise TypeError("hooks entries must be instances, not classes; got %s. Instantiate "
                            "it first." % hook.__name__)
        if not any(hasattr(hook, event) for event in HOOK_EVENTS):
            raise TypeError("hooks entries must implement at least one of %s; got %s. Pass a "
                            "plain callable as on_predict_start=/on_predict_end= instead."
                            % (", ".join(HOOK_EVENTS), type(hook).__name__))
        for event in HOOK_EVENTS:
            method = getattr(hook, event, None)
            if method is not None and not callable(method):
                raise TypeError("hooks entry %s.%s must be callable, got %s"
                                % (type(hook).__name__, event, type(method).__name__))
        out.append(hook)
    out += [_StartAdapter(fn) for fn in as_sequence(on_predict_start)]
    out += [_EndAdapter(fn) for fn in as_sequence(on_predict_end)]
    return out


# --- the process-wide defaults ------------------------------------------------------------------

_DEFAULTS: List[Any] = []
_DEFAULTS_LOCK = threading.Lock()
_SKIP_DEFAULTS: "contextvars.ContextVar[bool]" = contextvars.ContextVar("kime_skip_default_hooks",
                                                                       default=False)


def default_hooks() -> List[Any]:
    """A copy of the process-wide hooks, in order (empty unless set)."""
    with _DEFAULTS_LOCK:
        return list(_DEFAULTS)


def set_default_hooks(hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                      on_predict_end: PredictHookArg = None) -> None:
    """Replace the process-wide hooks. They run first, for every agent in the process, so a
    tracer need not be passed to every `load`."""
    normalised = normalise_hooks(hooks, on_predict_start, on_predict_end)
    with _DEFAULTS_LOCK:
        _DEFAULTS[:] = normalised


def add_default_hook(hook: HookArg) -> None:
    """Append one hook (or a sequence) to the process-wide hooks."""
    normalised = normalise_hooks(hook)
    with _DEFAULTS_LOCK:
        _DEFAULTS.extend(normalised)


def clear_default_hooks() -> None:
    """Remove every process-wide hook."""
    with _DEFAULTS_LOCK:
        _DEFAULTS.clear()


def compose_hooks(installed: Sequence[Any], hooks: HookArg = None,
                  on_predict_start: PredictHookArg = None,
                  on_predict_end: PredictHookArg = None, *,
                  skip_defaults: bool = False) -> List[Any]:
    """The hooks of one call: the defaults as they are now (none with `skip_defaults` or
    inside `defaults_skipped`), the agent's, then the call's."""
    defaults = [] if skip_defaults or _SKIP_DEFAULTS.get() else default_hooks()
    return defaults + list(installed) + normalise_hooks(hooks, on_predict_start, on_predict_end)


@contextmanager
def defaults_skipped() -> Iterator[None]:
    """Leave the process-wide hooks out of the calls composed inside: a Router has already run
    them around the agent call it makes, and they fire once per request (Laya's rule)."""
    token = _SKIP_DEFAULTS.set(True)
    try:
        yield
    finally:
        _SKIP_DEFAULTS.reset(token)


def validate_timeout(value: Any) -> Optional[float]:
    """`hooks_timeout` as a positive finite float, or None for no limit.

    Zero, negative and non-finite values are refused (a zero join returns before a fast hook
    has run, so the outcome would be a race), and so is a bool (`True` would mean one second).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError("hooks_timeout must be a positive finite number or None, not a bool; "
                         "got %r" % (value,))
    timeout = float(value)
    if not math.isfinite(timeout) or timeout <= 0:
        raise ValueError("hooks_timeout must be a positive finite number or None; got %r"
                         % (value,))
    return timeout


class AsyncHook:
    """Wraps a hook whose event methods are `async` (or return awaitables) so each runs to
    completion inside the synchronous call, whether or not the caller is in an event loop.
    `loop` sends every coroutine to that (running) loop instead."""

    __slots__ = ("hook", "loop")

    def __init__(self, hook: Any, loop: Optional["asyncio.AbstractEventLoop"] = None):
        if isinstance(hook, type):
            raise TypeError("AsyncHook wraps an instance, not a class; got %s" % hook.__name__)
        if not any(hasattr(hook, event) for event in HOOK_EVENTS):
            raise TypeError("AsyncHook wraps an object implementing at least one of %s; got %s"
                            % (", ".join(HOOK_EVENTS), type(hook).__name__))
        self.hook = hook
        self.loop = loop

    def _run(self, event: str, ctx: PredictContext) -> None:
        method = getattr(self.hook, event, None)
        if method is None:
            return
        result = method(ctx)
        if inspect.isawaitable(result):
            run_coroutine_sync(result, loop=self.loop)

    def on_predict_start(self, ctx: PredictContext) -> None:
        self._run("on_predict_start", ctx)

    def on_predict_end(self, ctx: PredictContext) -> None:
        self._run("on_predict_end", ctx)

    def on_route(self, ctx: PredictContext) -> None:
        self._run("on_route", ctx)

    def on_load(self, ctx: PredictContext) -> None:
        self._run("on_load", ctx)

    def on_evict(self, ctx: PredictContext) -> None:
        self._run("on_evict", ctx)

    def on_error(self, ctx: PredictContext) -> None:
        self._run("on_error", ctx)

    def __repr__(self) -> str:
        return "AsyncHook(%r)" % (self.hook,)


# --- dispatch -----------------------------------------------------------------------------------

def aggregate_usage(results: Sequence[Dict[str, Any]]) -> Dict[str, int]:
    """The call's token totals, summed over its results, for `ctx.usage`."""
    def total(key: str) -> int:
        return sum(int((r.get("usage") or {}).get(key, 0) or 0) for r in results
                   if isinstance(r, dict))
    return {"input_tokens": total("input_tokens"), "output_tokens": total("output_tokens")}


def _name(method: Any) -> str:
    return (getattr(method, "__qualname__", None) or getattr(method, "__name__", None)
            or repr(method))


def _call(method: Any, ctx: PredictContext, timeout: Optional[float]) -> None:
    """One hook call (an awaitable result is run to completion), bounded by `timeout`.

    Under a timeout the hook runs on its own thread, in a copy of the caller's context so
    context variables (request ids, tracing spans) reach it, and on a detached copy of `ctx`
    whose changes are taken back only when the hook ends in time (or raises, as an inline hook's
    changes stay when it raises). Python cannot stop a thread: an overrunning hook keeps
    running, but the call no longer waits for it, and what it changes later reaches no one.
    """
    def invoke(target: PredictContext) -> None:
        result = method(target)
        if inspect.isawaitable(result):
            run_coroutine_sync(result)

    if timeout is None:
        invoke(ctx)
        return
    failure: List[BaseException] = []
    context = contextvars.copy_context()
    detached = ctx.detached()

    def runner() -> None:
        try:
            context.run(invoke, detached)
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=runner, daemon=True, name="kime-hook-timeout")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise TimeoutError("kime: hook %s exceeded %gs" % (_name(method), timeout))
    ctx.settle(detached)
    if failure:
        raise failure[0]


def dispatch(hooks: Sequence[Any], event: str, ctx: PredictContext, *, raise_errors: bool = True,
             lock: Any = None, timeout: Optional[float] = None) -> None:
    """Call `event` on every hook that has it, in order.

    A failing hook raises when `raise_errors`, else warns (`RuntimeWarning`) and the call goes
    on: telemetry must not fail a request. `lock` serialises hooks that are not thread-safe
    (`hooks_concurrent=False`).
    """
    for hook in hooks:
        method = getattr(hook, event, None)
        if method is None:
            continue
        try:
            if lock is not None:
                with lock:
                    _call(method, ctx, timeout)
            else:
                _call(method, ctx, timeout)
        except Exception as exc:
            if raise_errors:
                raise
            warnings.warn("kime: hook %s.%s failed: %s" % (type(hook).__name__, event, exc),
                          RuntimeWarning, stacklevel=2)


class HookOwner(Protocol):
    """An Agent's or a Router's hook settings (a `HookRegistry`), what a call's scope reads."""

    hooks: List[Any]
    hooks_raise: bool
    hooks_timeout: Optional[float]

    @property
    def hooks_lock(self) -> Any: ...


class HookRegistry:
    """An agent's own hook list, changeable while calls run: a call reads a snapshot, so adding
    or removing a hook never disturbs a call in flight."""

    hooks: List[Any] = []
    hooks_raise: bool = True
    hooks_timeout: Optional[float] = None
    _hooks_lock: Any = None
    _hooks_mutex: Optional[threading.Lock] = None

    @property
    def hooks_lock(self) -> Any:
        """The lock serialising this owner's hooks (`hooks_concurrent=False`), else None."""
        return self._hooks_lock

    def add_hook(self, hook: HookArg) -> "HookRegistry":
        """Install one hook or a sequence of them (after those already installed); returns self."""
        added = normalise_hooks(hook)
        with self._registry_lock():
            self.hooks = list(self.hooks) + added
        return self

    def remove_hook(self, hook: Any) -> bool:
        """Remove every installed occurrence of `hook` (by identity); whether there was one."""
        with self._registry_lock():
            kept = [h for h in self.hooks if h is not hook]
            removed = len(kept) != len(self.hooks)
            self.hooks = kept
        return removed

    @contextmanager
    def hooks_installed(self, *hooks: HookArg) -> Iterator["HookRegistry"]:
        """Install hooks for a `with` block. On exit exactly the block's own are removed (one
        occurrence each, the latest), so hooks installed before or inside the block stay."""
        added = normalise_hooks([h for arg in hooks for h in as_sequence(arg)])
        with self._registry_lock():
            self.hooks = list(self.hooks) + added
        try:
            yield self
        finally:
            with self._registry_lock():
                current = list(self.hooks)
                for hook in added:
                    for i in range(len(current) - 1, -1, -1):
                        if current[i] is hook:
                            del current[i]
                            break
                self.hooks = current

    def _registry_lock(self) -> threading.Lock:
        if self._hooks_mutex is None:
            self._hooks_mutex = threading.Lock()
        return self._hooks_mutex


__all__ = ["AsyncHook", "BaseHook", "HOOK_EVENTS", "Hook", "HookArg", "HookRegistry",
           "PredictContext", "PredictHook", "PredictHookArg", "add_default_hook",
           "aggregate_usage", "clear_default_hooks", "compose_hooks", "default_hooks",
           "defaults_skipped", "dispatch",
           "normalise_hooks", "run_coroutine_sync", "set_default_hooks", "validate_timeout"]

_STABILITY = ("OptionStabilityHook", "ALL_VARIANTS", "VARIANT_PRESETS", "make_variants",
              "decide_reliability", "calibrate_reliability", "_SEP", "_seed_of",
              "_has_semantic_description")


def __getattr__(name: str) -> Any:
    """Laya's `laya.hooks.OptionStabilityHook` and its helpers, from `stability`, on first use."""
    if name not in _STABILITY:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    from . import stability

    return getattr(stability, name)
