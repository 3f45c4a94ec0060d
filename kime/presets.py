"""`laya.presets` at kime's path (`from kime.presets import triage_questions`): Laya's question
presets, from `kime.laya.presets`."""
from .laya.presets import (email_questions, guard_questions, moderation_questions,
                           router_questions, state_field, triage_questions)

__all__ = ["email_questions", "guard_questions", "moderation_questions", "router_questions",
           "state_field", "triage_questions"]
