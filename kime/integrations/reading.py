"""Reading a decision the way a guard or a picker can trust it: fail closed.

A decision can come from a remote server, so every field is arbitrary JSON. The two readers
every adapter is built on:

- `pick(result, qid, keys, where, threshold)`: the candidate a reply chose for a `choice`
  question (routers and selectors);
- `screen(result, questions, threshold, where)`: the violations in a reply to guard questions
  (guardrails).

Both refuse a reply that does not answer every question asked with finite numbers of the right
type: `MalformedDecision` ("Malformed decision response from <where>: ..."), never a pass. A
choice outside the candidates, or no answer at all, is `Unanswered` (a `MalformedDecision`),
which an adapter with a fallback of its own (a query router's `fallback_key`) may route there;
"missing" never reads as "safe", and a missing confidence never meets a threshold. laya 0.4.15
reads a missing `noul` as 0.0 and a missing pick as the first candidate
(`tests/goldens/integrations_faults.json` records where).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple

from ..laya.confidence import gate_confidence

MALFORMED_PREFIX = "Malformed decision response"


class MalformedDecision(RuntimeError):
    """A reply an adapter cannot read as an answer to what it asked."""


class Unanswered(MalformedDecision):
    """A reply that leaves a question unanswered, or picks none of the candidates."""


def where_of(base_url: Any) -> str:
    """The origin named in a malformed-body error: the server's URL, or plain "Laya" locally."""
    return "Laya server at %s" % base_url if base_url else "Laya"


def _real(value: Any) -> bool:
    # bool subclasses int: a spurious `true` must not read as 1.0.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def malformed(where: str, what: str, kind: type = MalformedDecision) -> MalformedDecision:
    """The error for a body field an adapter cannot read, in the one wording."""
    error: MalformedDecision = kind("%s from %s: %s" % (MALFORMED_PREFIX, where, what))
    return error


def answers_map(result: Any, where: str = "Laya") -> Dict[str, Dict[str, Any]]:
    """`result["answers"]`, refusing a reply without one, a non-object there or as any answer.
    An absent `answers` is a malformed reply, never "no answers": read as {}, a router's
    unanswered-question fallback (LlamaIndex's `route`) would take it for the model's choice."""
    if not isinstance(result, dict):
        raise malformed(where, "the reply must be a JSON object, got %s" % type(result).__name__)
    if "answers" not in result:
        raise malformed(where, "the reply has no 'answers' object")
    answers = result["answers"]
    if not isinstance(answers, dict):
        raise malformed(where, "'answers' must be a JSON object, got %s" % type(answers).__name__)
    for qid, answer in answers.items():
        if not isinstance(answer, dict):
            raise malformed(where, "the answer for %r must be a JSON object, got %s"
                            % (qid, type(answer).__name__))
    return answers


def answer_to(result: Any, qid: Any, where: str) -> Dict[str, Any]:
    """The answer to question `qid`, refusing a reply without one."""
    answers = answers_map(result, where)
    if qid not in answers:
        raise malformed(where, "no answer to question %r" % (qid,), Unanswered)
    return answers[qid]


def answer_number(answer: Dict[str, Any], field: str, where: str = "Laya") -> float:
    """`answer[field]` as a float, refusing a missing field, a non-number, a bool, NaN or
    infinity (every threshold comparison against NaN answers False, i.e. "safe")."""
    value: Any = answer.get(field)
    if not _real(value) or not math.isfinite(value):
        raise malformed(where, "%r must be a finite number, got %r" % (field, value))
    return float(value)


def probability_map(answer: Dict[str, Any], keys: Iterable[str],
                    where: str = "Laya") -> Dict[str, float]:
    """`answer["probabilities"]` for each of `keys`, every one a finite number."""
    probs = answer.get("probabilities")
    if not isinstance(probs, dict):
        raise malformed(where, "'probabilities' must be a JSON object, got %s"
                        % type(probs).__name__)
    return {key: answer_number(probs, key, where) for key in keys}


