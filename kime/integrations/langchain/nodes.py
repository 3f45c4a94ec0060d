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
from .base import BatchedRunnable, fields_of
from .text import StateKey


def _noul_at_least_half(answers: Dict[str, Any], qid: str) -> bool:
    return bool(answers.get(qid, {}).get("noul", 0.0) >= 0.5)


class LayaTriage(BatchedRunnable):
    """Triages a ticket or message in one decision and writes `triage` into the graph state:
    `intent` and `intent_confidence`, `is_urgent`, `frustration_score`, `churn_risk`,
    `refund_requested`. `batch` triages a backlog in one engine pass. The runner and per-call
    arguments are `LayaRouter`'s."""

    def __init__(self, state_key: StateKey = None, agent: Optional[Any] = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 model: Optional[str] = None, max_len: Optional[int] = None,
                 head_max_len: Optional[int] = None, lang: Optional[str] = None,
                 min_confidence: Optional[float] = None, task: Optional[str] = None,
                 lang_guess: Optional[Any] = None, hooks: Optional[Any] = None,
                 on_predict_start: Optional[Any] = None, on_predict_end: Optional[Any] = None,
                 hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None,
                 **kwargs: Any) -> None:
        super().__init__(**fields_of(locals()))

    def _questions(self) -> Dict[str, Any]:
        return triage_questions()

    def _finish(self, result: Dict[str, Any], state: Any) -> Dict[str, Any]:
        answers = result.get("answers", {})
        intent = answers.get("intent", {})
        triage = {
            "intent": intent.get("choice"),
            "intent_confidence": intent.get("confidence"),
            "is_urgent": _noul_at_least_half(answers, "is_urgent"),
            "frustration_score": answers.get("frustration", {}).get("score"),
            "churn_risk": _noul_at_least_half(answers, "churn_risk"),
            "refund_requested": _noul_at_least_half(answers, "refund_requested"),
        }
        if isinstance(state, dict):
            return dict(state, triage=triage)
        return {"input": state, "triage": triage}


class LayaEvaluator(BatchedRunnable):
    """Grades a response against `questions` (a rubric of typed questions) without generating
    text, and returns the answers. `batch` grades a list in one engine pass. The runner and
    per-call arguments are `LayaRouter`'s."""

    questions: Dict[str, Any]

    def __init__(self, questions: Dict[str, Any], state_key: StateKey = None,
                 agent: Optional[Any] = None, base_url: Optional[str] = None,
                 api_key: Optional[str] = None, model: Optional[str] = None,
                 max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                 lang: Optional[str] = None, min_confidence: Optional[float] = None,
                 task: Optional[str] = None, lang_guess: Optional[Any] = None,
                 hooks: Optional[Any] = None, on_predict_start: Optional[Any] = None,
                 on_predict_end: Optional[Any] = None, hooks_raise: Optional[bool] = None,
                 hooks_timeout: Optional[float] = None, **kwargs: Any) -> None:
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
        answers: Dict[str, Any] = result.get("answers", {})
        return answers
