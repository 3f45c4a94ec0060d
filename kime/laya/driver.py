"""How Laya's call pipeline runs: synchronously for `predict`, on an event loop for
`predict_async` and the server, from one description of the call, with one semantics.

The pipeline (`kime.laya.call`) is written once, as generators that yield what they need done
and receive the outcome: a `Blocking` step (hooks, routing, loading a checkpoint: plain
functions that may block) or an `Infer` step (rows for an engine). Steps run one at a time, in
the order the pipeline yields them, under either driver, so both give the same results, the same
hook order and the same clean-up on success, failure and cancellation:

- `run` performs each step inline in the calling thread: no event loop, no thread;
- `run_async` awaits the engine and moves a blocking step onto a worker thread. The whole call,
  the pipeline's own code and every step wherever it runs, is inside one copy of the caller's
  context (`contextvars.copy_context()`, as Starlette's threadpool does), so a context variable
  the caller set reaches every hook, and one a start hook sets is there for the end hook, as in
  the calling thread under `run`.

A failure, a Ctrl-C or a cancelled task is thrown back into the generator at the step it hit,
so the pipeline's own handling (on_error hooks, end hooks, giving a lease back) runs whichever
driver drives it. A cancelled task waits for the blocking step it was in to finish before that:
a hook still running when the end hooks fire would see the call end before it started.
"""
from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, Generator, List, Optional, Protocol,
                    Sequence, TypeVar, Union)

if TYPE_CHECKING:
    import asyncio

    from ..answers import Response
    from ..calibration import Temperatures
    from ..request import Request

T = TypeVar("T")


class Engine(Protocol):
    """What an `Infer` step needs from an engine (`kime.Kime` is one)."""

    def decide_batch(self, requests: Sequence["Request"], cache: bool = True,
                     temperatures: Optional["Temperatures"] = None) -> List["Response"]: ...

    async def decide_batch_async(self, requests: Sequence["Request"], cache: bool = True,
                                 temperatures: Optional["Temperatures"] = None
                                 ) -> List["Response"]: ...


@dataclass(frozen=True)
class Blocking:
    """A plain call that may block. `offload` (the async driver only): run it on a worker
    thread; off for steps known to be cheap (no hooks to run). `undo` is given the result of a
    call that finished after its task was cancelled (a lease nobody will return otherwise).
    `awaitable`, when set, is what the async driver awaits instead (an answerer's own async
    twin, as `Router.predict_async`)."""

    fn: Callable[[], Any]
    offload: bool = True
    undo: Optional[Callable[[Any], None]] = None
    awaitable: Optional[Callable[[], Awaitable[Any]]] = None


@dataclass(frozen=True)
class Infer:
    """Requests for an engine, answered in shared forward passes; the outcome is the engine's
    `Response`s in order."""

    engine: Engine
    requests: Sequence["Request"]
    temperatures: Optional["Temperatures"] = None


Effect = Union[Blocking, Infer]
Step = Generator[Effect, Any, T]
"""A pipeline: yields effects, receives their outcomes, returns its result."""


def run(step: "Step[T]") -> T:
    """Drive `step` to its result in the calling thread."""
    outcome: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            effect = step.send(outcome) if error is None else step.throw(error)
        except StopIteration as done:
            return done.value
        outcome, error = None, None
        try:
            outcome = _perform(effect)
        except BaseException as exc:  # back into the pipeline, at the step that failed
            error = exc


def _perform(effect: Effect) -> Any:
    if type(effect) is Infer:
        return effect.engine.decide_batch(effect.requests, temperatures=effect.temperatures)
    if type(effect) is Blocking:
        return effect.fn()
    raise TypeError("not a pipeline effect: %r" % (effect,))


async def run_async(step: "Step[T]") -> T:
    """Drive `step` to its result on the running event loop, which it never blocks."""
    context = contextvars.copy_context()
    outcome: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            effect = (context.run(step.send, outcome) if error is None
                      else context.run(step.throw, error))
        except StopIteration as done:
            return done.value
        outcome, error = None, None
        try:
            outcome = await _perform_async(effect, context)
        except BaseException as exc:  # a cancellation too: the pipeline's clean-up must run
            error = exc


async def _perform_async(effect: Effect, context: contextvars.Context) -> Any:
    if type(effect) is Infer:
        return await effect.engine.decide_batch_async(effect.requests,
                                                      temperatures=effect.temperatures)
    if type(effect) is Blocking:
        if effect.awaitable is not None:
            return await effect.awaitable()
        if not effect.offload:
            return context.run(effect.fn)
        return await _off_loop(effect, context)
    raise TypeError("not a pipeline effect: %r" % (effect,))


async def _off_loop(effect: Blocking, context: contextvars.Context) -> Any:
    """`effect.fn` on a worker thread in `context`. Cancelled meanwhile, it still waits for
    the thread (Python cannot stop one), hands a late result to `undo`, then re-raises."""
    import asyncio  # here, not at import: it costs a third of `import kime`

    pending = asyncio.get_running_loop().run_in_executor(None, context.run, effect.fn)
    try:
        return await asyncio.shield(pending)
    except asyncio.CancelledError:
        await _settled(pending)
        if effect.undo is not None and pending.exception() is None:
            effect.undo(pending.result())
        raise


async def _settled(pending: "asyncio.Future[Any]") -> None:
    """Wait until `pending` is done, through any further cancellation of this task."""
    import asyncio

    while not pending.done():
        try:
            await asyncio.wait({pending})
        except asyncio.CancelledError:
            continue


__all__ = ["Blocking", "Effect", "Engine", "Infer", "Step", "run", "run_async"]
