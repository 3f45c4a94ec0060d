"""The LangChain/LangGraph parity driver: one function that runs a case through an integration
module's six classes, laya 0.4.15's `laya.integrations.langchain` in the oracle
(`tools/goldens_langchain.py` records `tests/goldens/integrations_langchain.json`) and kime's
`kime.integrations.langchain` in the replay (`tests/integrations/test_langchain.py`). Nothing
here imports kime or laya, so both sides build the same inputs (LangChain messages included),
hooks, schemas and graphs from the same specs and encode what comes back one way.

A case: `cls` (`router`, `guardrail`, `triage`, `evaluator`, `decision`), `runner` (`tiny`, `ml`,
`router`, or none for a remote refusal), `kwargs` for the constructor, `method` (`invoke`,
`call`, `batch`, `batch_exceptions`, `batch_configs`, `ainvoke`, `abatch`, `stream`,
`evaluate_strings`, `graph_edge`, `graph_node`, `construct`), and `input` / `inputs` specs.
Placeholders in `kwargs`: `"<recorder>"` (a hook object; on `on_predict_start`/`end` its
method), `"<callable>"` (a `lang_guess` function), `{"<state_key>": NAME}` (a function of the
state), `{"<pydantic>": NAME}` (a pydantic model below). An input `{"<msg>": TYPE, "content":
...}` is a LangChain message; `{"<tuple>": [...]}` is a tuple.
"""
from __future__ import annotations

import asyncio
import re
from typing import Any, Callable, Dict, List, Optional

from typing_extensions import TypedDict

ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
UNREACHABLE = "http://127.0.0.1:9"
"""The discard port on loopback: nothing listens there, so a remote call is refused at once."""
PYDANTIC_HELP = re.compile(r"\n +For further information visit \S+")


def normalise(text: str) -> str:
    """`text` without memory addresses nor pydantic's help links (they name its version)."""
    return PYDANTIC_HELP.sub("", ADDRESS.sub(" at 0x?", text))


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


STATE_KEYS: Dict[str, Callable[[Any], Any]] = {
    "ticket_upper": lambda s: str(s.get("ticket", "")).upper(),
    "joined": lambda s: " / ".join(str(v) for v in s.values()),
}


def pydantic_models() -> Dict[str, Any]:
    """The schemas `LayaDecision` is given as pydantic models."""
    from typing import Literal

    from pydantic import BaseModel, Field

    class Ticket(BaseModel):
        team: Literal["billing", "tech", "sales"] = Field(description="Which team owns it")
        refund: bool = Field(description="Does the customer ask for a refund?")

    class Free(BaseModel):
        summary: str

    return {"Ticket": Ticket, "Free": Free}


class GraphState(TypedDict, total=False):
    """The LangGraph state of the graph cases."""

    input: str
    handled_by: str
    triage: Dict[str, Any]


def build_input(spec: Any) -> Any:
    """An input from its JSON spec: messages and tuples built, everything else as is."""
    if isinstance(spec, dict):
        if "<msg>" in spec:
            from langchain_core import messages

            kind = {"human": messages.HumanMessage, "ai": messages.AIMessage,
                    "system": messages.SystemMessage}[spec["<msg>"]]
            return kind(content=build_input(spec["content"]))
        if "<tuple>" in spec:
            return tuple(build_input(v) for v in spec["<tuple>"])
        return {k: build_input(v) for k, v in spec.items()}
    if isinstance(spec, list):
        return [build_input(v) for v in spec]
    return spec


def wrap_messages(spec: Any) -> Any:
    """An input spec with each bare message (the input itself, or an item of a batch) put in
    a dict as its `input`: where laya reads a message's content."""
    if isinstance(spec, dict) and "<msg>" in spec:
        return {"input": spec}
    if isinstance(spec, list):
        return [wrap_messages(item) for item in spec]
    return spec


def _kwargs(raw: Dict[str, Any], runners: Dict[str, Any], runner: Optional[str],
            recorder: Recorder) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    for key, value in raw.items():
        if value == "<recorder>":
            value = [recorder] if key == "hooks" else getattr(recorder, key)
        elif value == "<callable>":
            value = lang_guess_en
        elif isinstance(value, dict) and "<state_key>" in value:
            value = STATE_KEYS[value["<state_key>"]]
        elif isinstance(value, dict) and "<pydantic>" in value:
            value = pydantic_models()[value["<pydantic>"]]
        out[key] = value
    if runner is not None:
        out["agent"] = runners[runner]
    return out


