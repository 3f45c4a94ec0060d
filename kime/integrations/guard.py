"""Reading a decision body the guardrails and selectors can trust: laya 0.4.15's `_guard` rules.

A decision can come from a remote server, so every field is arbitrary JSON. These helpers turn
a shape the adapters cannot read into one `RuntimeError` wording ("Malformed decision response
from <where>: ..."), so a guard fails closed instead of leaking AttributeError/TypeError, and
hold the score-question rule a guardrail thresholds on.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Iterable

MALFORMED_PREFIX = "Malformed decision response"


def where_of(base_url: Any) -> str:
    """The origin named in a malformed-body error: the server's URL, or plain "Laya" locally."""
    return "Laya server at %s" % base_url if base_url else "Laya"


def _real(value: Any) -> bool:
    # bool subclasses int: a spurious `true` must not read as 1.0.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def score_violation_probability(answer: Dict[str, Any], levels: int = 0) -> float:
    """The probability that a `score` answer sits in the upper half of its scale (levels k//2..k-1).

    From `probabilities` when it is a non-empty mapping whose in-range values all read as
    numbers (numeric strings included, booleans not); otherwise the normalised expected level
    `score / (k - 1)`, with `k` the mapping's size or `levels`, and 0.0 for an unusable score or
    a scale under two levels.
    """
    probs = answer.get("probabilities")
    if not isinstance(probs, dict):
        probs = {}
    k = len(probs) or levels
    if k < 2:
        return 0.0
    if probs:
        total = 0.0
        for i in range(k // 2, k):
            value = probs.get(str(i), 0.0)
            if isinstance(value, bool):
                break
            try:
                total += float(value)
            except (TypeError, ValueError):
                break
        else:
            return total
    score = answer.get("score", 0.0)
    if not _real(score):
        return 0.0
    return score / (k - 1)


def malformed(where: str, what: str) -> RuntimeError:
    """The error for a body field an adapter cannot read, in the one wording."""
    return RuntimeError("%s from %s: %s" % (MALFORMED_PREFIX, where, what))


def answers_map(result: Any, where: str = "Laya") -> Dict[str, Dict[str, Any]]:
    """`result["answers"]` ({} when absent), refusing a non-object there or as any answer."""
    answers = result.get("answers", {}) if isinstance(result, dict) else None
    if not isinstance(answers, dict):
        raise malformed(where, "'answers' must be a JSON object, got %s" % type(answers).__name__)
    for qid, answer in answers.items():
        if not isinstance(answer, dict):
            raise malformed(where, "the answer for %r must be a JSON object, got %s"
                            % (qid, type(answer).__name__))
    return answers


def answer_number(answer: Dict[str, Any], field: str, where: str = "Laya",
                  default: float = 0.0) -> float:
    """`answer[field]` (or `default`) as a float, refusing a non-number, a bool, NaN or infinity.

    NaN is refused because every threshold comparison against it answers False, i.e. "safe".
    """
    value = answer.get(field, default)
    if not _real(value) or not math.isfinite(value):
        raise malformed(where, "%r must be a finite number, got %r" % (field, value))
    return float(value)


def probability_map(answer: Dict[str, Any], keys: Iterable[str],
                    where: str = "Laya") -> Dict[str, float]:
    """`answer["probabilities"]` restricted to `keys`, each a finite number, a missing key 0.0."""
    probs = answer.get("probabilities")
    if probs is None:
        probs = {}
    if not isinstance(probs, dict):
        raise malformed(where, "'probabilities' must be a JSON object, got %s"
                        % type(probs).__name__)
    return {key: (answer_number(probs, key, where) if key in probs else 0.0) for key in keys}


def violations(answers: Dict[str, Dict[str, Any]], questions: Dict[str, Any], threshold: float,
               where: str) -> Dict[str, Any]:
    """The answers that break the policy, as the CrewAI and agno guards report them: a `noul`
    whose probability (checked to be a number) reaches `threshold`, and a `score` whose upper
    half does (`score_violation_probability`, rounded to 4 places), with their confidences."""
    found: Dict[str, Any] = {}
    for qid, answer in answers.items():
        kind = answer.get("type")
        if kind == "noul":
            probability = answer_number(answer, "noul", where)
            if probability >= threshold:
                found[qid] = {"probability": probability,
                              "confidence": answer.get("confidence", 0.0)}
        elif kind == "score":
            # `score` is the expected level, not a probability: gate on the upper half.
            levels = len(questions.get(qid, {}).get("criteria") or [])
            p_violation = score_violation_probability(answer, levels)
            if p_violation >= threshold:
                found[qid] = {"score": answer.get("score", 0.0),
                              "probability": round(p_violation, 4),
                              "confidence": answer.get("confidence", 0.0)}
    return found
