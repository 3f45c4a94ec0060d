"""`LayaTriage` and `LayaEvaluator`: LangGraph nodes and LangChain runnables that add a decision
to the state, or grade one (laya 0.4.15's, in `laya/integrations/langchain.py`).

`LayaTriage` asks laya's `triage_questions()` preset (intent, urgency, frustration, churn risk,
refund) and returns the state with a `triage` summary (a non-dict input comes back as
`{"input": ..., "triage": ...}`). `LayaEvaluator` asks the caller's rubric and returns the
answers; `evaluate_strings` is LangChain's string-evaluator interface.

No `from __future__ import annotations`: see `base`, LangGraph reads these hints.
"""
from typing import Any, Dict, Optional

from ...laya.presets import triage_questions
from ..caller import takes_controls
from ..reading import answer_number, answer_to, answers_map
from .base import BatchedRunnable, fields_of
from .text import StateKey


def _read(result: Any, questions: Dict[str, Any], where: str) -> Dict[str, Any]:
    """The answers to `questions`, every one there (`reading.answer_to`): a triage or a grade
    of a reply that left a question out would report a default as the model's answer."""
    return {qid: answer_to(result, qid, where) for qid in questions}


def _at_least_half(answers: Dict[str, Any], qid: str, where: str) -> bool:
    return answer_number(answers[qid], "noul", where) >= 0.5


class LayaTriage(BatchedRunnable):
    """Triages a ticket or message in one decision and writes `triage` into the graph state:
    `intent` and `intent_confidence`, `is_urgent`, `frustration_score`, `churn_risk`,
    `refund_requested`. `batch` triages a backlog in one engine pass. The runner and per-call
    arguments are `LayaRouter`'s."""

    @takes_controls()
    def __init__(self, state_key: StateKey = None, *, controls: Dict[str, Any],
                 **kwargs: Any) -> None:
        super().__init__(**fields_of(locals()))

    def _questions(self) -> Dict[str, Any]:
        return triage_questions()

    def _finish(self, result: Dict[str, Any], state: Any) -> Dict[str, Any]:
        where = self.caller.where
        answers = _read(result, self._questions(), where)
        triage = {
            "intent": answers["intent"].get("choice"),
            "intent_confidence": answers["intent"].get("confidence"),
            "is_urgent": _at_least_half(answers, "is_urgent", where),
            "frustration_score": answers["frustration"].get("score"),
            "churn_risk": _at_least_half(answers, "churn_risk", where),
            "refund_requested": _at_least_half(answers, "refund_requested", where),
        }
        if isinstance(state, dict):
            return dict(state, triage=triage)
        return {"input": state, "triage": triage}


class LayaEvaluator(BatchedRunnable):
    """Grades a response against `questions` (a rubric of typed questions) without generating
    text, and returns the answers. `batch` grades a list in one engine pass. The runner and
    per-call arguments are `LayaRouter`'s."""

    questions: Dict[str, Any]

    @takes_controls()
    def __init__(self, questions: Dict[str, Any], state_key: StateKey = None, *,
                 controls: Dict[str, Any], **kwargs: Any) -> None:
        super().__init__(**fields_of(locals()))

    def evaluate_strings(self, *, prediction: str, input: Optional[str] = None,
                         **kwargs: Any) -> Dict[str, Any]:
        """LangChain's string evaluation: the answers about `prediction`, read beside `input`
        when one is given (the state is then `{"input", "prediction"}`)."""
        state: Any = {"input": input, "prediction": prediction} if input else prediction
        return self._finish(self._decide(state, self.questions), state)

    def _questions(self) -> Dict[str, Any]:
        return self.questions

    def _finish(self, result: Dict[str, Any], input: Any) -> Dict[str, Any]:
        _read(result, self.questions, self.caller.where)
        return answers_map(result, self.caller.where)