# --- routers and selectors ----------------------------------------------------------------------

@dataclass(frozen=True)
class Pick:
    """What a reply chose: the candidate's `index` and `key`, the gate's `confidence` (None
    when the reply gave none usable), and whether that is `low`: under a threshold above 0,
    which a missing confidence never meets."""

    index: int
    key: str
    confidence: Optional[float]
    low: bool
    answer: Dict[str, Any]

    @property
    def shown(self) -> float:
        """The confidence as a decision reports it: 0.0 when there was none."""
        return 0.0 if self.confidence is None else self.confidence


def pick(result: Any, qid: Any, keys: Sequence[str], where: str, threshold: float = 0.0) -> Pick:
    """The candidate (one of `keys`, the question's option keys in order) the reply chose for
    `qid`; a reply without a string choice among them is refused."""
    answer = answer_to(result, qid, where)
    chosen = answer.get("choice")
    if chosen is None:
        raise malformed(where, "the answer to %r has no 'choice'" % (qid,), Unanswered)
    if not isinstance(chosen, str):
        raise malformed(where, "'choice' must be a string, got %s" % type(chosen).__name__)
    if chosen not in keys:
        raise malformed(where, "'choice' %r names none of the %d candidates"
                        % (chosen, len(keys)), Unanswered)
    confidence = gate_confidence(answer)
    low = threshold > 0.0 and (confidence is None or confidence < threshold)
    return Pick(list(keys).index(chosen), chosen, confidence, low, answer)


def choose(result: Any, qid: Any, keys: Sequence[str], where: str, threshold: float,
           fallback: Optional[int], raise_low: bool, low_message: str,
           text: Any) -> Tuple[int, Pick, bool]:
    """A member picker's rule (agno, CrewAI, LlamaIndex's single selector): the reply's pick,
    or under the threshold `fallback` when set, else `LayaLowConfidenceError` when
    `raise_low` (`low_message` % (confidence, threshold, text)), else the pick as made.
    Returns (the chosen index, the pick, whether the fallback was taken)."""
    from .errors import LayaLowConfidenceError

    chosen = pick(result, qid, keys, where, threshold)
    if chosen.low:
        if fallback is not None:
            return fallback, chosen, True
        if raise_low:
            raise LayaLowConfidenceError(low_message % (chosen.shown, threshold, text),
                                         confidence=chosen.shown, threshold=threshold,
                                         raw_decision=result)
    return chosen.index, chosen, False


# --- guards -------------------------------------------------------------------------------------

