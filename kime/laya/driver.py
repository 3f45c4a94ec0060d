"""How Laya's call pipeline runs: synchronously for `predict`, on an event loop for
`predict_async` and the server, from one description of the call.

The pipeline (`kime.laya.call`) is written once, as generators that yield what they need done
and receive the outcome: a `Blocking` step (hooks, routing, loading a checkpoint: plain
functions that may block), an `Infer` step (rows for an engine), or `Together` (independent
sub-pipelines). `run` performs each step inline; `run_async` awaits the engine, moves blocking
steps off the loop and runs `Together` concurrently. A failure, a Ctrl-C or a cancelled task is
thrown back into the generator at the step it hit, so the pipeline's own `except`/`finally`
(on_error hooks, end hooks, giving a lease back) runs whichever driver drives it. The sync
driver costs a few generator resumptions per call: no event loop, no thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import (TYPE_CHECKING, Any, Callable, Generator, List, Optional, Protocol, Sequence,
                    TypeVar, Union)

if TYPE_CHECKING:
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
    call that finished after its task was cancelled (a lease nobody will return otherwise)."""

    fn: Callable[[], Any]
    offload: bool = True
    undo: Optional[Callable[[Any], None]] = None


@dataclass(frozen=True)
class Infer:
    """Requests for an engine, answered in shared forward passes; the outcome is the engine's
    `Response`s in order."""

    engine: Engine
    requests: Sequence["Request"]
    temperatures: Optional["Temperatures"] = None


@dataclass(frozen=True)
class Together:
    """Independent sub-pipelines; the outcome is their results in order. In order under `run`,
    concurrently under `run_async` (the first failure cancels the rest and is raised)."""

    steps: Sequence["Step[Any]"]


Effect = Union[Blocking, Infer, Together]
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
    if type(effect) is Together:
        return [run(sub) for sub in effect.steps]
    raise TypeError("not a pipeline effect: %r" % (effect,))


async def run_async(step: "Step[T]") -> T:
    """Drive `step` to its result on the running event loop, which it never blocks."""
    outcome: Any = None
    error: Optional[BaseException] = None
    while True:
        try:
            effect = step.send(outcome) if error is None else step.throw(error)
        except StopIteration as done:
            return done.value
        outcome, error = None, None
        try:
            outcome = await _perform_async(effect)
        except BaseException as exc:  # a cancellation too: the pipeline's finally must run
            error = exc


async def _perform_async(effect: Effect) -> Any:
    import asyncio  # here, not at import: it costs a third of `import kime`

    if type(effect) is Infer:
        return await effect.engine.decide_batch_async(effect.requests,
                                                      temperatures=effect.temperatures)
    if type(effect) is Blocking:
        if not effect.offload:
            return effect.fn()
        pending = asyncio.get_running_loop().run_in_executor(None, effect.fn)
        if effect.undo is None:
            return await pending
        try:
            return await asyncio.shield(pending)
        except asyncio.CancelledError:
            undo = effect.undo

            def settle(done: "asyncio.Future[Any]") -> None:
                if not done.cancelled() and done.exception() is None:
                    undo(done.result())

            pending.add_done_callback(settle)
            raise
    if type(effect) is Together:
        tasks: List["asyncio.Future[Any]"] = [asyncio.ensure_future(run_async(sub))
                                              for sub in effect.steps]
        try:
            return await asyncio.gather(*tasks)
        except BaseException:
            for task in tasks:
                task.cancel()
            raise
    raise TypeError("not a pipeline effect: %r" % (effect,))


__all__ = ["Blocking", "Effect", "Engine", "Infer", "Step", "Together", "run", "run_async"]
