"""Laya's result dicts: the engine's answers rounded and keyed exactly as Laya 0.4.15's
`Agent.predict` returns them (`model`, `answers`, `usage`, keys in Laya's order, numbers rounded
to 4 decimals), so `kime.load(...).predict(...)` equals Laya's output.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Optional

import numpy as np

from ..answers import Answer, Response, Usage
from ..render import render_criterion
from .confidence import answer_confidence, confidence

LAYA_MODEL = "laya-rl-agent"
"""The `model` every Laya result names, whatever checkpoint answered."""
DIGITS = 4


def _r(x: float) -> float:
    return round(float(x), DIGITS)


AnswerConfidence = Callable[[Answer], float]
"""How an answer's `answer_confidence` is computed: max(p) by default, or through a calibration's
binning map."""


def answer(a: Answer, answer_conf: Optional[AnswerConfidence] = None) -> Dict[str, Any]:
    """One answer as Laya's dict: the value, probabilities (and a score's legend), then the
    confidences and the act probability."""
    p, k = a.probabilities, a.k
    common = {
        "confidence": _r(confidence(a.type, p)),
        "answer_confidence": _r(answer_conf(a) if answer_conf else answer_confidence(p, k)),
        "action": {"act_probability": _r(a.act_probability)},
    }
    if a.type == "choice":
        keys = a.question.labels_out()
        return {"type": "choice", "choice": keys[int(p.argmax())],
                "probabilities": {key: _r(v) for key, v in zip(keys, p)}, **common}
    if a.type == "score":
        return {"type": "score", "score": _r((np.arange(k) * p).sum()),
                "legend": {str(i): render_criterion(c) for i, c in enumerate(a.question.levels())},
                "probabilities": {str(i): _r(v) for i, v in enumerate(p)}, **common}
    return {"type": "noul", "noul": _r(p[1]), **common}


def usage(u: Usage, has_questions: bool = True) -> Dict[str, Any]:
    """Laya's `usage`: a call without questions reports only the two token counts; `options`
    appears only when some question's options collapsed."""
    if not has_questions:
        return {"input_tokens": 0, "output_tokens": 0}
    out: Dict[str, Any] = {
        "input_tokens": u.input_tokens,
        "output_tokens": 0,
        "state_tokens": u.state_tokens,
        "state_tokens_dropped": u.state_tokens_dropped,
        "truncated": u.truncated,
        "truncated_questions": list(u.truncated_questions),
    }
    if u.options:
        out["options"] = dict(u.options)
    return out


def result(response: Response, answer_conf: Optional[AnswerConfidence] = None) -> Dict[str, Any]:
    """Laya's result dict for one state: `model`, `answers` (rounded), `usage`."""
    return {"model": LAYA_MODEL,
            "answers": {qid: answer(a, answer_conf) for qid, a in response.answers.items()},
            "usage": usage(response.usage, bool(response.answers))}


def empty_result() -> Dict[str, Any]:
    """What Laya returns for a state asked no questions (no forward pass runs)."""
    return {"model": LAYA_MODEL, "answers": {}, "usage": usage(Usage(), has_questions=False)}
