"""The agno parity cases, and the one driver that runs a case through an agno integration module:
laya 0.4.15's `laya.integrations.agno` in the oracle (`tools/goldens_agno.py` records
`tests/goldens/integrations_agno.json`) and kime's `kime.integrations.agno` in the replay
(`tests/integrations/test_agno.py`). Nothing here imports kime or laya, so both sides build the
same agno objects, messages and hooks from the same specs and encode what comes back one way.

A case: `cls` (`router` or `guardrail`), `runner` (`tiny`, `ml`, `router` or none), `kwargs` for
the constructor (`"<recorder>"` and `"<callable>"` stand for a hook object and a function),
`method` (`construct` reads the attributes named in `read`), and its `message` and `agents` /
`team` specs. `run_case` returns the outcome: `result` and `last_decision`, or `error`, or
`attrs`; and `events` when a hook saw any.
"""
from __future__ import annotations

import asyncio
import re
import types
from typing import Any, Callable, Dict, List

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
UNREACHABLE = "http://127.0.0.1:9"
"""The discard port on loopback: nothing listens there, so a remote call is refused at once."""


def normalise(text: str) -> str:
    """`text` without the memory addresses an object's repr carries."""
    return ADDRESS.sub(" at 0x?", text)


class Recorder:
    """A hook that writes down the name of each call event it sees (hooks are found by method
    name, so the same class serves laya's and kime's runners)."""

    def __init__(self) -> None:
        self.events: List[str] = []

    def on_predict_start(self, ctx: Any) -> None:
        self.events.append("start:%d" % len(ctx.states or []))

    def on_predict_end(self, ctx: Any) -> None:
        self.events.append("end:%d" % len(ctx.results or []))

    def on_error(self, ctx: Any) -> None:
        self.events.append("error")


def lang_guess_en(state: Any) -> str:
    """A callable language hint (a Router reads it; no server can receive it)."""
    return "en"


def build_member(spec: Dict[str, Any]) -> Any:
    """One routing candidate: an agno `Agent` or `Team`, a dict, a string or a plain object."""
    (kind, value), = spec.items()
    if kind == "agno":
        from agno.agent import Agent
        return Agent(**value)
    if kind == "team":
        from agno.team import Team
        fields = dict(value)
        members = [build_member(m) for m in fields.pop("members", [])]
        return Team(members=members, **fields)
    if kind == "object":
        return types.SimpleNamespace(**value)
    if kind == "dict" or kind == "str":
        return value
    raise ValueError("unknown member spec %r" % (spec,))


def build_message(spec: Dict[str, Any]) -> Any:
    """One message: a string, an agno `RunResponse` or `Message`, a dict, or another value."""
    (kind, value), = spec.items()
    if kind == "run_response":
        from agno.run.response import RunResponse
        return RunResponse(content=value)
    if kind == "message":
        from agno.models.message import Message
        return Message(**value)
    if kind == "object":
        return types.SimpleNamespace(**value)
    return value  # "str", "dict", "value"


def build_team(spec: Dict[str, Any]) -> Any:
    """A team: an agno `Team`, or the hand-made shapes laya also reads (`.agents`, a factory)."""
    (kind, value), = spec.items()
    members = [build_member(m) for m in value]
    if kind == "team":
        from agno.team import Team
        return Team(members=members, mode="route")
    if kind == "agents_attr":
        return types.SimpleNamespace(agents=members)
    if kind == "factory":
        return types.SimpleNamespace(members=lambda: members)
    raise ValueError("unknown team spec %r" % (spec,))


def _kwargs(raw: Dict[str, Any], runners: Dict[str, Any], runner: Any,
            recorder: Recorder) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in raw.items():
        if value == "<recorder>":
            value = [recorder] if key == "hooks" else recorder.on_predict_start
        elif value == "<callable>":
            value = lang_guess_en
        out[key] = value
    if runner is not None:
        out["agent"] = runners[runner]
    return out


def encode(value: Any, message: Any, members: List[Any]) -> Any:
    """A result as JSON: the caller's own message as `"<message>"`, a chosen member as
    `{"<member>": index}`, dataclass decisions as their fields, everything else as is."""
    if value is message and not isinstance(message, str):
        return "<message>"
    for i, member in enumerate(members):
        if value is member and not isinstance(member, str):
            return {"<member>": i}
    if hasattr(value, "__dataclass_fields__"):
        return {name: encode(getattr(value, name), message, members)
                for name in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {key: encode(v, message, members) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v, message, members) for v in value]
    return value


def error_of(exc: BaseException) -> Dict[str, Any]:
    """An exception as JSON: its type and the names of its classes, its message, and the
    attributes laya's errors carry."""
    out: Dict[str, Any] = {"type": type(exc).__name__,
                           "mro": [cls.__name__ for cls in type(exc).__mro__],
                           "message": normalise(str(exc))}
    for attr in ("confidence", "threshold", "violations", "raw_decision"):
        if hasattr(exc, attr):
            out[attr] = getattr(exc, attr)
    return out


def run_case(module: Any, case: Dict[str, Any], runners: Dict[str, Any]) -> Dict[str, Any]:
    """Run `case` through `module`'s classes; what it returned or raised, and the hook events."""
    recorder = Recorder()
    cls = {"router": module.LayaAgnoRouter, "guardrail": module.LayaAgnoGuardrail}[case["cls"]]
    message = build_message(case["message"]) if "message" in case else None
    members: List[Any] = []
    target: Any = None
    if "agents" in case:
        members = [build_member(m) for m in case["agents"]]
        target = tuple(members) if case.get("as_tuple") else members
    elif "team" in case:
        target = build_team(case["team"])
        found = getattr(target, "members", None) or getattr(target, "agents", None) or []
        members = list(found() if callable(found) else found)
    out: Dict[str, Any] = {}
    try:
        obj = cls(**_kwargs(case.get("kwargs", {}), runners, case.get("runner"), recorder))
        method = case["method"]
        if method == "construct":
            out["attrs"] = {name: getattr(obj, name) for name in case["read"]}
        else:
            args = (message,) if case["cls"] == "guardrail" else (message, target)
            call: Callable[..., Any] = getattr(obj, method)
            result = call(*args)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
            out["result"] = encode(result, message, members)
            out["last_decision"] = obj.last_decision
    except Exception as exc:
        out["error"] = error_of(exc)
    if recorder.events:
        out["events"] = recorder.events
    return out