def encode(value: Any) -> Any:
    """A result as JSON: messages as their spec, dataclasses as their fields, errors (a batch
    with `return_exceptions`) as `{"<error>": ...}`."""
    if isinstance(value, BaseException):
        return {"<error>": error_of(value)}
    if hasattr(value, "__dataclass_fields__"):
        return {"<dataclass>": type(value).__name__,
                "fields": {name: encode(getattr(value, name))
                           for name in value.__dataclass_fields__}}
    if hasattr(value, "content") and hasattr(value, "type"):
        return {"<msg>": value.type, "content": encode(value.content)}
    if isinstance(value, dict):
        return {key: encode(v) for key, v in value.items()}
    if isinstance(value, tuple):
        return {"<tuple>": [encode(v) for v in value]}
    if isinstance(value, list):
        return [encode(v) for v in value]
    return value


def error_of(exc: BaseException) -> Dict[str, Any]:
    """An exception as JSON: its type, message, and the attributes laya's errors carry."""
    out: Dict[str, Any] = {"type": type(exc).__name__, "message": normalise(str(exc))}
    for attr in ("violations", "raw_decision"):
        if hasattr(exc, attr):
            out[attr] = encode(getattr(exc, attr))
    return out


def _graph(obj: Any, case: Dict[str, Any]) -> Any:
    """A real LangGraph graph around `obj`: as the conditional edge out of START to one node per
    route (`graph_edge`), or as a node before a fixed end (`graph_node`); built and run."""
    from langgraph.graph import END, START, StateGraph

    graph: Any = StateGraph(GraphState)
    if case["method"] == "graph_edge":
        routes = list(case["kwargs"]["criteria"]) + [case["kwargs"].get("fallback") or "other"]
        for route in routes:
            graph.add_node(route, (lambda r: lambda state: {"handled_by": r})(route))
            graph.add_edge(route, END)
        graph.add_conditional_edges(START, obj, {r: r for r in routes})
    else:
        graph.add_node("laya", obj)
        graph.add_edge(START, "laya")
        graph.add_edge("laya", END)
    return graph.compile().invoke(build_input(case["input"]))


def _call(obj: Any, case: Dict[str, Any]) -> Any:
    method = case["method"]
    if method in ("graph_edge", "graph_node"):
        return _graph(obj, case)
    if method == "evaluate_strings":
        return obj.evaluate_strings(**case["input"])
    if method == "call":
        return obj(build_input(case["input"]))
    if method == "stream":
        return list(obj.stream(build_input(case["input"])))
    if method == "ainvoke":
        return asyncio.run(obj.ainvoke(build_input(case["input"])))
    inputs = [build_input(i) for i in case.get("inputs", [])]
    if method == "batch":
        return obj.batch(inputs)
    if method == "batch_exceptions":
        return obj.batch(inputs, return_exceptions=True)
    if method == "batch_configs":
        return obj.batch(inputs, [{"tags": ["laya-%d" % i]} for i in range(len(inputs))])
    if method == "abatch":
        return asyncio.run(obj.abatch(inputs))
    assert method == "invoke", method
    return obj.invoke(build_input(case["input"]))


def run_case(module: Any, case: Dict[str, Any], runners: Dict[str, Any]) -> Dict[str, Any]:
    """Run `case` through `module`'s classes: what it returned or raised, the router's
    `last_decision`, and the hook events."""
    recorder = Recorder()
    cls = {"router": module.LayaRouter, "guardrail": module.LayaGuardrail,
           "triage": module.LayaTriage, "evaluator": module.LayaEvaluator,
           "decision": module.LayaDecision}[case["cls"]]
    out: Dict[str, Any] = {}
    obj: Any = None
    try:
        obj = cls(**_kwargs(case.get("kwargs", {}), runners, case.get("runner"), recorder))
        if case["method"] == "construct":
            out["attrs"] = {name: encode(getattr(obj, name)) for name in case["attrs"]}
        else:
            out["result"] = encode(_call(obj, case))
    except Exception as exc:  # a refusal is a recorded outcome
        out["error"] = error_of(exc)
    if obj is not None and case["method"].startswith("graph_"):
        # what the same object answers outside the graph, which the graph must agree with
        out["invoke"] = encode(obj.invoke(build_input(case["input"])))
    if obj is not None and getattr(obj, "last_decision", None) is not None:
        out["last_decision"] = encode(obj.last_decision)
    if recorder.events:
        out["events"] = recorder.events
    return out

