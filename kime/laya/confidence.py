"""Laya's confidence numbers and its `min_confidence` gate, in one place: `confidence` (how
concentrated an answer's distribution is), `answer_confidence` (the probability of the reported
answer, what temperature scaling calibrates), laya serve's `x_jev_confidence`, and the pure
helpers Laya exports for abstention (`check_min_confidence`, `resolve_min_confidence`,
`flag_low_confidence`, `apply_confidence_gate`, `GATE_STATES`).

They are Laya's surface, not the engine's: the engine returns probabilities, and these read them
(and gate Laya's result dicts) the way `laya/common.py`, `laya/confidence.py` and `laya/serve.py`
do, under the same names, semantics and refusal messages.
"""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional, Set, Union

import numpy as np

from ..errors import InvalidRequest, Problem, problem


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


# ------------------------------------------------------------------------------ the gate

MinConfidence = Union[float, Dict[str, float]]
"""A validated `min_confidence`: one threshold for every answer, or one per option-count bucket."""

BUCKET_QTYPES = ("choice", "score", "noul")
BUCKET_SIZES = ("2", "3-5", "6-10", "11+")
DEFAULT_BUCKET_KEY = "default"
"""The one key of a per-bucket map that is not a bucket: the threshold of every bucket it omits."""

GATE_PASSED = "passed"
GATE_ABSTAINED = "abstained"
GATE_UNEVALUATED = "unevaluated"
GATE_STATES = (GATE_PASSED, GATE_ABSTAINED, GATE_UNEVALUATED)
"""The `abstention` values a gated answer carries: its confidence cleared the threshold, fell
below it, or was missing (the gate could not decide). An ungated call carries no `abstention`
at all, so the field's presence is what says a gate ran."""

_THRESHOLD_MSG = "min_confidence must be a float in [0.0, 1.0], got %r"
_MAP_MSG = "a min_confidence map must be a non-empty dict of bucket -> float, got %r"
_KEY_MSG = "min_confidence map keys must be a bucket like 'choice:3-5' or 'default', got %r"


def _number(x: Any) -> Optional[float]:
    """`x` as a float when it is a real, finite number, else None: a bool is a yes/no and a NaN
    is no decision, so neither counts."""
    if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x):
        return float(x)
    return None


def answer_confidence_value(answer: Dict[str, Any]) -> Optional[float]:
    """An answer dict's `answer_confidence` when it is a usable number, else None.

    Deliberately no fallback to the entropy `confidence`: a caller filtering on this name must
    get the gate's quantity or nothing."""
    return _number(answer.get("answer_confidence"))


def gate_confidence(answer: Dict[str, Any]) -> Optional[float]:
    """What the gate compares: `answer_confidence`, else the older `confidence` (so an answer
    carrying only that is still gated), else None (nothing usable to gate on). The integrations
    gate on it too, as laya's wrappers do."""
    conf = answer_confidence_value(answer)
    if conf is not None:
        return conf
    return _number(answer.get("confidence"))


def bucket_keys() -> Set[str]:
    """Every option-count bucket a `min_confidence` map may name (`"choice:3-5"`, `"noul:2"`, ...):
    the same spelling as the calibration's temperature buckets."""
    return {"%s:%s" % (qt, size) for qt in BUCKET_QTYPES for size in BUCKET_SIZES}


def _threshold_problems(value: Any, loc: List[Any]) -> List[Problem]:
    number = _number(value)
    if number is not None and 0.0 <= number <= 1.0:
        return []
    return [problem(loc, _THRESHOLD_MSG % (value,), "value_error.min_confidence", value)]


def _map_problems(m: Any, loc: List[Any]) -> List[Problem]:
    if not isinstance(m, dict) or not m:
        return [problem(loc, _MAP_MSG % (m,), "value_error.min_confidence", m)]
    allowed = bucket_keys() | {DEFAULT_BUCKET_KEY}
    out: List[Problem] = []
    for key, val in m.items():
        if not isinstance(key, str) or key not in allowed:
            out.append(problem(loc + [key], _KEY_MSG % (key,), "value_error.min_confidence", key))
        out += _threshold_problems(val, loc + [key])
    return out


def min_confidence_problems(value: Any, loc: Optional[List[Any]] = None) -> List[Problem]:
    """Every problem with a `min_confidence` argument (none when it is None: no gate), in the
    order Laya meets them, so the first is Laya's message. For callers that merge these with
    their other argument problems into one error."""
    if value is None:
        return []
    where = list(loc) if loc is not None else ["min_confidence"]
    if isinstance(value, dict):
        return _map_problems(value, where)
    return _threshold_problems(value, where)


