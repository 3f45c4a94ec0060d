"""Laya's question presets (`laya.presets`): the ready-made question sets for support triage,
inbound email, LLM input guards, moderation and model routing, and `state_field`, the state key a
question set reads. The questions themselves are data (`presets_data`); each call returns a fresh
copy, as Laya builds a fresh dict per call, so a caller may edit what it got.
"""
from __future__ import annotations

import copy
import re
from typing import Any, Dict, Mapping, Optional

from . import presets_data as data

Questions = Dict[str, Dict[str, Any]]

_FIELD = re.compile(r"`(\w+)`")


def state_field(questions: Mapping[str, Mapping[str, Any]]) -> Optional[str]:
    """The state key `questions` reads, named in backticks in their instructions (`message`,
    `body`, ...), or None when they name no key or several: then only the caller knows where its
    text belongs."""
    named = {name for spec in questions.values()
             for name in _FIELD.findall(spec.get("instructions") or "")}
    return next(iter(named)) if len(named) == 1 else None


def triage_questions() -> Questions:
    """Customer support ticket triage: intent, urgency, frustration, refund, churn risk."""
    return copy.deepcopy(data.TRIAGE)


def email_questions(categories: Optional[Dict[str, str]] = None) -> Questions:
    """Inbound email triage and threat filtering: which team (`categories`, label ->
    description, when given and not empty; the caller's object is used as is), spam, phishing,
    urgency, whether a reply is expected."""
    category = {"type": "choice", "instructions": data.EMAIL_CATEGORY_INSTRUCTIONS,
                "criteria": categories or dict(data.EMAIL_CATEGORIES)}
    return {"category": category, **copy.deepcopy(data.EMAIL_REST)}


def guard_questions() -> Questions:
    """Real-time LLM input guardrails: jailbreak, prompt injection, sensitive data, harm, topic."""
    return copy.deepcopy(data.GUARD)


def moderation_questions() -> Questions:
    """Content safety: toxicity, harassment, threats, spam and overall severity."""
    return copy.deepcopy(data.MODERATION)


def router_questions() -> Questions:
    """Model routing: how hard the request is, its domain, whether it needs tools, and whether
    it is sensitive."""
    return copy.deepcopy(data.ROUTER)


__all__ = ["email_questions", "guard_questions", "moderation_questions", "router_questions",
           "state_field", "triage_questions"]
