"""Laya's confidence numbers, in one place: `confidence` (how concentrated an answer's
distribution is), `answer_confidence` (the probability of the reported answer, what temperature
scaling calibrates) and laya serve's `x_jev_confidence`.

They are Laya's surface, not the engine's: the engine returns probabilities, and these read them
the way `laya/common.py` and `laya/serve.py` do.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Optional

import numpy as np


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


def confidence(qtype: str, p: np.ndarray) -> float:
    """Laya's `confidence`: max(p) for a noul, normalised entropy for choice and score."""
    if qtype == "noul":
        p1 = float(p[1])
        return max(p1, 1.0 - p1)
    return confidence_from_probs(p, int(p.shape[0]))


def jev_confidence(answer: Dict[str, Any]) -> Optional[float]:
    """laya's `x_jev_confidence` (TypeSafe Jev's confidence formula) for a choice/score answer."""
    kind, probs = answer.get("type"), answer.get("probabilities")
    if kind not in ("choice", "score") or not isinstance(probs, dict) or not probs:
        return None
    try:
        p = ([float(probs[k]) for k in sorted(probs, key=int)] if kind == "score"
             else [float(v) for v in probs.values()])
    except (TypeError, ValueError):
        return None
    if any(isinstance(v, bool) for v in probs.values()) or not all(
            math.isfinite(v) and v >= 0.0 for v in p):
        return None
    n = len(p)
    if n == 1:
        return 1.0
    total = sum(p)
    p = [v / total for v in p] if total else [1.0 / n] * n
    if kind == "choice":
        return (max(p) - 1.0 / n) / (1.0 - 1.0 / n)
    mode = max(range(n), key=p.__getitem__)
    spread = sum(v * abs(i - mode) for i, v in enumerate(p))
    center = (n - 1) / 2
    uniform = sum(abs(i - center) for i in range(n)) / n
    return max(0.0, 1.0 - spread / uniform)


def with_jev_confidence(result: Dict[str, Any]) -> Dict[str, Any]:
    """What laya-serve sends for a predict() result: `x_jev_confidence` on choice/score answers."""
    if not isinstance(result.get("answers"), dict):
        return result
    answers = {}
    for qid, a in result["answers"].items():
        conf = jev_confidence(a) if isinstance(a, dict) else None
        answers[qid] = a if conf is None else {**a, "x_jev_confidence": round(conf, 4)}
    return {**result, "answers": answers}

