"""`LayaAgnoGuardrail`: screens a message before it reaches an agno agent or team, in one
decision over guard questions (laya's `guard_questions()` preset unless given), and
`LayaAgnoGuardrailError`, raised for a violation in `"raise"` mode. Laya 0.4.15's
`laya.integrations.agno` is the spec: arguments, defaults, the violation rule per question type,
the three actions and what each returns.
"""
from __future__ import annotations

import asyncio
from typing import Any, Dict, Optional

from ..caller import Controlled, takes_controls
from ..reading import screen
from .members import message_text
from .router import require_agno

DEFAULT_REJECTION = "This message cannot be processed because it violates safety guidelines."


class LayaAgnoGuardrailError(ValueError):
    """A message broke a guardrail: `violations` per question id, and the `raw_decision`."""

    def __init__(self, message: str, violations: Dict[str, Any], raw_decision: Dict[str, Any]):
        super().__init__(message)
        self.violations = violations
        self.raw_decision = raw_decision


class LayaAgnoGuardrail(Controlled):
    """Screen agno messages for jailbreaks, injections and policy violations without an LLM.

    A `noul` answer violates when its probability is at least `threshold`; a `score` answer when
    the probability of the upper half of its scale is; other types never do.

    Args:
        questions: the guard questions; None means `kime.presets.guard_questions()`.
        action: `"raise"` (raise `LayaAgnoGuardrailError`), `"filter"` (return
            `rejection_message` instead of a violating message) or `"annotate"` (return the
            message with a `guardrail` record: a dict message gains the key, any other is
            wrapped as `{"message": ..., "guardrail": ...}`). Any other value passes every
            message through unchanged, as laya does.
        rejection_message: what `"filter"` returns for a violating message.
        threshold: the violation probability, in [0, 1] (ValueError outside it).
        agent, base_url, api_key, model, ...: where the decision runs and its per-call
            options, as on `LayaAgnoRouter`.
    """

    @takes_controls()
    def __init__(self, questions: Optional[Dict[str, Any]] = None, action: str = "raise",
                 rejection_message: str = DEFAULT_REJECTION, threshold: float = 0.5, *,
                 controls: Dict[str, Any]):
        require_agno()
        # The chained comparison itself, so a non-number fails as laya's does (TypeError).
        if not 0.0 <= threshold <= 1.0:
            raise ValueError("threshold must be a probability in [0, 1]; got %r" % (threshold,))
        self.questions = questions
        self.action = action
        self.rejection_message = rejection_message
        self.threshold = threshold
        self._keep_controls(controls)

    def _questions(self) -> Dict[str, Any]:
        if self.questions is not None:
            return self.questions
        from ...laya.presets import guard_questions
        return guard_questions()

    def screen(self, message: Any) -> Any:
        """Screen `message` (a string, an agno `RunResponse`/`Message`, a dict).

        Returns the message itself when it passes (or in an unknown action), the rejection
        message (`"filter"`), or the annotated message (`"annotate"`). Raises
        `LayaAgnoGuardrailError` in `"raise"` mode for a violation, RuntimeError for a reply that
        does not answer every question (in every mode: a reply that cannot be read never
        passes).
        """
        qdefs = self._questions()
        res = self._decide(message_text(message), qdefs)
        violations, answers = screen(res, qdefs, self.threshold, self.caller.where)
        passed = not violations
        if not passed and self.action == "raise":
            raise LayaAgnoGuardrailError(
                "Laya Agno guardrail policy violation detected: %s" % (list(violations),),
                violations=violations, raw_decision=res)
        if not passed and self.action == "filter":
            return self.rejection_message
        if self.action == "annotate":
            record = {"passed": passed, "violations": violations, "answers": answers}
            if isinstance(message, dict):
                return dict(message, guardrail=record)
            return {"message": message, "guardrail": record}
        return message

    def __call__(self, message: Any) -> Any:
        return self.screen(message)

    async def ascreen(self, message: Any) -> Any:
        """`screen` in a worker thread, so the event loop keeps running."""
        return await asyncio.to_thread(self.screen, message)
