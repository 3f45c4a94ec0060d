"""The tool selector's parity cases, and the one runner that plays them.

`tools/goldens_tools.py` plays them on laya 0.4.15's `laya.integrations.tools` (laya's torch
Agent and Router on the committed checkpoints) and `tests/integrations/test_tools.py` on
`kime.integrations.tools`, so both sides run exactly these calls. This module imports neither
library: the runner is handed the integration module, the agents and the URLs (`<stub>`, a
server answering fixed bodies; `<serve>`, a real decision server over a Router whose every model
is `tiny`; `<closed>`, a port nothing listens on).

A case is `{"id", "agent", "kwargs", "call", "state", "tools", ...}`:
- `agent`: "tiny", "ml", "router" (a Router over both checkpoints), or null with a `base_url` in
  `kwargs` ("<stub>/<body name>", "<serve>", "<closed>");
- `tools`: specs (`TOOL_KINDS`) for the constructor; `select_tools` for the call instead;
- `call`: "select", "aselect", "call" (with `args`), "runnable" (`as_runnable().invoke`),
  "chain" (`as_runnable() | name_of`), "construct" (the constructor only);
- `laya_fault`: where laya's answer is a fault kime does not copy (the test says what kime does).

A result is the decision's fields with `tool` written as its spec, and an error its type,
message and, for `LayaLowConfidenceError`, `confidence` and `threshold`.
"""
from __future__ import annotations

import asyncio
import http.server
import json
import threading
import types
from typing import Any, Dict, List, Optional

INVOICE = "I was charged twice on my last invoice and want a refund."
CRASH = "The app crashes with an error every time I open the settings page."
PRICING = "How much does the team plan cost if we upgrade this month?"
GERMAN = "Ich wurde zweimal belastet und möchte mein Geld zurück."

BILLING = {"name": "billing", "description": "payments, invoices, charges and refunds"}
TECH = {"name": "tech", "description": "bugs, crashes, outages and error messages"}
SALES = {"name": "sales", "description": "plans, pricing, upgrades and discounts"}

STUB_BODIES: Dict[str, Any] = {
    "bare-array": [1, 2],
    "bare-string": "oops",
    "no-answers": {"model": "stub"},
    "answers-list": {"answers": []},
    "no-tool-select": {"answers": {"other": {"choice": "tool_0"}}},
    "answer-string": {"answers": {"tool_select": "tool_0"}},
    "probability-string": {"answers": {"tool_select": {
        "choice": "tool_0", "answer_confidence": 0.9,
        "probabilities": {"tool_0": "high", "tool_1": 0.1}}}},
    "probability-bool": {"answers": {"tool_select": {
        "choice": "tool_0", "answer_confidence": 0.9,
        "probabilities": {"tool_0": 0.8, "tool_1": True}}}},
    "probability-numeric-string": {"answers": {"tool_select": {
        "choice": "tool_1", "answer_confidence": 0.9,
        "probabilities": {"tool_0": "0.25", "tool_1": 0.75, "extra": 0.0}}}},
    "probabilities-list": {"answers": {"tool_select": {
        "choice": "tool_0", "answer_confidence": 0.9, "probabilities": [0.5, 0.5]}}},
    "no-confidence": {"answers": {"tool_select": {"choice": "tool_0"}}},
    "confidence-string": {"answers": {"tool_select": {"choice": "tool_0",
                                                      "answer_confidence": "0.9"}}},
    "only-entropy-confidence": {"answers": {"tool_select": {"choice": "tool_2",
                                                            "confidence": 0.7}}},
    "flagged-low": {"answers": {"tool_select": {"choice": "tool_0", "answer_confidence": 0.95,
                                                "low_confidence": True}}},
    "low-confidence": {"answers": {"tool_select": {"choice": "tool_1",
                                                   "answer_confidence": 0.2}}},
    "unknown-choice": {"answers": {"tool_select": {"choice": "billing",
                                                   "answer_confidence": 0.9}}},
    "missing-choice": {"answers": {"tool_select": {"answer_confidence": 0.9}}},
    "choice-list": {"answers": {"tool_select": {"choice": ["tool_0"],
                                                "answer_confidence": 0.9}}},
    "direct": {"answers": {"tool_select": {"choice": "direct_answer",
                                           "answer_confidence": 0.8}}},
}
"""What the stub server answers at `/<name>/v1/systemone`: a laya-serve reply gone wrong."""


