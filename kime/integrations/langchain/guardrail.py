"""`LayaGuardrail` and `LayaGuardrailError`: an inline screen for LangChain chains and LangGraph
nodes (laya 0.4.15's, in `laya/integrations/langchain.py`).

Each `noul` question whose probability reaches `threshold`, and each `score` question whose
probability of the upper half of its scale does, is a violation (`reading.screen`); a reply
that does not answer every question with its finite numbers is refused, never passed (laya
reads a missing or NaN `noul` as safe). `action` says what then happens: `raise`
(`LayaGuardrailError`, with the violations and the decision), `filter` (the input dict with
`output` set to `rejection_message`, or the message itself), `annotate` (the input with a
`guardrails` report, passed or not). Otherwise the input goes on unchanged. Without
`questions`, laya's `guard_questions()` preset.

No `from __future__ import annotations`: see `base`, LangGraph reads these hints.
"""
from typing import Any, Dict, Optional

from ...laya.presets import guard_questions
from ..caller import takes_controls
from ..reading import screen
from .base import BatchedRunnable, fields_of
from .text import StateKey

REJECTION = "I cannot fulfill this request because it violates safety guidelines."


class LayaGuardrailError(ValueError):
    """An input that violates a guardrail policy: `violations` (question id -> probability,
    confidence, and a score question's level) and `raw_decision` (the whole decision)."""

    def __init__(self, message: str, violations: Dict[str, Any],
                 raw_decision: Dict[str, Any]) -> None:
        super().__init__(message)
        self.violations = violations
        self.raw_decision = raw_decision


class LayaGuardrail(BatchedRunnable):
    """Screens an input against `questions` (laya's guard preset by default) before it goes on:
    `LayaGuardrail(...) | llm`, or a LangGraph node. `threshold` is a violation probability in
    [0, 1]; a `score` question's levels must run from harmless to worst. `batch` screens a list
    in one engine pass. The runner and per-call arguments are `LayaRouter`'s.
    """

    questions: Optional[Dict[str, Any]] = None
    action: str = "raise"
    rejection_message: str = REJECTION
    threshold: float = 0.5

    @takes_controls()
    def __init__(self, questions: Optional[Dict[str, Any]] = None, action: str = "raise",
                 rejection_message: str = REJECTION, threshold: float = 0.5,
                 state_key: StateKey = None, *, controls: Dict[str, Any],
                 **kwargs: Any) -> None:
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be a probability in [0, 1]; got %r" % (threshold,))
        super().__init__(**fields_of(locals()))

    def _questions(self) -> Dict[str, Any]:
        return self.questions if self.questions is not None else guard_questions()

    def _finish(self, result: Dict[str, Any], input: Any) -> Any:
        violations, answers = screen(result, self._questions(), self.threshold,
                                     self.caller.where)
        passed = not violations
        if not passed and self.action == "raise":
            raise LayaGuardrailError("Laya guardrail policy violation detected: %s"
                                     % list(violations), violations=violations,
                                     raw_decision=result)
        if not passed and self.action == "filter":
            if isinstance(input, dict):
                return dict(input, output=self.rejection_message)
            return self.rejection_message
        if self.action == "annotate":
            report = {"passed": passed, "violations": violations, "answers": answers}
            if isinstance(input, dict):
                return dict(input, guardrails=report)
            return {"input": input, "guardrails": report}
        return input
