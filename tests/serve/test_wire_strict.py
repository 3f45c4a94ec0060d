"""The strict Jev projection (`kime.serve.wire.strict`) never fails on an answer it can read.

The server replays laya serve's strict answers in `test_server_env.py`; this covers what no
golden can: an answer missing one of its type's fields (a start hook's own result) loses that
field instead of raising a KeyError, which the server would send as a 500.
"""
from __future__ import annotations

from typing import Any, Dict

from hypothesis import given, strategies as st

from kime.serve import wire

FULL: Dict[str, Dict[str, Any]] = {
    "choice": {"type": "choice", "choice": "a", "confidence": 0.7,
               "probabilities": {"a": 0.7, "b": 0.3}, "answer_confidence": 0.4, "x_jev": 1},
    "score": {"type": "score", "score": 2, "confidence": 0.5, "probabilities": {"1": 0.5},
              "legend": {"1": "low"}, "routing": {}},
    "noul": {"type": "noul", "noul": "none", "confidence": 0.9},
}


@given(kind=st.sampled_from(sorted(FULL)), drop=st.sets(st.sampled_from(
    ["choice", "score", "noul", "confidence", "probabilities", "legend", "answer_confidence"])),
    with_model=st.booleans())
def test_a_missing_field_is_left_out(kind: str, drop: set, with_model: bool) -> None:
    answer = {k: v for k, v in FULL[kind].items() if k not in drop}
    result: Dict[str, Any] = {"answers": {"q": answer}, "usage": {"input_tokens": 3}}
    if with_model:
        result["model"] = "m"
    out = wire.strict(result)
    projected = out["answers"]["q"]
    full = wire.strict({"model": "m", "answers": {"q": FULL[kind]}, "usage": {}})["answers"]["q"]
    # What survives is the full projection less what was dropped, in the same order.
    assert projected == {k: v for k, v in full.items() if k not in drop}
    assert list(projected) == [k for k in full if k not in drop]
    assert out["model"] == ("m" if with_model else None)
    assert out["usage"] == {"input_tokens": 3, "output_tokens": 0}