class StubServer:
    """A real HTTP server on a free loopback port answering `STUB_BODIES` (standard library)."""

    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                name = self.path.strip("/").split("/")[0]
                raw = json.dumps(STUB_BODIES.get(name, {})).encode("utf-8")
                self.send_response(200 if name in STUB_BODIES else 404)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class Recorder:
    """A per-call hook that writes down the events it sees (found by method name on both sides)."""

    def __init__(self) -> None:
        self.events: List[List[Any]] = []

    def on_predict_start(self, ctx: Any) -> None:
        self.events.append(["start", len(ctx.states or [])])

    def on_predict_end(self, ctx: Any) -> None:
        self.events.append(["end", len(ctx.states or []), len(ctx.results or [])])


def lookup_invoice(invoice_id: str = "none") -> str:
    """Look up an invoice, its charges and its refunds.

    More lines that are not the description."""
    return "invoice %s" % invoice_id


def restart_service(name: str = "app") -> str:
    """Restart a crashed service and read its error log."""
    return "restarted %s" % name


def quote_plan(seats: int = 1) -> str:
    return "quote for %d seats" % seats


FUNCTIONS = {f.__name__: f for f in (lookup_invoice, restart_service, quote_plan)}


class Runner:
    """A tool with `name`, `description` and `run` (the LangChain/CrewAI shape)."""

    def __init__(self, name: str, description: Optional[str]) -> None:
        self.name = name
        self.description = description

    def run(self, *args: Any, **kwargs: Any) -> Any:
        return ["ran", self.name, list(args), kwargs]

    def __repr__(self) -> str:
        return "Runner(%r)" % self.name


class Invoker:
    """A tool with LlamaIndex's `metadata` and an `invoke` method."""

    def __init__(self, name: Optional[str], description: Optional[str]) -> None:
        self.metadata = types.SimpleNamespace(name=name, description=description)

    def invoke(self, *args: Any, **kwargs: Any) -> Any:
        return ["invoked", self.metadata.name, list(args), kwargs]


class Opaque:
    """A tool nothing can be read from."""

    def __repr__(self) -> str:
        return "Opaque()"


TOOL_KINDS = ("str", "dict", "openai", "fn", "runner", "meta", "opaque", "int")


def build_tool(spec: Dict[str, Any]) -> Any:
    """One tool from its spec: `{kind: value}` for a kind of `TOOL_KINDS`."""
    (kind, value), = spec.items()
    if kind in ("str", "dict", "int"):
        return value
    if kind == "openai":
        return {"type": "function", "function": dict(value)}
    if kind == "fn":
        return FUNCTIONS[value]
    if kind == "runner":
        return Runner(value["name"], value.get("description"))
    if kind == "meta":
        return Invoker(value.get("name"), value.get("description"))
    if kind == "opaque":
        return Opaque()
    raise KeyError(kind)


def spec_of(tool: Any, specs: List[Dict[str, Any]], built: List[Any]) -> Any:
    """The spec a decision's `tool` was built from (by identity), or the value itself."""
    for spec, obj in zip(specs, built):
        if obj is tool:
            return spec
    return tool


def name_of(decision: Any) -> str:
    """A plain function to chain after `as_runnable()`."""
    return "chained:%s" % decision.tool_name


