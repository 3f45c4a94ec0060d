"""What a hook is handed and what it implements: `PredictContext` (one call's mutable state),
the `Hook` protocol and `BaseHook` (Laya 0.4.15's `laya.hooks` names). A module of its own so
the hooks shipped with kime (`kime.laya.stability`) can subclass `BaseHook` without importing the
dispatch in `kime.laya.hooks`, which re-exports these names at Laya's path.
"""
from __future__ import annotations

import copy
import dataclasses
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Protocol


@dataclass(eq=False)
class PredictContext:
    """What every hook of one call sees, and may change.

    Compared and hashed by identity, so a hook can keep contexts in a set or key per-call state
    on `run_id` (shared by every hook of the call). A hook run under `hooks_timeout` is handed
    a `detached` copy, which compares and hashes as the context it was copied from.
    """

    states: List[Any]
    questions: Dict[Any, Any]
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    results: Optional[List[Dict[str, Any]]] = None
    decision: Optional[Dict[str, Any]] = None
    model: Optional[str] = None
    agent: Any = None
    router: Any = None
    max_len: Optional[int] = None
    head_max_len: Optional[int] = None
    usage: Optional[Dict[str, int]] = None
    started_at: float = field(default_factory=time.perf_counter)
    elapsed_ms: Optional[float] = None
    error: Optional[BaseException] = None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PredictContext) and _origin(self) is _origin(other)

    def __hash__(self) -> int:
        return id(_origin(self))

    def detached(self) -> "PredictContext":
        """A copy for one hook call under `hooks_timeout`: its data (states, questions,
        results, decision, usage) deep-copied, so a hook that overruns the timeout and keeps
        running (Python cannot stop a thread) changes only the copy, never this context or
        the results its caller was given. `settle` takes the copy's changes back when the
        hook ended in time."""
        copy = dataclasses.replace(self, **{name: _copied(getattr(self, name))
                                            for name in _DATA})
        object.__setattr__(copy, "_detached_from", _origin(self))
        return copy

    def settle(self, copy: "PredictContext") -> None:
        """Take every field of `copy` (made by `detached`, its hook ended) into this context."""
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(copy, f.name))

    def skip(self, results: List[Dict[str, Any]]) -> None:
        """Answer the call from a start hook: inference does not run, end hooks still do.

        `results` holds one result per state in `ctx.states`, or one for the whole call (what
        `predict_long` takes as the document's answer). Any other count is refused here, inside
        the hook, so the caller's `hooks_raise` policy decides what happens to it.
        """
        if (isinstance(self.states, (list, tuple)) and isinstance(results, (list, tuple))
                and len(results) not in (1, len(self.states))):
            raise ValueError("ctx.skip() takes one result for the whole call or one per state in "
                             "ctx.states (%d); got %d" % (len(self.states), len(results)))
        self.results = results


_DATA = ("states", "questions", "results", "decision", "usage")
"""The fields a hook may change in place (containers), copied for a hook under a timeout."""


def _origin(ctx: PredictContext) -> PredictContext:
    origin: PredictContext = getattr(ctx, "_detached_from", ctx)
    return origin


def _copied(value: Any) -> Any:
    """A deep copy, or a shallow one of a container holding what cannot be deep-copied."""
    try:
        return copy.deepcopy(value)
    except Exception:  # a lock, a file, a C object a caller put in a state
        return copy.copy(value)


class Hook(Protocol):
    """The hook protocol: implement any subset of these; missing ones are skipped."""

    def on_predict_start(self, ctx: PredictContext) -> None: ...
    def on_predict_end(self, ctx: PredictContext) -> None: ...
    def on_route(self, ctx: PredictContext) -> None: ...
    def on_load(self, ctx: PredictContext) -> None: ...
    def on_evict(self, ctx: PredictContext) -> None: ...
    def on_error(self, ctx: PredictContext) -> None: ...


class BaseHook:
    """A hook that does nothing: subclass it and override the events you need."""

    def on_predict_start(self, ctx: PredictContext) -> None:
        pass

    def on_predict_end(self, ctx: PredictContext) -> None:
        pass

    def on_route(self, ctx: PredictContext) -> None:
        pass

    def on_load(self, ctx: PredictContext) -> None:
        pass

    def on_evict(self, ctx: PredictContext) -> None:
        pass

    def on_error(self, ctx: PredictContext) -> None:
        pass


__all__ = ["BaseHook", "Hook", "PredictContext"]
