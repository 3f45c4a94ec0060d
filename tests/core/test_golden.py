"""Parity with Laya 0.4.15 itself, on outputs recorded from the real `laya` package
(`tools/make_goldens.py`) over checkpoints that kime's writer made (`tests/goldens/checkpoints`).

Token ids and markers are exact; keys, their order, choices and types are exact; every rounded
number is within one unit of Laya's fourth decimal; raw logits within 1e-4. Errors: the same
kind (ValueError / TypeError), and Laya's message is kime's first problem.
"""
from __future__ import annotations

import warnings
from typing import Dict

import numpy as np
import pytest

import kime

from ..golden_cases import CASES, DATA, assert_same, call_case, case_rows
from ..paths import GOLDENS
from ..tolerances import FP32


@pytest.fixture(scope="module")
def agents() -> Dict[str, kime.Agent]:
    out = {}
    for name, info in DATA["checkpoints"].items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out[name] = kime.load(str(GOLDENS / info["path"]), device="cpu", threads=1)
        out[name]._load_warnings = [str(w.message) for w in caught]  # type: ignore[attr-defined]
    return out


def _strip(message: str) -> str:
    return message.split(": ", 1)[1] if message.startswith(("laya: ", "kime: ")) else message


def test_goldens_are_sizeable():
    assert len(CASES) >= 40
    assert {c["checkpoint"] for c in CASES} == set(DATA["checkpoints"])
    assert sum(1 for c in CASES if c["error"]) >= 20


def test_load_warnings_match(agents):
    for name, info in DATA["checkpoints"].items():
        assert [_strip(m) for m in agents[name]._load_warnings] == \
            [_strip(m) for m in info["load_warnings"]], name


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(agents, case):
    agent = agents[case["checkpoint"]]
    if case["error"]:
        kind = {"ValueError": ValueError, "TypeError": TypeError}[case["error"]["type"]]
        with pytest.raises(kind) as info:
            call_case(agent, case)
        assert isinstance(info.value, kime.InvalidRequest)
        assert info.value.problems[0]["msg"] == case["error"]["message"]
        return
    assert_same(call_case(agent, case), case["result"])

    rows = case_rows(agent, case)
    assert len(rows) == len(case["rows"])
    for (row, qtype), want in zip(rows, case["rows"]):
        assert row.ids == want["ids"]
        assert row.markers == want["markers"]
        assert kime.render.QTYPES[qtype] == want["qtype"]
    if rows:
        outputs = agent.engine.run_rows([r for r, _ in rows],
                                        [kime.render.QTYPES[qt] for _, qt in rows], cache=False)
        for (logits, act), want in zip(outputs, case["rows"]):
            np.testing.assert_allclose(logits, want["logits"], **FP32.logits.kw)
            np.testing.assert_allclose(act, want["act"], **FP32.probs.kw)