def cases() -> List[Dict[str, Any]]:
    """Every parity case, in a fixed order."""
    out: List[Dict[str, Any]] = []
    three = [{"dict": BILLING}, {"dict": TECH}, {"dict": SALES}]

    def add(id_: str, call: str = "select", agent: Optional[str] = "tiny", state: Any = INVOICE,
            tools: Any = None, **rest: Any) -> None:
        out.append(dict({"id": id_, "call": call, "agent": agent, "state": state,
                         "tools": three if tools is None else tools, "kwargs": {}}, **rest))

    # what a tool can be
    add("dict_tools")
    add("dict_tools_crash", state=CRASH)
    add("str_tools", state=PRICING, tools=[{"str": "billing: %s" % BILLING["description"]},
                                           {"str": "tech:%s" % TECH["description"]},
                                           {"str": "  sales  "}])
    add("openai_tools", state=CRASH, tools=[{"openai": BILLING}, {"openai": TECH},
                                            {"openai": {"name": "sales"}}, {"openai": {}}])
    add("function_tools", tools=[{"fn": "lookup_invoice"}, {"fn": "restart_service"},
                                 {"fn": "quote_plan"}])
    add("object_tools", state=CRASH, tools=[{"runner": BILLING}, {"runner": {"name": "tech"}},
                                            {"meta": SALES}, {"meta": {}}, {"opaque": None},
                                            {"int": 7}])
    add("dict_doc_and_bare", tools=[{"dict": {"name": "billing", "doc": "money matters"}},
                                    {"dict": {"description": "no name here"}}, {"dict": {}}])
    # the question: direct answers, instructions, tools per call
    add("direct_answer", state="Hi, thanks, that is all.", kwargs={"allow_direct_answer": True})
    add("direct_answer_described", kwargs={
        "allow_direct_answer": True, "direct_answer_description": "Reply without any tool."})
    add("direct_answer_only", tools=[], kwargs={"allow_direct_answer": True})
    add("instructions_in_constructor", kwargs={"instructions": "Which team takes this ticket?"})
    add("instructions_per_call", state=PRICING, instructions="Who handles pricing?")
    add("tools_per_call", select_tools=[{"str": "alpha"}, {"str": "beta: the second one"}])
    add("empty_per_call_refused", select_tools=[])
    # the state
    add("state_dict", state={"ticket": INVOICE, "customer": "ACME", "priority": 2})
    add("state_turns", state=[{"role": "user", "content": INVOICE},
                              {"role": "assistant", "content": "Let me check."}])
    add("state_number", state=12345)
    # gates and fallbacks
    add("threshold_fallback", kwargs={"confidence_threshold": 0.99,
                                      "fallback_tool": {"str": "human"}})
    add("threshold_raises", kwargs={"confidence_threshold": 0.99})
    add("threshold_zero", kwargs={"confidence_threshold": 0})
    add("threshold_passes_with_fallback", kwargs={"confidence_threshold": 0.01,
                                                  "fallback_tool": {"fn": "quote_plan"}})
    add("min_confidence_fallback", kwargs={"min_confidence": 0.99,
                                           "fallback_tool": {"runner": {"name": "human"}}})
    add("min_confidence_raises", kwargs={"min_confidence": 0.99})
    add("min_confidence_low", kwargs={"min_confidence": 0.01})
    # laya compares the confidence with the map itself (and float()s it for the error): kime
    # reads the runner's verdict on the map, `low_confidence`, and the threshold it applied
    map_fault = "TypeError: laya compares the confidence with the map itself"
    add("min_confidence_map_flagged", kwargs={"min_confidence": {"default": 0.99}},
        laya_fault=map_fault)
    add("min_confidence_map_bucket", kwargs={"min_confidence": {"choice:3-5": 0.99,
                                                                "default": 0.0},
                                             "fallback_tool": {"str": "human"}},
        laya_fault=map_fault)
    add("min_confidence_map_passes", kwargs={"min_confidence": {"default": 0.01}},
        laya_fault=map_fault)
    # constructor refusals
    for name, value in (("high", 1.5), ("negative", -0.1), ("bool", True), ("nan", float("nan")),
                        ("string", "0.5")):
        add("threshold_" + name, call="construct", kwargs={"confidence_threshold": value})
    add("min_confidence_bad", call="construct", kwargs={"min_confidence": 1.5})
    add("min_confidence_bad_map", call="construct", kwargs={"min_confidence": {"nope": 0.5}})
    add("no_tools", tools=[])
    add("no_tools_at_all", tools=None, kwargs={"tools": None})
    # per-call controls on the local path
    add("budget", kwargs={"max_len": 24, "head_max_len": 8})
    add("ml_lang", agent="ml", state=GERMAN, kwargs={"lang": "de"})
    add("ml_plain", agent="ml", state=GERMAN)
    add("router_routed", agent="router", state=GERMAN)
    add("router_model", agent="router", kwargs={"model": "english", "lang": "en"})
    add("hooks", kwargs={"hooks": "<recorder>"})
    add("hook_callbacks", kwargs={"on_predict_start": "<recorder.start>",
                                  "on_predict_end": "<recorder.end>", "hooks_raise": True,
                                  "hooks_timeout": 5.0})
    add("hooks_empty", kwargs={"hooks": [], "hooks_raise": False})
    # the other entry points
    add("aselect", call="aselect", state=CRASH)
    add("call_function", call="call", tools=[{"fn": "lookup_invoice"}, {"fn": "restart_service"}],
        args=["INV-7"])
    add("call_runner", call="call", state=CRASH, tools=[{"runner": BILLING}, {"runner": TECH}],
        args=["now"], call_kwargs={"force": True})
    add("call_invoke", call="call", tools=[{"meta": BILLING}, {"meta": TECH}])
    add("call_not_callable", call="call", tools=[{"str": "billing"}, {"str": "tech"}])
    add("call_direct", call="call", tools=[], kwargs={"allow_direct_answer": True})
    add("runnable", call="runnable", state=PRICING)
    add("runnable_chain", call="chain", state=CRASH)
    # the remote path: refusals before the request, a closed port, bodies gone wrong, a server
    add("remote_hooks", agent=None, kwargs={"base_url": "<closed>", "hooks": "<recorder>"})
    add("remote_closed", agent=None, kwargs={"base_url": "<closed>"})
    # laya's fault per stub body, (without, with) a fallback tool
    unhashable = "TypeError: unhashable list; kime reads it as an unknown choice"
    undistributed = ("laya selects with no probabilities (a missing map or a list reads as {}); "
                     "kime refuses the reply as malformed")
    faults = {"choice-list": (unhashable, unhashable),
              "probabilities-list": (undistributed, undistributed),
              "only-entropy-confidence": (undistributed, undistributed),
              "low-confidence": (undistributed, undistributed),
              "direct": (None, undistributed)}  # without allow_direct_answer: an unknown choice
    for name in STUB_BODIES:
        alone, fallback = faults.get(name, (None, None))
        add("stub_" + name, agent=None, kwargs={"base_url": "<stub>/" + name},
            **({"laya_fault": alone} if alone else {}))
        add("stub_%s_fallback" % name, agent=None,
            kwargs={"base_url": "<stub>/" + name, "fallback_tool": {"str": "human: a person"},
                    "allow_direct_answer": name == "direct"},
            **({"laya_fault": fallback} if fallback else {}))
    add("stub_low_gated", agent=None, kwargs={"base_url": "<stub>/low-confidence",
                                              "confidence_threshold": 0.1},
        laya_fault=undistributed)
    add("serve", agent=None, kwargs={"base_url": "<serve>"})
    add("serve_controls", agent=None, state=CRASH,
        kwargs={"base_url": "<serve>", "model": "english", "max_len": 128, "lang": "en",
                "min_confidence": 0.01, "allow_direct_answer": True})
    add("serve_gated", agent=None, kwargs={"base_url": "<serve>", "min_confidence": 0.99,
                                           "fallback_tool": {"str": "human"}})
    return out


