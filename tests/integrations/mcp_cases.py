"""laya-mcp-server's recorded answers (`tests/goldens/mcp.json`, `tools/goldens_mcp.py`) and how
kime's tools are held to them: the same dict (keys in order, floats within 1e-4, timings only
present), or the same `{"error", "message"}`, except the cases below where laya's answer is a
fault kime fixes."""
from __future__ import annotations

import json
from typing import Any, Dict, List

from ..laya_replay import assert_same
from ..paths import GOLDENS, MULTILINGUAL_TINY, TINY

GOLDEN = json.loads((GOLDENS / "mcp.json").read_text(encoding="utf-8"))
CASES: List[Dict[str, Any]] = GOLDEN["cases"]
MODELS = {"english": str(TINY), "multilingual": str(MULTILINGUAL_TINY),
          "typed-decisions": str(TINY)}
TIMINGS = ("latency_ms", "total_latency_ms", "per_request_latency_ms")
STATUS_KEYS = ("device", "torch_cuda", "device_is_preference", "checkpoint_devices", "loaded",
               "router_preload", "router_ready")
"""What a status shares with laya's: kime has no torch, and its own versions."""

FIXED: Dict[str, Dict[str, str]] = {
    # laya crashes in the tokenizer (internal_error: TypeError); the state is the caller's fault
    "lone_surrogate": {"error": "invalid_state", "message": "state contains an unpaired "
                       "surrogate escape ('refund \\ud800 please'); those cannot be encoded as "
                       "UTF-8"},
    # laya answers from the first window of a 50,017-character state; kime refuses it, as laya
    # serve does, and laya_predict_long takes it
    "state_over_limit": {"error": "invalid_state",
                         "message": "state too large (50017 > 50000 chars)"},
}
ENGINE_REFUSED = ("choice_300_options",)
"""laya reports the engine's refusal as `internal_error` with `ValueError: <text>`; kime as
`invalid_request` with the same text."""


def expand(value: Any) -> Any:
    """A recorded argument with `{"__repeat__": [text, n]}` spelled out."""
    if isinstance(value, dict):
        if set(value) == {"__repeat__"}:
            text, n = value["__repeat__"]
            return text * n
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def unscrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace("<tiny>", str(TINY)).replace("<ml>", str(MULTILINGUAL_TINY))
    if isinstance(value, dict):
        return {k: unscrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unscrub(v) for v in value]
    return value


def without_timings(value: Any) -> Any:
    """The result with each timing checked to be a non-negative number and set to None."""
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in TIMINGS:
                assert isinstance(item, (int, float)) and item >= 0, (key, item)
                item = None
            out[key] = without_timings(item)
        return out
    if isinstance(value, list):
        return [without_timings(v) for v in value]
    return value


def expected_error(case: Dict[str, Any]) -> Any:
    """The error kime must give for a recorded case (None: it must answer)."""
    if case["id"] in FIXED:
        return FIXED[case["id"]]
    if case["id"] in ENGINE_REFUSED:
        message = case["error"]["message"]
        assert message.startswith("ValueError: ")
        return {"error": "invalid_request", "message": message[len("ValueError: "):]}
    return case["error"]


def check(case: Dict[str, Any], result: Any, error: Any) -> None:
    """kime's answer (`result`, or `error` as `{"error", "message"}`) against the record."""
    want = expected_error(case)
    if want is not None:
        assert result is None and error == unscrub(want), (case["id"], error)
        return
    assert error is None, (case["id"], error)
    if case["tool"] == "laya_status":
        for key in STATUS_KEYS:
            assert result[key] == case["result"][key], (key, result[key])
        assert result["torch_version"] is None and result["package_versions"]["kime"]
        return
    assert_same(without_timings(result), unscrub(case["result"]), case["id"])
