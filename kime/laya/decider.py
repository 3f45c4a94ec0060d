"""The one caller contract: `Decider`, what answers typed questions with `CallOptions`.

A `kime.Agent` (one checkpoint), a `kime.Router` (several, routed) and `kime.client.Client` (a
laya-serve-compatible server over HTTP) implement it; the integrations and the MCP tools hold
one and never ask which it is. A remote answerer is a client composed with what it needs, never
a subclass of the local thing it stands for, so nothing local is inherited by accident.

The methods are `answer*`, not `decide*`: `Agent.decide` and `Router.decide` are Laya's
structured decisions (a schema in, typed values out), whose signatures stay Laya's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Protocol, Sequence, runtime_checkable

from .driver import Step, run, run_async
from .options import NO_OPTIONS, CallOptions

Result = Dict[str, Any]


@runtime_checkable
class Decider(Protocol):
    """Answers questions about states; each result is Laya's dict (`answers`, `usage`, and
    `routing` from a Router or a routing server)."""

    def answer(self, state: Any, questions: Dict[Any, Any],
               options: CallOptions = ...) -> Result:
        """One state, every question in one forward pass."""

    def answer_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                     options: CallOptions = ..., batch_size: Optional[int] = None
                     ) -> List[Result]:
        """The same questions over many states, results in input order."""

    async def answer_async(self, state: Any, questions: Dict[Any, Any],
                           options: CallOptions = ...) -> Result:
        """`answer` without blocking the event loop."""

    async def answer_batch_async(self, states: Sequence[Any], questions: Dict[Any, Any],
                                 options: CallOptions = ..., batch_size: Optional[int] = None
                                 ) -> List[Result]:
        """`answer_batch` without blocking the event loop."""


class Answers:
    """The `Decider` methods of an answerer whose calls are pipelines (`kime.laya.call`): it
    says which pipeline answers one state (`_one`) and many (`_many`), and both drivers run
    them, so the four methods are written once for the Agent and the Router."""

    def _one(self, state: Any, questions: Dict[Any, Any], options: CallOptions) -> Step[Result]:
        raise NotImplementedError

    def _many(self, states: List[Any], questions: Dict[Any, Any], options: CallOptions,
              batch_size: Optional[int]) -> Step[List[Result]]:
        raise NotImplementedError

    def answer(self, state: Any, questions: Dict[Any, Any],
               options: CallOptions = NO_OPTIONS) -> Result:
        """One state, every question in one forward pass."""
        return run(self._one(state, questions, options))

    def answer_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                     options: CallOptions = NO_OPTIONS,
                     batch_size: Optional[int] = None) -> List[Result]:
        """The same questions over many states, results in input order."""
        return run(self._many(list(states), questions, options, batch_size))

    async def answer_async(self, state: Any, questions: Dict[Any, Any],
                           options: CallOptions = NO_OPTIONS) -> Result:
        """`answer` on the event loop."""
        return await run_async(self._one(state, questions, options))

    async def answer_batch_async(self, states: Sequence[Any], questions: Dict[Any, Any],
                                 options: CallOptions = NO_OPTIONS,
                                 batch_size: Optional[int] = None) -> List[Result]:
        """`answer_batch` on the event loop."""
        return await run_async(self._many(list(states), questions, options, batch_size))


__all__ = ["Answers", "Decider", "Result"]
