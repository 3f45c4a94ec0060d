"""Laya's `Agent` over the engine: `kime.load(...)` returns an object whose `predict`,
`system_one` and `predict_batch` return what Laya 0.4.15's `Agent` returns for the same
checkpoint and inputs (the same keys in the same order, the same types, numbers within float32
noise), and raise Laya's argument errors. A Laya user changes one import.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from ..engine import Kime
from ..render import State
from ..request import Request, check_states, questions_arg_problems, raise_if, validated_questions
from . import wire


class Agent:
    """A Laya-compatible agent. Build it with `kime.load`."""

    def __init__(self, engine: Kime):
        self.engine = engine
        self.model_id = engine.model_id
        cfg = engine.checkpoint.config
        self.cfg: Dict[str, Any] = dict(cfg.raw)
        self.temperature: List[float] = list(engine.temperatures.by_type)
        self.temperature_by_options: Dict[str, float] = dict(engine.temperatures.by_options)

    @property
    def device(self) -> str:
        return self.engine.device

    def predict_batch(self, states: List[State], questions: Dict[Any, Dict[str, Any]],
                      batch_size: Optional[int] = None, max_len: Optional[int] = None,
                      head_max_len: Optional[int] = None) -> List[Dict[str, Any]]:
        """The same questions over many states, in shared forward passes; one result per state.

        `batch_size` caps the states per forward pass (memory); it never changes an answer.
        """
        answered, chunks = self._plan(states, questions, batch_size, max_len, head_max_len)
        if answered is not None:
            return answered
        out: List[Dict[str, Any]] = []
        for chunk in chunks:
            out.extend(wire.result(r) for r in self.engine.decide_batch(chunk))
        return out

    async def predict_batch_async(self, states: List[State], questions: Dict[Any, Dict[str, Any]],
                                  batch_size: Optional[int] = None, max_len: Optional[int] = None,
                                  head_max_len: Optional[int] = None) -> List[Dict[str, Any]]:
        """`predict_batch` for asyncio: cancelling the task drops rows not yet on the device."""
        answered, chunks = self._plan(states, questions, batch_size, max_len, head_max_len)
        if answered is not None:
            return answered
        out: List[Dict[str, Any]] = []
        for chunk in chunks:
            out.extend(wire.result(r) for r in await self.engine.decide_batch_async(chunk))
        return out

    async def predict_async(self, state: State, questions: Dict[Any, Dict[str, Any]],
                            max_len: Optional[int] = None,
                            head_max_len: Optional[int] = None) -> Dict[str, Any]:
        """`predict` for asyncio."""
        return (await self.predict_batch_async([state], questions, max_len=max_len,
                                               head_max_len=head_max_len))[0]

    def _plan(self, states: Any, questions: Any, batch_size: Optional[int],
              max_len: Optional[int], head_max_len: Optional[int]
              ) -> Tuple[Optional[List[Dict[str, Any]]], List[List[Request]]]:
        """Laya's argument checks, then (the finished answer, []) for the calls Laya answers
        without a forward pass, or (None, the requests in `batch_size` chunks). The questions
        are validated here, once, and every request carries the validated set."""
        raise_if([], check_states(states) + questions_arg_problems(questions))
        states = list(states)
        if not states:
            return [], []
        if not questions:
            return [wire.empty_result() for _ in states], []
        checked = validated_questions(questions)
        reqs = [Request(state=s, questions=checked, max_len=max_len, head_max_len=head_max_len)
                for s in states]
        size = batch_size if (batch_size and batch_size > 0) else len(reqs)
        return None, [reqs[start:start + size] for start in range(0, len(reqs), size)]

    def system_one(self, state: State, questions: Dict[Any, Dict[str, Any]],
                   max_len: Optional[int] = None, head_max_len: Optional[int] = None) -> Dict[str, Any]:
        """Answer typed questions about one state in one forward pass."""
        return self.predict_batch([state], questions, max_len=max_len, head_max_len=head_max_len)[0]

    predict = system_one

    def __repr__(self) -> str:
        return "kime.Agent(model=%r, device=%r)" % (self.model_id, self.device)


def load(model: str = "laya", device: str = "auto", precision: Optional[str] = None,
         threads: int = 0, answer_cache: int = 4096) -> Agent:
    """Load a checkpoint behind Laya's API. See `kime.Kime` for what `model` may be and for the
    answer cache (0 switches it off, as a benchmark must)."""
    return Agent(Kime(model, device=device, precision=precision, threads=threads,
                      answer_cache=answer_cache))
