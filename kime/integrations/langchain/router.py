"""`LayaRouter`: a LangChain runnable and LangGraph conditional edge that answers a branch label
(laya 0.4.15's, in `laya/integrations/langchain.py`).

One `choice` question (`route`) over the caller's `criteria` (label -> description). The label
is the answer's choice, or `fallback` when a `confidence_threshold` above 0 is set and the
answer's confidence is below it (the number core's `min_confidence` gate reads: the answer's
`answer_confidence`, else its `confidence`; an answer with neither meets no threshold). A
reply whose choice is none of the labels is refused (laya hands the label on). The whole
decision is kept as `last_decision`.

No `from __future__ import annotations`: see `base`, LangGraph reads these hints.
"""
from contextvars import ContextVar
from typing import Any, Dict, List, Optional, Sequence, Union

from ..caller import takes_controls
from ..reading import pick
from .base import BatchedRunnable, RunnableConfig, fields_of
from .text import StateKey

_DECIDED: ContextVar[Optional[Dict[int, Dict[str, Any]]]] = ContextVar("kime_router_decided",
                                                                      default=None)
"""Inside `batch`: each input's decision by the input's id (LangChain's thread pool copies the
context into its workers, so they fill the batch's own dict)."""


class LayaRouter(BatchedRunnable):
    """Routes an input to one of `criteria`'s labels: `chain | LayaRouter(...)`, or
    `graph.add_conditional_edges(node, LayaRouter(...), {label: node, ...})`.

    `batch` answers a list of inputs in one engine pass. Every other argument is as the other
    Laya runnables take it: `state_key` (what to read of a dict input), `agent` (a `kime.load`
    agent or a `kime.Router`) or `base_url`/`api_key` (a laya-serve-compatible server), `model`,
    the token budgets, `lang`, `min_confidence`, the routing hints `task`/`lang_guess` (a
    Router's), and per-call hooks (local runners only).
    """

    criteria: Dict[str, str]
    instructions: str = "Which route should handle this request?"
    confidence_threshold: float = 0.0
    fallback: Optional[str] = None
    question_id: str = "route"
    last_decision: Optional[Dict[str, Any]] = None

    @takes_controls()
    def __init__(self, criteria: Dict[str, str],
                 instructions: str = "Which route should handle this request?",
                 confidence_threshold: float = 0.0, fallback: Optional[str] = None,
                 state_key: StateKey = None, *, controls: Dict[str, Any],
                 **kwargs: Any) -> None:
        super().__init__(**fields_of(locals()))
        # laya's: the question id is fixed whatever was passed, and no decision is kept yet
        self.question_id = "route"
        self.last_decision = None

    def _questions(self) -> Dict[str, Any]:
        return {self.question_id: {"type": "choice", "instructions": self.instructions,
                                   "criteria": self.criteria}}

    def batch(self, inputs: Sequence[Any],
              config: Optional[Union[RunnableConfig, List[RunnableConfig]]] = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> List[Any]:
        """`BatchedRunnable.batch`; afterwards `last_decision` is the last input's decision, as
        a run in order leaves it, also where LangChain's per-input batch ran the inputs on a
        thread pool (where the last to finish would otherwise win)."""
        inputs = list(inputs)
        decided: Dict[int, Dict[str, Any]] = {}
        token = _DECIDED.set(decided)
        try:
            out = super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        finally:
            _DECIDED.reset(token)
        if inputs and id(inputs[-1]) in decided:
            self.last_decision = decided[id(inputs[-1])]
        return out

    def _finish(self, result: Dict[str, Any], input: Any) -> str:
        self.last_decision = result
        decided = _DECIDED.get()
        if decided is not None:
            decided[id(input)] = result
        chosen = pick(result, self.question_id, list(self.criteria), self.caller.where,
                      self.confidence_threshold)
        if chosen.low and self.fallback is not None:
            return self.fallback
        return chosen.key
