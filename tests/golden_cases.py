"""The core goldens (`tests/goldens/cases.json`, recorded from Laya 0.4.15 by
`tools/make_goldens.py`): the cases, how to call one through an agent, its rows, and the
comparison every golden test uses (keys and their order, types exactly, rounded numbers within
`LAYA.rounded`). Shared by tests/core, tests/laya and tests/cuda."""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any, Dict, List

import kime
from kime.request import Request

from .paths import GOLDENS
from .tolerances import LAYA


def _decode(obj: Dict[str, Any]) -> Any:
    # The goldens encode a dict with non-string keys (int ids, int labels) as its items.
    if set(obj) == {"__items__"}:
        return dict(obj["__items__"])
    return obj


def read_goldens(name: str) -> Any:
    """A golden file in `cases.json`'s encoding (`tools/make_goldens.py`), decoded."""
    return json.loads((GOLDENS / name).read_text(encoding="utf-8"), object_hook=_decode)


DATA = read_goldens("cases.json")
CASES = DATA["cases"]
LIMITS = read_goldens("limits.json")
"""Laya at the model's limits (`tools/goldens_limits.py`)."""


def limits_checkpoint(name: str, tmp: Path) -> Path:
    """A checkpoint of `limits.json` on disk: a committed one, or (under `tmp`) the copy of one
    with its encoder config changed as the recorder changed it."""
    info = LIMITS["checkpoints"][name]
    if "path" in info:
        return GOLDENS / info["path"]
    out = tmp / name
    if not out.exists():
        shutil.copytree(GOLDENS / info["copy_of"], out)
        config = json.loads((out / "encoder" / "config.json").read_text())
        config.update(info["encoder_config"])
        (out / "encoder" / "config.json").write_text(json.dumps(config))
    return out


def assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    """`ours` is Laya's `theirs`: keys in order, types exact, floats within LAYA.rounded."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), path
        assert list(ours) == list(theirs), "%s keys: %r != %r" % (path, list(ours), list(theirs))
        for key in theirs:
            assert_same(ours[key], theirs[key], "%s/%s" % (path, key))
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, "%s[%d]" % (path, i))
    elif isinstance(theirs, float):
        assert type(ours) is float, "%s: %r is not a float" % (path, ours)
        assert abs(ours - theirs) <= LAYA.rounded.atol, "%s: %r != %r" % (path, ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs, "%s: %r != %r" % (path, ours, theirs)


def call_case(agent: kime.Agent, case: Dict[str, Any]) -> Any:
    """Run one recorded case (`predict` or `predict_batch`) through `agent`."""
    args = dict(case["args"])
    if case["call"] == "predict":
        return agent.predict(args.pop("state"), args.pop("questions"), **args)
    return agent.predict_batch(args.pop("states"), args.pop("questions"), **args)


def case_rows(agent: kime.Agent, case: Dict[str, Any]) -> List[Any]:
    """The case's rendered rows, each with its question type, in the order the call ran them."""
    args = case["args"]
    states = [args["state"]] if case["call"] == "predict" else args["states"]
    out = []
    for state in states:
        req = Request(state=state, questions=args["questions"], max_len=args.get("max_len"),
                      head_max_len=args.get("head_max_len"))
        qtypes = [q["type"] for q in args["questions"].values()]
        out.extend((row, qt) for row, qt in zip(agent.engine.rows_for(req), qtypes))
    return out