def check_min_confidence_map(m: Dict[Any, Any]) -> Dict[str, float]:
    """A per-bucket threshold map, validated: keys from `bucket_keys()` plus `"default"`, values
    in [0, 1]. An unknown key is refused rather than ignored, because the bucket its caller meant
    would otherwise fall through to `"default"` (or to 0.0) and quietly not be gated."""
    problems = _map_problems(m, ["min_confidence"])
    if problems:
        raise InvalidRequest(problems)
    return {key: float(val) for key, val in m.items()}


def check_min_confidence(v: Any) -> MinConfidence:
    """`min_confidence` validated: a float in [0, 1] (bools refused), or a per-bucket map (see
    `check_min_confidence_map`), because one threshold does not transfer across option counts.
    Raises a `ValueError` (`kime.InvalidRequest`) listing every problem, Laya's message first."""
    if isinstance(v, dict):
        return check_min_confidence_map(v)
    problems = _threshold_problems(v, ["min_confidence"])
    if problems:
        raise InvalidRequest(problems)
    return float(v)


def _option_bucket(answer: Dict[str, Any]) -> Optional[str]:
    """The answer's bucket, read off the answer itself (type and number of probabilities; a noul
    has two), so gating needs no checkpoint."""
    qtype, probs = answer.get("type"), answer.get("probabilities")
    if qtype not in BUCKET_QTYPES:
        return None
    if isinstance(probs, dict) and probs:
        k = len(probs)
    elif qtype == "noul":
        k = 2
    else:
        return None
    size = "2" if k <= 2 else "3-5" if k <= 5 else "6-10" if k <= 10 else "11+"
    return "%s:%s" % (qtype, size)


def resolve_min_confidence(answer: Dict[str, Any], thresholds: Dict[str, float],
                           default: float = 0.0) -> float:
    """The threshold an answer's bucket is gated at under a per-bucket map: its own entry, else
    the map's `"default"`, else `default` (0.0: a bucket nobody configured never abstains)."""
    key = _option_bucket(answer)
    if key is not None and key in thresholds:
        return thresholds[key]
    return thresholds.get(DEFAULT_BUCKET_KEY, default)


def _answers(results: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The answer dicts of Laya results, skipping anything that is not one."""
    out: List[Dict[str, Any]] = []
    for res in results:
        answers = res.get("answers") if isinstance(res, dict) else None
        if isinstance(answers, dict):
            out.extend(a for a in answers.values() if isinstance(a, dict))
    return out


def flag_low_confidence(results: List[Dict[str, Any]], min_confidence: MinConfidence) -> None:
    """Mark, in place, every answer whose confidence is below its threshold with
    `low_confidence: True`, and clear the mark from every other answer (a reused payload gated
    again at a laxer threshold must not keep a stale flag; 0.0 clears them all). The answer's
    own values are left as they are."""
    for a in _answers(results):
        conf = gate_confidence(a)
        if conf is None:
            a.pop("low_confidence", None)
            continue
        thr = (resolve_min_confidence(a, min_confidence) if isinstance(min_confidence, dict)
               else min_confidence)
        if conf < thr:
            a["low_confidence"] = True
        else:
            a.pop("low_confidence", None)


def apply_confidence_gate(results: List[Dict[str, Any]],
                          min_confidence: Optional[MinConfidence] = None) -> None:
    """Gate Laya results in place and report it on every answer: `low_confidence` (through
    `flag_low_confidence`), then `abstention` (one of `GATE_STATES`) and `abstention_threshold`
    (the threshold that answer's bucket was gated at), so a caller can count abstentions and
    re-split a run by threshold.

    With `min_confidence` None it writes nothing, so an ungated call returns exactly its usual
    payload: call it unconditionally once per call. `min_confidence` must already be validated
    (`check_min_confidence`)."""
    if min_confidence is None:
        return
    flag_low_confidence(results, min_confidence)
    for a in _answers(results):
        if a.get("low_confidence"):
            a["abstention"] = GATE_ABSTAINED
        elif gate_confidence(a) is None:
            a["abstention"] = GATE_UNEVALUATED
        else:
            a["abstention"] = GATE_PASSED
        a["abstention_threshold"] = float(resolve_min_confidence(a, min_confidence)
                                          if isinstance(min_confidence, dict) else min_confidence)
