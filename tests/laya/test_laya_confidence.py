"""The `min_confidence` gate, as Laya 0.4.15's: its pure helpers (`check_min_confidence`,
`resolve_min_confidence`, `flag_low_confidence`, `apply_confidence_gate`, ...) on hand-made
answers, and `predict` / `predict_batch` with a threshold or a per-bucket map on both golden
checkpoints, every refusal included, replayed from `tests/goldens/confidence.json`
(`tools/goldens_confidence.py`). Then kime's own addition: a refusal lists every bad entry, each
naming its field. (Properties over generated answers: `test_laya_confidence_properties.py`.)"""
from __future__ import annotations

from typing import Any, Dict

import pytest

import kime
from kime.laya import confidence as gate

from ..laya_replay import load_agents, load_cases, replay

CASES = load_cases("confidence.json")


@pytest.fixture(scope="module")
def agents() -> Dict[str, Any]:
    return load_agents()


def test_goldens_are_sizeable():
    assert len(CASES) >= 25
    through_agent = [c for c in CASES if c["checkpoint"]]
    assert {c["checkpoint"] for c in through_agent} == {"tiny", "multilingual-tiny"}
    assert {c["call"] for c in through_agent} == {"predict", "predict_batch"}
    assert sum(1 for c in CASES if c["error"]) >= 20


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(agents, case):
    replay(agents, case)


# ------------------------------------------------------------------------------ every problem

def test_a_bad_map_lists_every_entry_naming_its_field():
    with pytest.raises(kime.InvalidRequest) as info:
        gate.check_min_confidence({"noul:2": 0.4, "bogus": 2.0, "choice:2": -1, "default": True})
    problems = info.value.problems
    assert [p["loc"] for p in problems] == [
        ["min_confidence", "bogus"], ["min_confidence", "bogus"], ["min_confidence", "choice:2"],
        ["min_confidence", "default"]]
    assert problems[0]["msg"] == ("min_confidence map keys must be a bucket like 'choice:3-5' or "
                                  "'default', got 'bogus'")
    assert problems[3]["msg"] == "min_confidence must be a float in [0.0, 1.0], got True"
    text = str(info.value)
    assert text.startswith("4 problems") and "got 'bogus'" in text and "got -1" in text


def test_min_confidence_problems_for_callers_that_merge():
    assert gate.min_confidence_problems(None) == []
    assert gate.min_confidence_problems(0.5) == []
    (p,) = gate.min_confidence_problems(7, loc=["requests", 0, "min_confidence"])
    assert p["loc"] == ["requests", 0, "min_confidence"]
    assert p["type"] == "value_error.min_confidence"


def test_the_server_still_gets_jev_confidence():
    answer = {"type": "choice", "probabilities": {"a": 0.75, "b": 0.25}}
    out = gate.with_jev_confidence({"answers": {"c": answer}})
    assert out["answers"]["c"]["x_jev_confidence"] == 0.5