def score_violation_probability(answer: Dict[str, Any], levels: int = 0,
                                where: str = "Laya") -> float:
    """The probability that a `score` answer sits in the upper half of its scale (levels k//2..k-1).

    From `probabilities` when it is a non-empty mapping that gives every upper level as a
    number (numeric strings included, booleans not); otherwise the normalised expected level
    `score / (k - 1)`, with `k` the mapping's size or `levels`. A scale under two levels has no
    upper half: 0.0 (laya's rule). When neither reads, the answer is refused (`malformed`,
    naming `where`), never read as 0.0, "no violation": a guard must fail closed.
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
            raw: Any = probs.get(str(i))  # a level left out falls back to the score, not to 0
            if raw is None or isinstance(raw, bool):
                break
            try:
                value = float(raw)
            except (TypeError, ValueError):
                break
            if not math.isfinite(value):  # NaN would compare as "no violation"
                break
            total += value
        else:
            return total
    return answer_number(answer, "score", where) / (k - 1)


def _guarded(qid: Any, question: Any, answer: Dict[str, Any], where: str
             ) -> Tuple[str, float]:
    """(the question's type, the probability it is violated), refusing an answer of another
    type, or without its finite numbers."""
    kind = question.get("type") if isinstance(question, dict) else None
    said = answer.get("type", kind)
    if said != kind:
        raise malformed(where, "the answer to %r is a %r, the question a %r" % (qid, said, kind))
    if kind == "noul":
        probability = answer_number(answer, "noul", where)
        if not 0.0 <= probability <= 1.0:
            raise malformed(where, "'noul' must be a probability in [0, 1], got %r"
                            % (probability,))
        return kind, probability
    if kind == "score":
        score = answer_number(answer, "score", where)
        levels = len(question.get("criteria") or [])
        probs = answer.get("probabilities")
        if probs is not None:
            # every level the question has, and no other: a reply that drops the upper levels
            # (or names a scale of one) would otherwise read as "no violation"
            levels = levels or (len(probs) if isinstance(probs, dict) else 0)
            wanted = [str(i) for i in range(levels)]
            if isinstance(probs, dict) and sorted(probs) != sorted(wanted):
                raise malformed(where, "'probabilities' of %r must give levels %s, got %s"
                                % (qid, wanted, sorted(probs, key=str)))
            _check_distribution(qid, score, probability_map(answer, wanted, where), where)
        if levels and not -ROUNDING <= score <= levels - 1 + ROUNDING:
            # a level below the scale's first would read as "no violation"
            raise malformed(where, "'score' of %r must be a level in [0, %d], got %r"
                            % (qid, levels - 1, score))
        return kind, score_violation_probability(answer, levels, where)
    return str(kind), 0.0


ROUNDING = 5e-5
"""How far a number laya rounds to four places may sit from the value it stands for."""


def _check_distribution(qid: Any, score: float, probs: Dict[str, float], where: str) -> None:
    """A score's probabilities are a distribution over its levels (each in [0, 1], summing to
    1) whose expected level is the score, within the rounding of four places; anything else
    (a 1.5 and a -0.5 that still sum to 1) cannot be read as a violation or its absence."""
    for level, p in probs.items():
        if not -ROUNDING <= p <= 1.0 + ROUNDING:
            raise malformed(where, "the probability of level %s of %r must be in [0, 1], got %r"
                            % (level, qid, p))
    k = len(probs)
    total = sum(probs.values())
    if abs(total - 1.0) > ROUNDING * k + 1e-6:
        raise malformed(where, "the probabilities of %r must sum to 1, got %r" % (qid, total))
    expected = sum(int(level) * p for level, p in probs.items())
    if abs(expected - score) > ROUNDING * (k * (k - 1) / 2 + 1) + 1e-6:
        raise malformed(where, "'score' of %r is %r, but its probabilities give the level %r"
                        % (qid, score, round(expected, 4)))


def screen(result: Any, questions: Dict[str, Any], threshold: float,
           where: str) -> Tuple[Dict[str, Any], Dict[str, Dict[str, Any]]]:
    """(violations, answers) of a reply to guard `questions`. A `noul` whose probability
    reaches `threshold` violates, and a `score` whose upper half does (rounded to 4 places);
    other types never do, but every question must be answered, as its type, with finite
    numbers."""
    answers = answers_map(result, where)
    found: Dict[str, Any] = {}
    for qid, question in questions.items():
        answer = answers.get(qid)
        if answer is None:
            raise malformed(where, "no answer to question %r" % (qid,), Unanswered)
        kind, probability = _guarded(qid, question, answer, where)
        if kind == "noul" and probability >= threshold:
            found[qid] = {"probability": probability,
                          "confidence": answer.get("confidence", 0.0)}
        elif kind == "score" and probability >= threshold:
            found[qid] = {"score": answer["score"], "probability": round(probability, 4),
                          "confidence": answer.get("confidence", 0.0)}
    return found, answers


__all__ = ["MALFORMED_PREFIX", "MalformedDecision", "Pick", "Unanswered", "answer_number",
           "answer_to", "answers_map", "choose", "malformed", "pick", "probability_map",
           "score_violation_probability", "screen", "where_of"]
