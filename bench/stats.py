"""Percentiles and answer comparison, in plain Python (no NumPy needed to read a report)."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Sequence


def percentile(samples: Sequence[float], p: float) -> float:
    """The p-th percentile, linear between closest ranks (NumPy's default method)."""
    xs = sorted(samples)
    if not xs:
        return math.nan
    pos = (len(xs) - 1) * p / 100.0
    lo = int(math.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def paired_ratio(other: Sequence[float], base: Sequence[float]) -> Optional[float]:
    """The median over rounds of `other`'s call over `base`'s call in the same round (sample i of
    each is round i's timed call), or None without a common round: a ratio that holds still while
    a shared machine's speed moves between rounds."""
    ratios = [o / b for o, b in zip(other, base) if b > 0]
    return percentile(ratios, 50) if ratios else None


def summarize(samples: Sequence[float]) -> Dict[str, Any]:
    return {"n": len(samples), "p50": percentile(samples, 50), "p95": percentile(samples, 95),
            "p99": percentile(samples, 99), "min": min(samples), "max": max(samples),
            "mean": sum(samples) / len(samples), "samples": list(samples)}


def _walk(a: Any, b: Any, path: str, out: Dict[str, Any]) -> None:
    if isinstance(a, bool) or isinstance(b, bool) or isinstance(a, str) or isinstance(b, str):
        if a != b:
            out["mismatches"].append("%s: %r != %r" % (path, a, b))
        return
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        d = abs(float(a) - float(b))
        if d > out["max_abs"]:
            out["max_abs"], out["worst"] = d, path
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key in b:
                _walk(a[key], b[key], "%s.%s" % (path, key) if path else str(key), out)
            else:
                out["mismatches"].append("%s.%s: missing on one side" % (path, key))
        for key in b:
            if key not in a:
                out["mismatches"].append("%s.%s: missing on one side" % (path, key))
        return
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk(x, y, "%s[%d]" % (path, i), out)
        return
    if a != b:
        out["mismatches"].append("%s: %r != %r" % (path, a, b))


def compare_results(kime: Any, peer: Any) -> Dict[str, Any]:
    """Compare two `predict` results (or `predict_batch` lists) answer by answer.

    Returns `max_abs` (the largest difference of any number in the answers: probabilities,
    scores, confidences, act probabilities), `worst` (where), `mismatches` (labels that differ:
    a different `choice`), and `layout` (token counts in `usage` that differ, which would mean
    the two laid the question out differently).
    """
    a = kime if isinstance(kime, list) else [kime]
    b = peer if isinstance(peer, list) else [peer]
    out: Dict[str, Any] = {"max_abs": 0.0, "worst": None, "mismatches": [], "layout": []}
    if len(a) != len(b):
        out["mismatches"].append("%d results != %d" % (len(a), len(b)))
        return out
    for i, (x, y) in enumerate(zip(a, b)):
        prefix = "[%d]." % i if len(a) > 1 else ""
        _walk(x.get("answers", {}), y.get("answers", {}), prefix.rstrip("."), out)
        for key in ("input_tokens", "state_tokens", "state_tokens_dropped"):
            ux, uy = x.get("usage", {}).get(key), y.get("usage", {}).get(key)
            if ux != uy:
                out["layout"].append("%susage.%s: %r != %r" % (prefix, key, ux, uy))
    return out


def w1_agrees(kime: Dict[str, Any], peer: Dict[str, Any], tol: float = 1e-3) -> List[str]:
    """Why a peer's W1 answer is not kime's (the same choice, every probability within `tol`);
    empty when they agree."""
    why = []
    for qid, ans in kime["answers"].items():
        other = peer["answers"].get(qid)
        if other is None:
            why.append("%s: missing" % qid)
            continue
        if ans.get("choice") != other.get("choice"):
            why.append("%s: choice %r != %r" % (qid, ans.get("choice"), other.get("choice")))
        for label, p in ans.get("probabilities", {}).items():
            q = other.get("probabilities", {}).get(label)
            if q is None or abs(p - q) > tol:
                why.append("%s: p(%s) %r vs %r" % (qid, label, p, q))
    return why
