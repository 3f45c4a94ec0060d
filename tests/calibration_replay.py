"""Replays `tests/goldens/calibration.json` (recorded from Laya 0.4.15 by
`tools/goldens_calibration.py`) through `kime.load(...)`: each case is a script of steps on one
agent, and every step's result, error and warnings must be Laya's.

Shared by `test_laya_calibration.py` (the calibration cases) and `test_laya_long.py` (the
`predict_long` cases).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import pytest

import kime
from kime.laya import long

from .paths import GOLDENS, ROOT
from .tolerances import LAYA


def _decode(obj: Dict[str, Any]) -> Any:
    if set(obj) == {"__items__"}:
        return dict(obj["__items__"])
    return obj


def _rooted(obj: Any) -> Any:
    """The recorded `<root>` placeholder as this checkout's root."""
    if isinstance(obj, str):
        return obj.replace("<root>", str(ROOT))
    if isinstance(obj, dict):
        return {_rooted(k): _rooted(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rooted(v) for v in obj]
    return obj


DATA = _rooted(json.loads((GOLDENS / "calibration.json").read_text(encoding="utf-8"),
                          object_hook=_decode))
CASES: List[Dict[str, Any]] = DATA["cases"]
ATTRS = ("temperature", "temperature_by_options", "temperature_raw", "lang_temperatures",
         "binning_map")


def strip(message: str) -> str:
    return message.split(": ", 1)[1] if message.startswith(("laya: ", "kime: ")) else message


def assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    """Keys, key order and types exact; floats within Laya's rounding."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), "%s: %r is not a dict" % (path, ours)
        assert list(ours) == list(theirs), "%s keys: %r != %r" % (path, list(ours), list(theirs))
        for key in theirs:
            assert_same(ours[key], theirs[key], "%s/%s" % (path, key))
    elif isinstance(theirs, list):
        assert isinstance(ours, (list, tuple)) and len(ours) == len(theirs), \
            "%s: %r != %r" % (path, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, "%s[%d]" % (path, i))
    elif isinstance(theirs, float):
        assert type(ours) is float, "%s: %r is not a float" % (path, ours)
        if theirs != theirs:
            assert ours != ours, path
        else:
            assert abs(ours - theirs) <= LAYA.rounded.atol, "%s: %r != %r" % (path, ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs, "%s: %r != %r" % (path, ours, theirs)


def _write(tmp: Path, name: str, content: Any) -> str:
    path = tmp / name
    if isinstance(content, dict) and set(content) == {"__raw__"}:
        path.write_text(content["__raw__"], encoding="utf-8")
    else:
        path.write_text(json.dumps(content), encoding="utf-8")
    return str(path)


def _kwargs(st: Dict[str, Any]) -> Dict[str, Any]:
    skip = ("op", "state", "questions", "result", "error", "warnings", "windows")
    return {k: v for k, v in st.items() if k not in skip}


def replay(case: Dict[str, Any], tmp: Path) -> None:
    """Run every step of `case` on kime and compare it with Laya's record."""
    agent: Optional[Any] = None
    saved: Any = None
    for n, st in enumerate(case["steps"]):
        where = "%s step %d (%s)" % (case["id"], n, st["op"])
        result: Any = None
        error: Optional[BaseException] = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                if st["op"] == "load":
                    kw = dict(st["kwargs"])
                    if "calibration_file" in st:
                        kw["calibration"] = _write(tmp, "load%d.json" % n, st["calibration_file"])
                    agent = None
                    agent = kime.load(str(GOLDENS / "checkpoints" / st["checkpoint"]),
                                      device="cpu", threads=1, **kw)
                elif st["op"] == "attrs":
                    assert agent is not None
                    result = {a: getattr(agent, a) for a in ATTRS}
                    result["temperature_by_options_raw"] = \
                        agent.calibration.temperature_by_options_raw
                elif st["op"] == "load_calibration":
                    assert agent is not None
                    content = saved if st["file"] == "$saved" else st["file"]
                    agent.load_calibration(_write(tmp, "file%d.json" % n, content))
                elif st["op"] == "save_calibration":
                    assert agent is not None
                    path = tmp / ("saved%d.json" % n)
                    agent.save_calibration(str(path))
                    saved = result = json.loads(path.read_text(encoding="utf-8"))
                elif st["op"] == "predict":
                    assert agent is not None
                    result = agent.predict(st["state"], st["questions"], **_kwargs(st))
                elif st["op"] == "predict_long":
                    assert agent is not None
                    result = agent.predict_long(st["state"], st["questions"], **_kwargs(st))
                else:
                    raise AssertionError(st["op"])
            except (ValueError, TypeError) as e:
                error = e
        if st["error"]:
            kind = {"ValueError": ValueError, "TypeError": TypeError}[st["error"]["type"]]
            assert isinstance(error, kind), "%s: raised %r, Laya %r" % (where, error, st["error"])
            assert str(error) == st["error"]["message"], where
            continue
        if error is not None:
            raise AssertionError("%s: raised %r; Laya did not" % (where, error)) from error
        got = [strip(str(w.message)) for w in caught]
        assert got == [strip(m) for m in st["warnings"]], where
        if st["op"] == "attrs":
            result = {k: result[k] for k in st["result"]}  # Laya's key order
        if st["op"] in ("attrs", "save_calibration", "predict", "predict_long"):
            assert_same(result, st["result"], where)
        if st["op"] == "predict_long":
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                p = long.plan(agent, st["state"], st["questions"], **_kwargs(st))
            assert p.states == st["windows"], where + ": the window texts differ from Laya's"


def cases(long_ones: bool, slow: Sequence[str] = ()) -> List[Any]:
    """The golden cases of one file: `predict_long`'s or the calibration ones; those named in
    `slow` marked slow."""
    picked = [c for c in CASES if c["id"].startswith("long_") == long_ones]
    return [pytest.param(c, id=c["id"], marks=pytest.mark.slow if c["id"] in slow else ())
            for c in picked]
