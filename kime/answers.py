"""Raw outputs -> the engine's answers: temperature, softmax in float32, and the caller's
option order, with the same float32 arithmetic as Laya's `Agent._decode_answers` so Laya's
surface, which rounds these numbers, lands on the same digits.

The engine's answers keep every number unrounded (logits, probabilities, act) and carry no wire
format: Laya's dicts (rounding, `model`, confidence keys) are `kime.laya.wire`'s.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

import numpy as np

from .errors import BackendError, NonFiniteLogits
from .layout import CollapsedOptions
from .render import Label, Question, QuestionId


@dataclass
class Answer:
    """One question's answer with the unrounded numbers.

    `logits` are the raw option logits (float32) in the caller's option order; `probabilities`
    are after temperature and softmax, also in the caller's option order; `act_probability`
    is the act head's first output, `act` all of them; `temperature` is the one applied.
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
    def value(self) -> Label:
        """The choice label, the expected score level, or P(true)."""
        p = self.probabilities
        if self.type == "choice":
            return self.question.labels_out()[int(p.argmax())]
        if self.type == "score":
            return float((np.arange(self.k) * p).sum())
        return float(p[1])


def make_answer(q: Question, logits: np.ndarray, act: np.ndarray, temperature: float) -> Answer:
    """Temperature, softmax in float32, and the slots put back into the caller's option order.
    Non-finite logits are an error, never a probability; so is a count of logits other than the
    question's options, which would put an answer in slot order or under another label."""
    logits = np.asarray(logits, dtype=np.float32)
    if not np.all(np.isfinite(logits)) or not np.all(np.isfinite(act)):
        raise NonFiniteLogits("question %r: the model produced non-finite logits %s; the "
                              "checkpoint's weights or the input are broken" % (q.id, logits))
    k = int(logits.shape[0])
    if k != q.n_options or (q.order is not None and len(q.order) != k):
        raise BackendError("question %r: %d logits for %d options%s; its row lost or gained "
                           "an option marker" % (q.id, k, q.n_options, "" if q.order is None
                                                 else " in an order of %d" % len(q.order)))
    z = logits / temperature
    p = np.exp(z - z.max())
    p /= p.sum()
    if q.order is not None:
        order = np.asarray(q.order, dtype=int)
        canonical = np.empty_like(p)
        canonical[order] = p
        p = canonical
        raw = np.empty_like(logits)
        raw[order] = logits
        logits = raw
    return Answer(question=q, logits=logits, probabilities=p, act_probability=float(act[0]),
                  act=np.asarray(act, dtype=np.float32), temperature=temperature)


@dataclass
class Usage:
    """Token accounting for one state: tokens run, the state's length and what was cut."""

    input_tokens: int = 0
    state_tokens: int = 0
    state_tokens_dropped: int = 0
    truncated_questions: List[QuestionId] = field(default_factory=list)
    options: Dict[QuestionId, CollapsedOptions] = field(default_factory=dict)

    @property
    def truncated(self) -> bool:
        return self.state_tokens_dropped > 0


@dataclass
class Response:
    """The answers to one request, by question id in request order, and the usage."""

    answers: Dict[QuestionId, Answer]
    usage: Usage

    def __getitem__(self, qid: QuestionId) -> Answer:
        return self.answers[qid]
