"""Properties of Laya's `min_confidence` gate helpers over generated answers and thresholds: one
reported state per answer that matches the rule, idempotence, no writes without a gate,
monotonicity in the threshold, and `check_min_confidence` accepting exactly the valid values."""
from __future__ import annotations

import copy
import math
from typing import Any, Dict, List

import pytest

import kime
from kime.laya import confidence as gate

hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies
given, settings = hypothesis.given, hypothesis.settings

probability = st.floats(0.0, 1.0)
number_or_junk = st.one_of(probability, st.none(), st.just(float("nan")), st.booleans(),
                           st.just("0.5"))


@st.composite
def answers(draw: Any) -> Dict[str, Any]:
    qtype = draw(st.sampled_from(["choice", "score", "noul", "ranking"]))
    out: Dict[str, Any] = {"type": qtype}
    k = draw(st.integers(0, 14))
    if k and (qtype != "noul" or draw(st.booleans())):
        out["probabilities"] = {str(i): 1.0 / k for i in range(k)}
    for key in ("confidence", "answer_confidence"):
        if draw(st.booleans()):
            out[key] = draw(number_or_junk)
    if draw(st.booleans()):  # a stale gate from an earlier call on a reused payload
        out.update(low_confidence=True, abstention="abstained", abstention_threshold=1.0)
    return out


results = st.lists(st.dictionaries(st.text(max_size=3), answers(), max_size=5).map(
    lambda a: {"model": "laya-rl-agent", "answers": a}), max_size=3)
bucket_maps = st.dictionaries(st.sampled_from(sorted(gate.bucket_keys()) + ["default"]),
                              probability, min_size=1)
thresholds = st.one_of(probability, bucket_maps)


GATE_KEYS = ("low_confidence", "abstention", "abstention_threshold")


def _all_answers(res: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    return [a for r in res for a in r["answers"].values()]


@pytest.mark.slow  # hypothesis: 300 examples
@settings(max_examples=300, deadline=None)
@given(results, thresholds)
def test_gate_reports_one_state_per_answer(res, mc):
    before = copy.deepcopy(res)
    gate.apply_confidence_gate(res, mc)
    for a, old in zip(_all_answers(res), _all_answers(before)):
        conf = gate.answer_confidence_value(old)
        if conf is None and not isinstance(old.get("confidence"), bool) \
                and isinstance(old.get("confidence"), (int, float)) \
                and math.isfinite(old["confidence"]):
            conf = float(old["confidence"])
        thr = gate.resolve_min_confidence(old, mc) if isinstance(mc, dict) else mc
        assert a["abstention"] in gate.GATE_STATES
        assert a["abstention_threshold"] == thr and type(a["abstention_threshold"]) is float
        want = "unevaluated" if conf is None else "abstained" if conf < thr else "passed"
        assert a["abstention"] == want
        assert a.get("low_confidence", False) is (want == "abstained")
        # the answer itself is untouched
        assert repr({k: v for k, v in a.items() if k not in GATE_KEYS}) == \
            repr({k: v for k, v in old.items() if k not in GATE_KEYS})


@pytest.mark.slow  # hypothesis: 200 examples
@settings(max_examples=200, deadline=None)
@given(results, thresholds)
def test_gate_is_idempotent_and_none_writes_nothing(res, mc):
    untouched = copy.deepcopy(res)
    gate.apply_confidence_gate(untouched, None)
    assert repr(untouched) == repr(res)
    gate.apply_confidence_gate(res, mc)
    once = repr(res)
    gate.apply_confidence_gate(res, mc)
    assert repr(res) == once


@settings(max_examples=200, deadline=None)
@given(results, probability, probability)
def test_a_stricter_threshold_never_passes_more(res, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    lax, strict = copy.deepcopy(res), copy.deepcopy(res)
    gate.apply_confidence_gate(lax, lo)
    gate.apply_confidence_gate(strict, hi)
    for a, b in zip(_all_answers(lax), _all_answers(strict)):
        if a["abstention"] == "abstained":
            assert b["abstention"] == "abstained"
    gate.apply_confidence_gate(lax, 0.0)
    assert all(a["abstention"] != "abstained" and "low_confidence" not in a
               for a in _all_answers(lax))


@settings(max_examples=300, deadline=None)
@given(st.one_of(number_or_junk, st.integers(-2, 2), st.floats(allow_nan=True), bucket_maps,
                 st.dictionaries(st.one_of(st.text(max_size=9), st.integers()), number_or_junk)))
def test_check_min_confidence_accepts_exactly_the_valid(value):
    def valid(v: Any) -> bool:
        return (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                and 0.0 <= v <= 1.0)

    allowed = gate.bucket_keys() | {"default"}
    if isinstance(value, dict):
        ok = bool(value) and all(k in allowed and valid(v) for k, v in value.items())
    else:
        ok = valid(value)
    if ok:
        checked = gate.check_min_confidence(value)
        assert checked == (value if isinstance(value, dict) else float(value))
        values = checked.values() if isinstance(checked, dict) else [checked]
        assert all(type(v) is float for v in values)
    else:
        with pytest.raises(ValueError) as info:
            gate.check_min_confidence(value)
        assert isinstance(info.value, kime.InvalidRequest) and info.value.problems


