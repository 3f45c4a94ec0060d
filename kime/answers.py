"""Logits -> Laya's answers (`Agent._decode_answers` and the calibration helpers of
`laya/common.py`), with the same float32 arithmetic so the rounded numbers agree.

Temperatures are chosen by bucket (`type:2|3-5|6-10|11+`, else by type), and every value is
clamped to [0.5, 5]; a value that is not a number becomes 1.0. The checkpoint is told about
each replaced value once, at load, with a warning.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import numpy as np

from .errors import CheckpointError, NonFiniteLogits
from .render import QTYPE_NAMES, Question, render_criterion

LAYA_MODEL = "laya-rl-agent"
TEMP_MIN = 0.5
TEMP_MAX = 5.0


def clamp_temperature(t: Any, lo: float = TEMP_MIN, hi: float = TEMP_MAX) -> float:
    """A usable temperature: confined to [lo, hi], 1.0 for anything that is not a number."""
    if isinstance(t, bool):
        return 1.0
    try:
        t = float(t)
    except (TypeError, ValueError):
        return 1.0
    if t != t or t in (float("inf"), float("-inf")):
        return 1.0
    return min(hi, max(lo, t))


def temperature_rejected(raw: Any, applied: float) -> bool:
    """Whether `raw` is not the number that was applied (a bool is never a number here)."""
    if isinstance(raw, bool):
        return True
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return True
    return value != applied


def temp_bucket(qtype: int, k: int) -> str:
    size = "2" if k <= 2 else "3-5" if k <= 5 else "6-10" if k <= 10 else "11+"
    return "%s:%s" % (QTYPE_NAMES[int(qtype)], size)


class Temperatures:
    """The checkpoint's calibration: one temperature per type, and overrides per option bucket."""

    def __init__(self, temperature: Any, by_options: Any, source: str = "checkpoint"):
        if not isinstance(temperature, (list, tuple)) or len(temperature) != 3:
            raise CheckpointError("Incompatible model: %s temperature must be a list of 3 floats, "
                                  "got %r" % (source, temperature))
        if by_options is None:
            by_options = {}
        if not isinstance(by_options, dict):
            raise CheckpointError("Incompatible model: %s temperature_by_options must be a mapping "
                                  "of bucket -> float, got %r" % (source, by_options))
        self.raw = list(temperature)
        self.raw_by_options = dict(by_options)
        self.by_type = [clamp_temperature(t) for t in temperature]
        self.by_options = {k: clamp_temperature(v) for k, v in by_options.items()}
        entries = [(k, v, self.by_options[k]) for k, v in by_options.items()]
        entries += [("temperature[%d]" % i, t, self.by_type[i]) for i, t in enumerate(temperature)]
        self.rejected = ["%s=%r -> %g" % (name, raw, applied) for name, raw, applied in entries
                         if temperature_rejected(raw, applied)]

    def warn(self) -> None:
        """Say which shipped values were replaced (Laya warns the same at load)."""
        if self.rejected:
            warnings.warn(
                "kime: this checkpoint ships invalid temperatures or values outside [%g, %g]; "
                "using %s. Treat confidence from the affected entries as uncalibrated."
                % (TEMP_MIN, TEMP_MAX, ", ".join(self.rejected)), RuntimeWarning, stacklevel=3)

    def for_question(self, qtype: int, k: int) -> float:
        return self.by_options.get(temp_bucket(qtype, k), self.by_type[qtype])

    def fingerprint(self) -> str:
        return repr((self.by_type, sorted(self.by_options.items())))


def answer_confidence(p: np.ndarray, k: int) -> float:
    """The probability of the reported answer, max(p): what temperature scaling calibrates."""
    if k < 1:
        return 1.0
    val = float(p[:k].max())
    return 0.0 if val < 0.0 else (1.0 if val > 1.0 else val)


def confidence_from_probs(p: np.ndarray, k: int) -> float:
    """1 - H(p) / log(k): how concentrated the distribution is (not calibrated)."""
    if k < 2:
        return 1.0
    pk = p[:k]
    ent = -float((pk * np.log(np.clip(pk, 1e-12, 1.0))).sum())
    score = 1.0 - ent / math.log(k)
    return 0.0 if score < 0.0 else (1.0 if score > 1.0 else score)


