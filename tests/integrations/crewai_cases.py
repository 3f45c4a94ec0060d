"""The CrewAI parity cases' driver: one case run through a CrewAI integration module, laya 0.4.15's
`laya.integrations.crewai` in the oracle (`tools/goldens_crewai.py` records
`tests/goldens/integrations_crewai.json`) and kime's `kime.integrations.crewai` in the replay
(`tests/integrations/test_crewai.py`). Nothing here imports kime or laya, so both sides build the
same CrewAI agents, tasks and outputs from the same specs and encode what comes back one way.

A case: `cls` (`router` or `guard`), `runner` (`tiny`, `ml`, `router` or none), `kwargs` for the
constructor (`"<recorder>"` and `"<callable>"` stand for a hook object and a function), `method`,
and its `task` and `agents` specs.
"""
from __future__ import annotations

import asyncio
import os
import re
import types
from typing import Any, Callable, Dict, List

# CrewAI sends telemetry unless told not to; there is no network here to send it to.
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("CREWAI_DISABLE_TRACKING", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
UNREACHABLE = "http://127.0.0.1:9"
"""The discard port on loopback: nothing listens there, so a remote call is refused at once."""


def normalise(text: str) -> str:
    """`text` without the memory addresses an object's repr carries."""
    return ADDRESS.sub(" at 0x?", text)


class Recorder:
    """A hook that writes down each call event it sees (hooks are found by method name, so the
    same class serves laya's and kime's runners)."""

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
    """One crew member: a CrewAI `Agent` (no model is ever called), a dict, a string or a plain
    object."""
    (kind, value), = spec.items()
    if kind == "crew":
        from crewai import Agent
        return Agent(**value)
    if kind == "object":
        return types.SimpleNamespace(**value)
    if kind in ("dict", "str"):
        return value
    raise ValueError("unknown member spec %r" % (spec,))


def build_task(spec: Dict[str, Any]) -> Any:
    """One task: a CrewAI `Task` or `TaskOutput`, a dict, a string, a plain object, a value."""
    (kind, value), = spec.items()
    if kind == "crew":
        from crewai import Task
        return Task(**value)
    if kind == "output":
        from crewai.tasks.task_output import TaskOutput
        return TaskOutput(**value)
    if kind == "object":
        return types.SimpleNamespace(**value)
    return value  # "str", "dict", "value"


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


def encode(value: Any, task: Any, members: List[Any]) -> Any:
    """A result as JSON: the caller's own task as `"<task>"`, a crew member as
    `{"<member>": index}`, a dataclass as its fields, everything else as is."""
    if value is task and not isinstance(task, (str, int, float)) and task is not None:
        return "<task>"
    for i, member in enumerate(members):
        if value is member and not isinstance(member, str):
            return {"<member>": i}
    if hasattr(value, "__dataclass_fields__"):
        return {name: encode(getattr(value, name), task, members)
                for name in value.__dataclass_fields__}
    if isinstance(value, dict):
        return {key: encode(v, task, members) for key, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode(v, task, members) for v in value]
    if type(value).__module__.startswith("crewai"):
        return "<%s>" % type(value).__name__
    return value


def task_state(task: Any, members: List[Any]) -> Any:
    """What a task object holds after the call (filter rewrites `description`, annotate sets
    `guardrail`, delegate sets `agent`); None for a string or a value."""
    if type(task).__module__.startswith("crewai"):
        out = {"description": task.description}
        for name in ("agent", "guardrail", "raw"):
            if hasattr(task, name):
                out[name] = encode(getattr(task, name), None, members)
        return out
    if isinstance(task, types.SimpleNamespace):
        return encode(vars(task), None, members)
    if isinstance(task, dict):
        return encode(task, None, members)
    return None


def error_of(exc: BaseException) -> Dict[str, Any]:
    """An exception as JSON: its type and classes, message, and the attributes laya's errors
    carry."""
    out: Dict[str, Any] = {"type": type(exc).__name__,
                           "mro": [c.__name__ for c in type(exc).__mro__],
                           "message": normalise(str(exc))}
    for attr in ("confidence", "threshold", "violations", "raw_decision"):
        if hasattr(exc, attr):
            out[attr] = getattr(exc, attr)
    return out


def as_task_guardrail(guard: Any, output: Any) -> Dict[str, Any]:
    """`guard` as CrewAI runs a task guardrail: `crewai.Task(guardrail=guard)` (CrewAI checks
    the callable's signature there), then CrewAI's own `process_guardrail` on a `TaskOutput`."""
    from crewai import Task
    from crewai.utilities.guardrail import process_guardrail

    task = Task(description="Answer the customer", expected_output="A reply", guardrail=guard)
    result = process_guardrail(output=output, guardrail=task._guardrail, retry_count=0,
                               from_task=task)
    return {"success": result.success, "result": result.result, "error": result.error}


def run_case(module: Any, case: Dict[str, Any], runners: Dict[str, Any]) -> Dict[str, Any]:
    """Run `case` through `module`'s classes: what it returned or raised, `last_decision`, the
    task's state after the call, and the hook events."""
    recorder = Recorder()
    cls = {"router": module.LayaCrewRouter, "guard": module.LayaTaskGuard}[case["cls"]]
    task = build_task(case["task"]) if "task" in case else None
    members = [build_member(m) for m in case.get("agents", [])]
    out: Dict[str, Any] = {}
    obj: Any = None
    try:
        obj = cls(**_kwargs(case.get("kwargs", {}), runners, case.get("runner"), recorder))
        method = case["method"]
        if method == "construct":
            out["attrs"] = {name: getattr(obj, name) for name in case["attrs"]}
        elif method == "task_guardrail":
            out["result"] = encode(as_task_guardrail(obj, task), task, members)
        else:
            target = tuple(members) if case.get("as_tuple") else members
            args = (task,) if case["cls"] == "guard" else (task, target)
            call: Callable[..., Any] = getattr(obj, method)
            result = call(*args)
            if asyncio.iscoroutine(result):
                result = asyncio.run(result)
            out["result"] = encode(result, task, members)
    except Exception as exc:  # a refusal is a recorded outcome
        out["error"] = error_of(exc)
    if obj is not None and case["method"] != "construct":
        out["last_decision"] = obj.last_decision
    state = task_state(task, members)
    if state is not None:
        out["task_after"] = state
    if recorder.events:
        out["events"] = recorder.events
    return out
