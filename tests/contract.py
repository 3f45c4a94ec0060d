"""The precision contract's measure (docs/precision.md): how far a system's answers move from
Laya's FP32 answers on the same request. Plain Python and NumPy, no kime: the oracle's recorder
(`tools/goldens_precision.py`, in Laya's environment) and kime's tests
(`tests/core/test_precision_contract.py`) take the same numbers with the same code.

A system's answer to a request is read twice: as Laya's result dict (what `predict` returns,
probabilities rounded to four places) and as each question row's raw option logits, in the
order Laya lays the rows and their options out. Three numbers compare it with FP32's:

- `probs`: the largest change of a returned probability, over every question: its options'
  (a `noul`'s P(true)) and its act probability;
- `logits`: the largest change of a raw option logit;
- `flips`: the questions whose top option (the raw logits' argmax, as the answer's label is
  the probabilities' argmax) is not FP32's.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Sequence

import numpy as np

Logits = Mapping[str, Sequence[float]]
"""A request's raw option logits, by question id."""


def probabilities(result: Mapping[str, Any]) -> Dict[str, Dict[str, float]]:
    """Each question's returned probabilities by name: its options' (by label; a `noul`'s
    P(true) as `true`) and its act probability (`act`)."""
    out = {}
    for qid, answer in result["answers"].items():
        probs = {str(k): float(p) for k, p in answer.get("probabilities", {}).items()}
        if answer["type"] == "noul":
            probs["true"] = float(answer["noul"])
        probs["act"] = float(answer["action"]["act_probability"])
        out[qid] = probs
    return out


def deviation(fp32: Mapping[str, Any], fp32_logits: Logits, other: Mapping[str, Any],
              other_logits: Logits) -> Dict[str, Any]:
    """`probs`, `logits` and `flips` (question ids, in request order) of `other` against FP32's
    answers to the same request."""
    want, got = probabilities(fp32), probabilities(other)
    if list(want) != list(got) or list(fp32_logits) != list(other_logits) or any(
            set(want[q]) != set(got[q]) for q in want):
        raise ValueError("the two answers are to different questions or options")
    probs = max((abs(got[q][k] - p) for q in want for k, p in want[q].items()), default=0.0)
    logits, flips = 0.0, []
    for qid, row in fp32_logits.items():
        a, b = np.asarray(other_logits[qid], np.float64), np.asarray(row, np.float64)
        if a.shape != b.shape:
            raise ValueError("question %r: %d option logits against %d" % (qid, a.size, b.size))
        logits = max(logits, float(np.abs(a - b).max()))
        if int(a.argmax()) != int(b.argmax()):
            flips.append(qid)
    return {"probs": float(probs), "logits": logits, "flips": flips}


def within(ours: Sequence[Mapping[str, Any]], bound: Sequence[Mapping[str, Any]]) -> List[str]:
    """What of `ours` exceeds `bound`, in words; [] when nothing. Both are `deviation`s of the
    same requests, in the same order (a checkpoint's W1, W2 and W3): the largest change over the
    set no larger than the peer's, each number apart, and on each request no flip the peer does
    not make there. Over the set, not request by request: one request's largest change is a
    sample of one or a few questions, and on the goldens' checkpoints it lands on either side of
    the peer's by chance (kime's own FP32-attention BF16 moved `tiny` W1's logits 0.062 against
    Laya's autocast's 0.053, and W3's 0.044 against 0.079)."""
    if len(ours) != len(bound):
        raise ValueError("%d requests against %d" % (len(ours), len(bound)))
    out = []
    for key in ("probs", "logits"):
        mine, theirs = max(d[key] for d in ours), max(d[key] for d in bound)
        if mine > theirs:
            out.append("%s %.4g > the peer's %.4g" % (key, mine, theirs))
    for i, (d, b) in enumerate(zip(ours, bound)):
        extra = [q for q in d["flips"] if q not in b["flips"]]
        if extra:
            out.append("request %d flips %s, which the peer does not" % (
                i, ", ".join(map(repr, extra))))
    return out