def _resolve(value: Any, urls: Dict[str, str], recorder: Recorder) -> Any:
    if value == "<recorder>":
        return recorder
    if value in ("<recorder.start>", "<recorder.end>"):
        return recorder.on_predict_start if value.endswith("start>") else recorder.on_predict_end
    if isinstance(value, str) and value.startswith(("<stub>", "<serve>", "<closed>")):
        head, sep, tail = value.partition("/")
        return urls[head] + sep + tail
    return value


def run_case(mod: Any, agents: Dict[str, Any], case: Dict[str, Any],
             urls: Dict[str, str]) -> Dict[str, Any]:
    """Play one case on `mod` (laya's or kime's tools module); its result as the goldens hold it."""
    recorder = Recorder()
    specs = list(case["tools"] or [])
    built = [build_tool(s) for s in specs]
    kwargs = {k: _resolve(v, urls, recorder) for k, v in case["kwargs"].items()}
    if "tools" not in kwargs:
        kwargs["tools"] = list(built) if case["tools"] is not None else None
    fallback_spec = kwargs.get("fallback_tool")
    if fallback_spec is not None:
        kwargs["fallback_tool"] = build_tool(fallback_spec)
        specs.append(fallback_spec)
        built.append(kwargs["fallback_tool"])
    if case["agent"] is not None:
        kwargs["agent"] = agents[case["agent"]]
    selector = mod.LayaToolSelector(**kwargs)
    if case["call"] == "construct":
        return {"constructed": True}
    select_tools = None
    if case.get("select_tools") is not None:
        select_tools = [build_tool(s) for s in case["select_tools"]]
        specs += case["select_tools"]
        built += select_tools
    state = case["state"]
    out: Dict[str, Any] = {}
    call = case["call"]
    if call == "select":
        decision = selector.select(state, tools=select_tools, instructions=case.get("instructions"))
    elif call == "aselect":
        decision = asyncio.run(selector.aselect(state, select_tools))
    elif call == "runnable":
        decision = selector.as_runnable().invoke(state)
    elif call == "chain":
        return {"chained": (selector.as_runnable() | name_of).invoke(state)}
    elif call == "call":
        return {"called": selector.call(state, None, *case.get("args", []),
                                        **case.get("call_kwargs", {}))}
    else:
        raise KeyError(call)
    out = {"type": type(decision).__name__}
    for field in ("tool", "tool_name", "tool_index", "confidence", "probabilities", "reason",
                  "is_direct_answer", "is_fallback", "raw_decision"):
        value = getattr(decision, field)
        out[field] = spec_of(value, specs, built) if field == "tool" else value
    if recorder.events:
        out["events"] = recorder.events
    return out


def error_of(exc: BaseException) -> Dict[str, Any]:
    """A refusal as the goldens hold it."""
    out: Dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    for attr in ("confidence", "threshold"):
        if hasattr(exc, attr) and hasattr(exc, "raw_decision"):
            out[attr] = getattr(exc, attr)
    return out
