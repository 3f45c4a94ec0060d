"""Replaying the `min_confidence` and structured goldens (`tools/goldens_confidence.py`) through
kime: loading the recorded files, calling the same function kime exports under Laya's name, and
comparing with Laya's recorded result (keys, key order and types exactly, numbers within
`LAYA.rounded`, NaN equal to NaN, errors by kind and Laya's message as kime's first problem)."""
from __future__ import annotations

import copy
import dataclasses
import json
import math
import warnings
from typing import Any, Dict, List

import pytest

import kime
from kime.laya import confidence, structured

from .paths import GOLDENS
from .tolerances import LAYA


def _decode(obj: Dict[str, Any]) -> Any:
    # a dict with non-string keys (int ids, int labels) is recorded as its items
    if set(obj) == {"__items__"}:
        return dict(obj["__items__"])
    return obj


def load_cases(name: str) -> List[Dict[str, Any]]:
    return json.loads((GOLDENS / name).read_text(encoding="utf-8"), object_hook=_decode)["cases"]


def load_agents() -> Dict[str, Any]:
    """The two golden checkpoints behind Laya's API."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {name: kime.load(str(GOLDENS / "checkpoints" / name), device="cpu", threads=1)
                for name in ("tiny", "multilingual-tiny")}


def encode(obj: Any) -> Any:
    """A result as the oracle recorded it: a dataclass as its name and fields, tuples as lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dataclass__": type(obj).__name__,
                "fields": {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    return obj


def pydantic_model(spec: Dict[str, Any]) -> Any:
    """The recorded pydantic model, built from its source (needs pydantic)."""
    pytest.importorskip("pydantic")
    scope: Dict[str, Any] = {"__name__": "goldens_models"}
    exec(compile(spec["source"], "<pydantic models>", "exec", dont_inherit=True), scope)
    return scope[spec["name"]]


def call(agents: Dict[str, Any], case: Dict[str, Any]) -> Any:
    """Run one recorded call through kime's function of the same name."""
    args = copy.deepcopy(case["args"])
    kind = case["call"]
    if kind == "check_min_confidence":
        return confidence.check_min_confidence(args["value"])
    if kind == "check_min_confidence_map":
        return confidence.check_min_confidence_map(args["value"])
    if kind == "resolve_min_confidence":
        return confidence.resolve_min_confidence(args.pop("answer"), args.pop("thresholds"), **args)
    if kind == "bucket_keys":
        return sorted(confidence.bucket_keys())
    if kind == "GATE_STATES":
        return list(confidence.GATE_STATES)
    if kind in ("flag_low_confidence", "apply_confidence_gate"):
        getattr(confidence, kind)(args["results"], args["min_confidence"])
        return args["results"]
    if kind == "answer_confidence_value":
        return {k: confidence.answer_confidence_value(a) if isinstance(a, dict) else None
                for k, a in args["answers"].items()}
    if kind == "jev_confidence":
        return {k: confidence.jev_confidence(a) if isinstance(a, dict) else None
                for k, a in args["answers"].items()}
    if kind == "questions_from_json_schema":
        return structured.questions_from_json_schema(args["schema"])
    if kind == "answers_to_json":
        return structured.answers_to_json(args["answers"], args["schema"])
    if "model" in args:
        args["schema"] = pydantic_model(args.pop("model"))
    runner = object() if args.pop("runner", None) == "object" else agents[case["checkpoint"]]
    if args.pop("states_tuple", False):
        args["states"] = tuple(args["states"])
    if kind == "predict":
        return runner.predict(args.pop("state"), args.pop("questions"), **args)
    if kind == "predict_batch":
        return runner.predict_batch(args.pop("states"), args.pop("questions"), **args)
    if kind == "decide":
        return runner.decide(args.pop("state"), **args)
    if kind == "decide_batch":
        return runner.decide_batch(args.pop("states"), **args)
    if kind == "structured.decide":
        return kime.laya.structured.decide(runner, args.pop("state"), **args)
    if kind == "structured.decide_batch":
        return kime.laya.structured.decide_batch(runner, args.pop("states"), **args)
    raise AssertionError("unknown call %r" % kind)


def assert_same(ours: Any, theirs: Any, path: str = "") -> None:
    """Laya's recorded value: same keys in the same order, same types, numbers within one unit
    of the fourth decimal, NaN for NaN."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), "%s: %r is not a dict" % (path, ours)
        assert list(ours) == list(theirs), "%s keys: %r != %r" % (path, list(ours), list(theirs))
        for key in theirs:
            assert_same(ours[key], theirs[key], "%s/%s" % (path, key))
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), \
            "%s: %r != %r" % (path, ours, theirs)
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, "%s[%d]" % (path, i))
    elif isinstance(theirs, float):
        assert type(ours) is float, "%s: %r is not a float" % (path, ours)
        if math.isnan(theirs):
            assert math.isnan(ours), "%s: %r is not NaN" % (path, ours)
        else:
            assert abs(ours - theirs) <= LAYA.rounded.atol, "%s: %r != %r" % (path, ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs, "%s: %r != %r" % (path, ours, theirs)


def replay(agents: Dict[str, Any], case: Dict[str, Any]) -> None:
    """Run a recorded case and compare it with Laya's result or refusal and warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case["error"]:
            kind = {"ValueError": ValueError, "TypeError": TypeError,
                    "SchemaError": structured.SchemaError}[case["error"]["type"]]
            with pytest.raises(kind) as info:
                call(agents, case)
            err = info.value
            assert isinstance(err, kime.InvalidRequest), repr(err)
            assert err.problems[0]["msg"] == case["error"]["message"]
            if len(err.problems) == 1:
                assert str(err) == case["error"]["message"]
        else:
            assert_same(encode(call(agents, case)), case["result"])
    assert [str(w.message) for w in caught] == case["warnings"]