@dataclass
class Answer:
    """One question's answer with the unrounded numbers.

    `logits` are the raw option logits (float32) in the caller's option order; `probabilities`
    are after temperature and softmax, also in the caller's option order; `act_probability`
    is the act head's first output. `to_dict()` is Laya's rounded answer.
    """

    question: Question = field(repr=False)
    logits: np.ndarray
    probabilities: np.ndarray
    act_probability: float
    act: np.ndarray = field(repr=False)
    temperature: float = 1.0

    @property
    def type(self) -> str:
        return self.question.qtype

    @property
    def k(self) -> int:
        return int(self.probabilities.shape[0])

    @property
    def answer_confidence(self) -> float:
        return answer_confidence(self.probabilities, self.k)

    @property
    def confidence(self) -> float:
        """Laya's `confidence`: max(p) for a noul, normalised entropy for choice and score."""
        if self.type == "noul":
            p1 = float(self.probabilities[1])
            return max(p1, 1.0 - p1)
        return confidence_from_probs(self.probabilities, self.k)

    @property
    def value(self) -> Any:
        """The choice label, the expected score level, or P(true)."""
        p = self.probabilities
        if self.type == "choice":
            return self.question.labels_out()[int(p.argmax())]
        if self.type == "score":
            return float((np.arange(self.k) * p).sum())
        return float(p[1])

    def to_dict(self) -> Dict[str, Any]:
        p, k = self.probabilities, self.k
        common = {
            "confidence": round(self.confidence, 4),
            "answer_confidence": round(self.answer_confidence, 4),
            "action": {"act_probability": round(float(self.act_probability), 4)},
        }
        if self.type == "choice":
            keys = self.question.labels_out()
            return {"type": "choice", "choice": keys[int(p.argmax())],
                    "probabilities": {key: round(float(v), 4) for key, v in zip(keys, p)}, **common}
        if self.type == "score":
            return {"type": "score", "score": round(float((np.arange(k) * p).sum()), 4),
                    "legend": {str(i): render_criterion(c) for i, c in enumerate(self.question.crit)},
                    "probabilities": {str(i): round(float(v), 4) for i, v in enumerate(p)}, **common}
        return {"type": "noul", "noul": round(float(p[1]), 4), **common}


def make_answer(q: Question, logits: np.ndarray, act: np.ndarray, temps: Temperatures) -> Answer:
    """Temperature, softmax in float32, and the slots put back into the caller's option order."""
    logits = np.asarray(logits, dtype=np.float32)
    if not np.all(np.isfinite(logits)) or not np.all(np.isfinite(act)):
        raise NonFiniteLogits("question %r: the model produced non-finite logits %s; the "
                              "checkpoint's weights or the input are broken" % (q.id, logits))
    k = int(logits.shape[0])
    t = temps.for_question(q.type_index, k)
    z = logits / t
    p = np.exp(z - z.max())
    p /= p.sum()
    if q.order is not None and len(q.order) == k:
        canonical = np.empty_like(p)
        canonical[np.asarray(q.order, dtype=int)] = p
        p = canonical
        raw = np.empty_like(logits)
        raw[np.asarray(q.order, dtype=int)] = logits
        logits = raw
    return Answer(question=q, logits=logits, probabilities=p, act_probability=float(act[0]),
                  act=np.asarray(act, dtype=np.float32), temperature=t)


@dataclass
class Usage:
    """Token accounting for one state, as Laya reports it."""

    input_tokens: int = 0
    state_tokens: int = 0
    state_tokens_dropped: int = 0
    truncated_questions: List[Union[str, int]] = field(default_factory=list)
    options: Dict[Any, Dict[str, Optional[int]]] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.state_tokens_dropped > 0

    def to_dict(self, has_questions: bool = True) -> Dict[str, Any]:
        if not has_questions:
            return {"input_tokens": 0, "output_tokens": 0}
        out: Dict[str, Any] = {
            "input_tokens": self.input_tokens,
            "output_tokens": 0,
            "state_tokens": self.state_tokens,
            "state_tokens_dropped": self.state_tokens_dropped,
            "truncated": self.truncated,
            "truncated_questions": list(self.truncated_questions),
        }
        if self.options:
            out["options"] = dict(self.options)
        return out


@dataclass
class Response:
    """The answers to one request, by question id in request order, and the usage."""

    answers: Dict[Any, Answer]
    usage: Usage
    model: str = LAYA_MODEL

    def to_dict(self) -> Dict[str, Any]:
        """Laya's result dict: `model`, `answers` (rounded), `usage`."""
        return {"model": self.model,
                "answers": {qid: a.to_dict() for qid, a in self.answers.items()},
                "usage": self.usage.to_dict(bool(self.answers))}

    def __getitem__(self, qid: Any) -> Answer:
        return self.answers[qid]
