"""What the decision routes send for a result (Laya 0.4.15's `laya/serve.py`): Laya's result
with `x_jev_confidence` on each choice and score answer, or, with `jev_strict`
(`LAYA_JEV_STRICT`), the strict Jev contract; and the batch route's envelope.

The strict contract has three top-level fields (`model`, `answers`, `usage`); an answer keeps
its discriminator and its type's fields (choice: `choice`, `confidence`, `probabilities`;
score: those and `legend`, `score` in place of `choice`; noul: `noul` alone) and `usage` its
two token counts. Everything Laya adds -- `routing`, `action`, `answer_confidence`, a noul's
`confidence`, the gate's fields, `x_` fields, the truncation facts -- is left out, which is
what a client validating against the contract with no extra fields needs. Nothing is
recomputed, and an answer of an unknown shape passes through unchanged; a field an answer
lacks is left out.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

from ..laya.confidence import with_jev_confidence

Result = Dict[str, Any]

_STRICT_FIELDS = {"choice": ("type", "choice", "confidence", "probabilities"),
                  "score": ("type", "score", "confidence", "probabilities", "legend"),
                  "noul": ("type", "noul")}


def strict(result: Result) -> Result:
    """`result` projected onto the strict Jev contract (laya serve's `_project_jev_strict`)."""
    answers: Dict[Any, Any] = {}
    for qid, answer in (result.get("answers") or {}).items():
        kind = answer.get("type") if isinstance(answer, dict) else None
        fields = _STRICT_FIELDS.get(kind) if isinstance(kind, str) else None
        # A field the answer lacks (a start hook's own result) is left out, not a KeyError (a 500).
        answers[qid] = answer if fields is None else {key: answer[key] for key in fields
                                                      if key in answer}
    usage = result.get("usage") or {}
    return {"model": result.get("model"), "answers": answers,
            "usage": {"input_tokens": usage.get("input_tokens", 0),
                      "output_tokens": usage.get("output_tokens", 0)}}


def one(result: Result, jev_strict: bool) -> Result:
    """What `/v1/systemone` sends for `result`."""
    return strict(result) if jev_strict else with_jev_confidence(result)


def batch(results: Sequence[Result], jev_strict: bool) -> Result:
    """What `/v1/systemone/batch` sends: each result as `one` sends it, and the token totals
    (summed over Laya's results, before any projection)."""
    return {"results": [one(r, jev_strict) for r in results],
            "total_usage": {
                "input_tokens": sum(r.get("usage", {}).get("input_tokens", 0) for r in results),
                "output_tokens": sum(r.get("usage", {}).get("output_tokens", 0)
                                     for r in results)}}


__all__ = ["batch", "one", "strict"]
