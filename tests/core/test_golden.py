"""Parity with Laya 0.4.15 itself, on outputs recorded from the real `laya` package
(`tools/make_goldens.py`) over checkpoints that kime's writer made (`tests/goldens/checkpoints`).

Token ids and markers are exact; keys, their order, choices and types are exact; every rounded
number is within one unit of Laya's fourth decimal; raw logits within 1e-4. Errors: the same
kind (ValueError / TypeError), and Laya's message is kime's first problem.
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

import kime
from kime.request import Request

from .tolerances import FP32, LAYA

GOLDENS = Path(__file__).parent / "goldens"


def _decode(obj: Dict[str, Any]) -> Any:
    # The goldens encode a dict with non-string keys (int ids, int labels) as its items.
    if set(obj) == {"__items__"}:
        return {k: v for k, v in obj["__items__"]}
    return obj


DATA = json.loads((GOLDENS / "cases.json").read_text(encoding="utf-8"), object_hook=_decode)
CASES = DATA["cases"]


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


def _assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        assert list(ours) == list(theirs), "%s keys: %r != %r" % (path, list(ours), list(theirs))
        for key in theirs:
            _assert_same(ours[key], theirs[key], "%s/%s" % (path, key))
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _assert_same(a, b, "%s[%d]" % (path, i))
    elif isinstance(theirs, float):
        assert type(ours) is float, "%s: %r is not a float" % (path, ours)
        assert abs(ours - theirs) <= LAYA.rounded.atol, "%s: %r != %r" % (path, ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs, "%s: %r != %r" % (path, ours, theirs)


def _call(agent: kime.Agent, case: Dict[str, Any]) -> Any:
    args = dict(case["args"])
    if case["call"] == "predict":
        return agent.predict(args.pop("state"), args.pop("questions"), **args)
    return agent.predict_batch(args.pop("states"), args.pop("questions"), **args)


def _rows(agent: kime.Agent, case: Dict[str, Any]) -> List[Any]:
    args = case["args"]
    states = [args["state"]] if case["call"] == "predict" else args["states"]
    rows = []
    for state in states:
        req = Request(state=state, questions=args["questions"], max_len=args.get("max_len"),
                      head_max_len=args.get("head_max_len"))
        qtypes = [q["type"] for q in args["questions"].values()]
        rows.extend((row, qt) for row, qt in zip(agent.engine.rows_for(req), qtypes))
    return rows


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(agents, case):
    agent = agents[case["checkpoint"]]
    if case["error"]:
        kind = {"ValueError": ValueError, "TypeError": TypeError}[case["error"]["type"]]
        with pytest.raises(kind) as info:
            _call(agent, case)
        assert isinstance(info.value, kime.InvalidRequest)
        assert info.value.problems[0]["msg"] == case["error"]["message"]
        return
    _assert_same(_call(agent, case), case["result"])

    rows = _rows(agent, case)
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
