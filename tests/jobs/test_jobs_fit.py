"""`kime.jobs.fit` against Laya 0.4.15's fitters on the same records (tests/goldens/fit.json,
recorded by tools/goldens_fit.py): temperatures per type and bucket, the clamp report, the
histogram map, abstention thresholds and ECE, all within 1e-3."""
from __future__ import annotations

import json
import math
from typing import Any, Dict, List

import numpy as np
import pytest
from hypothesis import given, strategies as st

from kime.calibration import TEMP_MAX, TEMP_MIN
from kime.jobs import fit

from ..paths import GOLDENS

GOLDEN = json.loads((GOLDENS / "fit.json").read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in GOLDEN["cases"]}
TOL = 1e-3


def records(case: Dict[str, Any]) -> List[fit.Record]:
    out = []
    for qtype, z, t in case["records"]:
        target = np.eye(len(z))[t] if isinstance(t, int) else t
        out.append(fit.make_record(qtype, z, target))
    return out


@pytest.fixture(scope="module")
def fitted():
    return {name: fit.fit_temperature_map(records(c)) for name, c in CASES.items()}


@pytest.mark.parametrize("name", sorted(CASES))
def test_temperatures_match_laya(name, fitted):
    case, got = CASES[name], fitted[name]
    assert got.temperature == pytest.approx(case["temperature"], abs=TOL)
    assert sorted(got.temperature_by_options) == sorted(case["temperature_by_options"])
    for key, value in case["temperature_by_options"].items():
        assert got.temperature_by_options[key] == pytest.approx(value, abs=TOL)
    assert got.n_by_bucket == case["n_by_bucket"]
    assert {k: (v["applied"], v["bound"]) for k, v in got.temperature_clamped.items()} == \
        {k: (v["applied"], v["bound"]) for k, v in case["temperature_clamped"].items()}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n == "mixed" else n
                                  for n in sorted(CASES)])  # slow: mixed bins thousands of rows
def test_binning_thresholds_and_ece_match_laya(name, fitted):
    """On Laya's own fitted temperatures, so a bin or a threshold is compared on identical
    confidences (a 1e-4 difference in T could move one record across a bin edge)."""
    case, recs = CASES[name], records(CASES[name])
    t, tb = case["temperature"], case["temperature_by_options"]
    binning = fit.fit_binning_map(recs, t, tb)
    assert sorted(binning) == sorted(case["binning_map"])
    for key, entry in case["binning_map"].items():
        assert binning[key]["bins"] == entry["bins"]
        assert binning[key]["values"] == pytest.approx(entry["values"], abs=TOL)
    assert fit.fit_abstention_thresholds(recs, t, tb) == pytest.approx(case["thresholds"], abs=TOL)
    assert fit.fit_abstention_thresholds(recs, t, tb, binning_map=case["binning_map"]) == \
        pytest.approx(case["thresholds_binned"], abs=TOL)
    assert fit.fit_abstention_thresholds(recs, t, tb, target_error=0.2, conservative=False,
                                         min_bucket_n=5) == \
        pytest.approx(case["thresholds_loose"], abs=TOL)
    conf, correct = fit.confidences(recs, t, tb)
    assert fit.ece(conf, correct) == pytest.approx(case["ece"], abs=TOL)


def test_binning_on_our_own_fit_matches_laya(fitted):
    """End to end on the mixed case: kime's temperatures, then kime's map, against Laya's."""
    case, recs = CASES["mixed"], records(CASES["mixed"])
    got = fitted["mixed"]
    binning = fit.fit_binning_map(recs, got.temperature, got.temperature_by_options)
    for key, entry in case["binning_map"].items():
        assert binning[key]["values"] == pytest.approx(entry["values"], abs=0.02)


@pytest.mark.parametrize("case", GOLDEN["ece"], ids=lambda c: "n=%d" % len(c["conf"]))
def test_ece_matches_laya(case):
    got = fit.ece(np.asarray(case["conf"]), np.asarray(case["correct"]))
    if case["ece"] is None or (isinstance(case["ece"], float) and math.isnan(case["ece"])):
        assert math.isnan(got)
    else:
        assert got == pytest.approx(case["ece"], abs=1e-9)


def test_make_record_refuses_what_laya_refuses():
    for bad in (([1.0, 2.0], [1.0]), ([float("nan"), 0.0], [1.0, 0.0]),
                ([0.0, 1.0], [0.6, 0.6]), ([0.0, 1.0], [-0.5, 1.5])):
        with pytest.raises(ValueError):
            fit.make_record(0, *bad)
    with pytest.raises(ValueError):
        fit.make_record(3, [0.0], [1.0])


@pytest.mark.slow  # hypothesis: a fit per example
@given(st.lists(st.tuples(st.lists(st.floats(-20, 20), min_size=2, max_size=6),
                          st.integers(0, 5)), min_size=10, max_size=40))
def test_fitted_temperature_improves_on_the_start(rows):
    """Property: the fit starts at T = 1 and only moves downhill (the objective is unimodal in
    T, so clamping toward the optimum keeps that), and it always lands in the clamp band."""
    recs = [fit.make_record(0, z, np.eye(len(z))[label % len(z)]) for z, label in rows]
    t = fit.fit_temperature_map(recs).temperature[0]
    assert TEMP_MIN <= t <= TEMP_MAX

    def nll(temp: float) -> float:
        total = 0.0
        for r in recs:
            x = r.logits.astype(np.float64) / temp
            m = x.max()
            total += m + math.log(np.exp(x - m).sum()) - float((r.target * x).sum())
        return total / len(recs)

    assert nll(t) <= nll(1.0) + 1e-6
