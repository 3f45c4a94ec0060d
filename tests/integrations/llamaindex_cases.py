"""The LlamaIndex integration's parity cases, and the one runner that plays them.

`tools/goldens_llamaindex.py` plays them on laya 0.4.15's `laya.integrations.llamaindex` (laya's
torch Agent and Router on the committed checkpoints) and `tests/integrations/test_llamaindex.py`
on `kime.integrations.llamaindex`, so both sides run exactly these calls. This module imports
neither library: the runner is handed the integration module, the agents, and two URLs (a stub
server that answers fixed bodies, and a real decision server).

A case is `{"id", "cls", "agent", "kwargs", "call", ...}`:
- `cls`: "single" / "multi" (the selectors) or "router" (`LayaQueryRouter`);
- `agent`: "tiny", "ml", "router" (a Router over both checkpoints), or null with a `base_url` in
  `kwargs` ("<stub>/<body name>", "<serve>", "<closed>");
- `call`: "select" / "aselect" over `choices` and `query`, or "route" / "query" / "aquery";
- `choices`: `{"tool": {...}}` (a `ToolMetadata`), `{"dict": {...}}`, `{"str": "..."}`;
- `query`: `{"str": ...}` or `{"bundle": ...}` (a `QueryBundle`);
- `laya_fault`: where laya's answer is a fault kime does not copy (the test says what kime does).
"""
from __future__ import annotations

import asyncio
import http.server
import json
import threading
from typing import Any, Dict, List, Optional

BILLING = {"name": "billing", "description": "payments, invoices, charges and refunds"}
TECH = {"name": "tech", "description": "bugs, crashes, outages and error messages"}
SALES = {"name": "sales", "description": "plans, pricing, upgrades and discounts"}
DOCS = {"name": "docs", "description": "how-to guides and product documentation"}

INVOICE = "I was charged twice on my last invoice and want a refund."
CRASH = "The app crashes with an error every time I open the settings page."
PRICING = "How much does the team plan cost if we upgrade this month?"
GERMAN = "Ich wurde zweimal belastet und möchte mein Geld zurück."

STUB_BODIES: Dict[str, Any] = {
    "answers-list": {"answers": []},
    "answer-string": {"answers": {"selector": "choice_0", "route": "billing"}},
    "choice-list": {"answers": {"selector": {"choice": ["choice_0"]},
                                "route": {"choice": ["billing"]}}},
    "probability-string": {"answers": {"selector": {"choice": "choice_0",
                                                    "probabilities": {"choice_0": "high",
                                                                      "choice_1": 0.1}}}},
    "probability-bool": {"answers": {"selector": {"probabilities": {"choice_0": 0.2,
                                                                    "choice_1": True}}}},
    "probabilities-list": {"answers": {"selector": {"probabilities": [0.5, 0.5]}}},
    "bare-array": [1, 2],
    "no-answers": {"model": "stub"},
    "unknown-choice": {"answers": {"selector": {"choice": "billing", "answer_confidence": 0.9},
                                   "route": {"choice": "nowhere", "answer_confidence": 0.9}}},
    "low-confidence": {"answers": {"selector": {"choice": "choice_1", "answer_confidence": 0.2},
                                   "route": {"choice": "tech", "answer_confidence": 0.2}}},
    "out-of-range": {"answers": {"selector": {"choice": "choice_7", "answer_confidence": 0.9}}},
}
"""What the stub server answers at `/<name>/v1/systemone`: a laya-serve reply gone wrong."""

FAIL_OPEN = {
    "no-answers": "laya selects the first candidate for a reply that answers nothing; kime "
                  "refuses the reply as malformed",
    "unknown-choice": "laya selects the first candidate for a choice that names none; kime "
                      "refuses the reply as malformed",
    "route-no-answers": "laya routes a reply that answers nothing to its fallback engine; kime "
                        "refuses the reply as malformed",
}
"""The stub replies laya's selectors and router read as a pick (fail open), recorded as
`laya_fault`s."""


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


class GuessGerman:
    """A callable `lang_guess` with a fixed repr, so the refusal's message is the same each run."""

    def __call__(self, state: Any) -> str:
        return "de"

    def __repr__(self) -> str:
        return "GuessGerman()"


def _c(*tools: Dict[str, str]) -> List[Dict[str, Any]]:
    return [{"tool": dict(t)} for t in tools]


THREE = _c(BILLING, TECH, SALES)
FOUR = _c(BILLING, TECH, SALES, DOCS)
ENGINES = ["billing", "tech", "sales"]
DESCRIPTIONS = {"billing": BILLING["description"], "tech": TECH["description"],
                "sales": SALES["description"]}


def cases() -> List[Dict[str, Any]]:
    """Every case, in recording order."""
    out: List[Dict[str, Any]] = []

    def add(id_: str, cls: str, call: str, agent: Optional[str] = "tiny", **rest: Any) -> None:
        rest.setdefault("kwargs", {})
        out.append({"id": id_, "cls": cls, "agent": agent, "call": call, **rest})

    def sel(id_: str, cls: str = "single", call: str = "select", agent: Optional[str] = "tiny",
            choices: Any = None, query: Any = None, **rest: Any) -> None:
        add(id_, cls, call, agent, choices=THREE if choices is None else choices,
            query=query or {"str": INVOICE}, **rest)

    # the single selector: choice shapes, query shapes, checkpoints, sync and async
    sel("single_tools_str")
    sel("single_tools_bundle", query={"bundle": CRASH})
    sel("single_tools_async", call="aselect", query={"bundle": PRICING})
    sel("single_dicts", choices=[{"dict": BILLING}, {"dict": {"description": "bugs only"}},
                                 {"dict": {"name": "sales"}}, {"dict": {}}])
    sel("single_strings", choices=[{"str": "refunds and invoices"}, {"str": "app crashes"}],
        query={"str": CRASH})
    sel("single_mixed", choices=[{"tool": BILLING}, {"dict": TECH}, {"str": "pricing questions"}],
        query={"str": PRICING})
    sel("single_one_choice", choices=_c(DOCS))
    sel("single_ml", agent="ml", choices=FOUR, query={"str": GERMAN})
    sel("single_instructions", choices=FOUR, query={"str": PRICING},
        kwargs={"instructions": "Which team owns this ticket?"})
    sel("single_budgets", kwargs={"max_len": 128, "head_max_len": 96})
    sel("single_budget_too_small", kwargs={"max_len": 16, "head_max_len": 24})
    sel("single_lang", agent="ml", query={"str": GERMAN}, kwargs={"lang": "de"})
    sel("single_min_confidence", kwargs={"min_confidence": 0.9})
    sel("single_threshold_fallback", kwargs={"confidence_threshold": 0.95, "fallback_index": 2})
    sel("single_threshold_passes", kwargs={"confidence_threshold": 0.05,
                                           "raise_on_low_confidence": True})
    sel("single_threshold_no_fallback", kwargs={"confidence_threshold": 0.95})
    sel("single_threshold_raises", kwargs={"confidence_threshold": 0.95,
                                           "raise_on_low_confidence": True})
    sel("single_threshold_raises_async", call="aselect", query={"bundle": CRASH},
        kwargs={"confidence_threshold": 0.99, "raise_on_low_confidence": True})
    sel("single_router", agent="router", choices=FOUR)
    sel("single_router_task", agent="router", query={"str": GERMAN},
        kwargs={"task": "typed-decisions"})
    sel("single_router_lang_guess", agent="router", kwargs={"lang_guess": "de"})
    sel("single_hooks", kwargs={"hooks": "<recorder>"})
    sel("single_hook_callbacks", kwargs={"on_predict_start": "<recorder>",
                                         "on_predict_end": "<recorder>", "hooks_raise": True})
    # refusals before or inside the decision
    sel("single_no_choices", choices=[])
    sel("single_no_choices_async", call="aselect", choices=[])
    sel("single_task_on_agent", kwargs={"task": "english"})
    sel("single_lang_guess_on_agent", kwargs={"lang_guess": "de"})
    sel("single_bad_min_confidence", kwargs={"min_confidence": 1.5})
    sel("single_hooks_remote", agent=None, kwargs={"base_url": "<closed>",
                                                   "hooks": "<recorder>"})
    sel("single_callbacks_remote", agent=None,
        kwargs={"base_url": "<closed>", "on_predict_start": "<recorder>", "hooks_timeout": 1.0})
    sel("single_lang_guess_callable_remote", agent=None,
        kwargs={"base_url": "<closed>", "lang_guess": "<guess>"})
    sel("single_closed_port", agent=None, kwargs={"base_url": "<closed>"})
    # a laya-serve reply gone wrong (the stub server)
    for name in ("answers-list", "answer-string", "choice-list", "bare-array", "no-answers",
                 "unknown-choice", "low-confidence"):
        sel("single_stub_" + name, agent=None, kwargs={"base_url": "<stub>/" + name},
            **({"laya_fault": FAIL_OPEN[name]} if name in FAIL_OPEN else {}))
    sel("single_stub_low_confidence_fallback", agent=None,
        kwargs={"base_url": "<stub>/low-confidence", "confidence_threshold": 0.5,
                "fallback_index": 0})
    sel("single_stub_low_confidence_raises", agent=None,
        kwargs={"base_url": "<stub>/low-confidence", "confidence_threshold": 0.5,
                "raise_on_low_confidence": True})
    sel("single_stub_out_of_range", agent=None, kwargs={"base_url": "<stub>/out-of-range"},
        laya_fault="an IndexError from choices[7]; kime refuses the reply as malformed")
    # a real decision server (laya serve for the recording, kime serve in the test)
    sel("single_serve", agent=None, kwargs={"base_url": "<serve>"})
    sel("single_serve_async", agent=None, call="aselect", query={"bundle": CRASH},
        kwargs={"base_url": "<serve>", "min_confidence": 0.9, "max_len": 128})

    # the multi selector: threshold, max_outputs and the top-choice fallback
    sel("multi_default", cls="multi", choices=FOUR)
    sel("multi_all", cls="multi", choices=FOUR, kwargs={"probability_threshold": 0.0})
    sel("multi_max_two", cls="multi", choices=FOUR,
        kwargs={"probability_threshold": 0.0, "max_outputs": 2})
    sel("multi_max_one", cls="multi", kwargs={"probability_threshold": 0.1, "max_outputs": 1})
    sel("multi_none_pass", cls="multi", query={"bundle": PRICING},
        kwargs={"probability_threshold": 0.99})
    sel("multi_async", cls="multi", call="aselect", choices=FOUR, query={"bundle": CRASH},
        kwargs={"probability_threshold": 0.2})
    sel("multi_dicts", cls="multi", choices=[{"dict": BILLING}, {"dict": TECH}, {"str": "sales"}])
    sel("multi_ml", cls="multi", agent="ml", query={"str": GERMAN},
        kwargs={"instructions": "Which teams are needed?", "probability_threshold": 0.3})
    sel("multi_router", cls="multi", agent="router", choices=FOUR,
        kwargs={"probability_threshold": 0.2, "task": "english"})
    sel("multi_no_choices", cls="multi", choices=[])
    sel("multi_task_on_agent", cls="multi", kwargs={"task": "english"})
    sel("multi_hooks_remote", cls="multi", agent=None,
        kwargs={"base_url": "<closed>", "hooks": "<recorder>"})
    for name in ("probability-string", "probability-bool", "probabilities-list", "no-answers",
                 "answers-list"):
        sel("multi_stub_" + name, cls="multi", agent=None, kwargs={"base_url": "<stub>/" + name},
            **({"laya_fault": FAIL_OPEN[name]} if name == "no-answers" else {}))
    sel("multi_serve", cls="multi", agent=None, choices=FOUR,
        kwargs={"base_url": "<serve>", "probability_threshold": 0.2})

    # the query router: route, query and aquery over callables and engines
    def rt(id_: str, call: str = "route", agent: Optional[str] = "tiny", query: Any = None,
           engines: Any = None, **rest: Any) -> None:
        add(id_, "router", call, agent, query=query or {"str": INVOICE},
            engines=ENGINES if engines is None else engines, **rest)

    rt("route_descriptions", kwargs={"descriptions": DESCRIPTIONS})
    rt("route_default_descriptions", query={"bundle": CRASH})
    rt("route_partial_descriptions", query={"str": PRICING},
       kwargs={"descriptions": {"sales": SALES["description"]},
               "instructions": "Who should answer?"})
    rt("route_threshold_fallback", kwargs={"descriptions": DESCRIPTIONS,
                                           "confidence_threshold": 0.99, "fallback_key": "sales"})
    rt("route_threshold_first_key", kwargs={"descriptions": DESCRIPTIONS,
                                            "confidence_threshold": 0.99})
    rt("route_ml", agent="ml", query={"str": GERMAN}, kwargs={"descriptions": DESCRIPTIONS})
    rt("route_router", agent="router", kwargs={"descriptions": DESCRIPTIONS,
                                               "lang_guess": "en"})
    rt("route_hooks", kwargs={"descriptions": DESCRIPTIONS, "hooks": "<recorder>"})
    rt("query_callables", call="query", kwargs={"descriptions": DESCRIPTIONS})
    rt("query_bundle", call="query", query={"bundle": CRASH},
       kwargs={"descriptions": DESCRIPTIONS})
    rt("aquery_async_callables", call="aquery", query={"bundle": PRICING},
       engines={"kind": "async"}, kwargs={"descriptions": DESCRIPTIONS})
    rt("aquery_objects", call="aquery", engines={"kind": "objects"},
       kwargs={"descriptions": DESCRIPTIONS})
    rt("query_not_callable", call="query", engines={"kind": "inert"},
       kwargs={"descriptions": DESCRIPTIONS, "confidence_threshold": 0.99,
               "fallback_key": "tech"})
    rt("route_empty", engines=[])
    rt("route_task_on_agent", kwargs={"task": "english"})
    rt("route_hooks_remote", agent=None, kwargs={"base_url": "<closed>", "hooks": "<recorder>"})
    for name in ("answer-string", "choice-list", "unknown-choice", "low-confidence", "no-answers"):
        rt("route_stub_" + name, agent=None, kwargs={"base_url": "<stub>/" + name,
                                                     "descriptions": DESCRIPTIONS},
           **({"laya_fault": FAIL_OPEN["route-no-answers"]} if name == "no-answers" else {}))
    rt("route_stub_low_confidence_gated", agent=None,
       kwargs={"base_url": "<stub>/low-confidence", "confidence_threshold": 0.5,
               "fallback_key": "sales"})
    rt("route_serve", agent=None, call="query", kwargs={"base_url": "<serve>",
                                                        "descriptions": DESCRIPTIONS})
    rt("route_list_engines", engines={"kind": "list"},
       laya_fault="AttributeError from list.keys(); kime refuses the argument by name")
    return out


class _Engine:
    """An object query engine: `query` and `aquery` answer fixed text."""

    def __init__(self, key: str) -> None:
        self.key = key

    def query(self, query: Any) -> str:
        return "%s answered %s" % (self.key, _text(query))

    async def aquery(self, query: Any) -> str:
        return "%s answered %s asynchronously" % (self.key, _text(query))


def _text(query: Any) -> str:
    return query if isinstance(query, str) else "bundle:" + str(query.query_str)


def _engines(spec: Any) -> Any:
    if isinstance(spec, list):
        return {k: (lambda q, k=k: "%s answered %s" % (k, _text(q))) for k in spec}
    kind = spec["kind"]
    if kind == "async":
        def make(k: str) -> Any:
            async def answer(q: Any) -> str:
                await asyncio.sleep(0)
                return "%s answered %s asynchronously" % (k, _text(q))
            return answer
        return {k: make(k) for k in ENGINES}
    if kind == "objects":
        return {k: _Engine(k) for k in ENGINES}
    if kind == "inert":
        return {k: object() for k in ENGINES}
    return list(ENGINES)  # "list": not a mapping at all


def _choice(spec: Dict[str, Any], tool_metadata: Any) -> Any:
    if "tool" in spec:
        return tool_metadata(**spec["tool"])
    if "dict" in spec:
        return dict(spec["dict"])
    return spec["str"]


def build_kwargs(case: Dict[str, Any], urls: Dict[str, str], recorder: Recorder) -> Dict[str, Any]:
    """The case's constructor keywords with its placeholders filled in."""
    kwargs = dict(case["kwargs"])
    for key, value in kwargs.items():
        if value == "<recorder>":
            kwargs[key] = [recorder] if key == "hooks" else getattr(recorder, key)
        elif value == "<guess>":
            kwargs[key] = GuessGerman()
        elif isinstance(value, str) and value.startswith(("<stub>", "<serve>", "<closed>")):
            head, _, tail = value.partition(">")
            kwargs[key] = urls[head + ">"] + tail
    return kwargs


def run_case(mod: Any, agents: Dict[str, Any], case: Dict[str, Any], urls: Dict[str, str],
             tool_metadata: Any, query_bundle: Any) -> Dict[str, Any]:
    """Play one case on integration module `mod`; the result as JSON (laya's shape, either side).

    Selections are `[index, reason]` pairs; a route is its key; a query is the engine's answer.
    `last_decision` is the whole decision dict, except from a server, where only its `answers`
    (the rest is the deployment's: model names, routing, usage).
    """
    recorder = Recorder()
    kwargs = build_kwargs(case, urls, recorder)
    agent = agents.get(case["agent"]) if case["agent"] else None
    if agent is not None:
        kwargs["agent"] = agent
    query = case["query"]
    q = query["str"] if "str" in query else query_bundle(query_str=query["bundle"])
    out: Dict[str, Any] = {}
    if case["cls"] == "router":
        obj = mod.LayaQueryRouter(_engines(case["engines"]), **kwargs)
        if case["call"] == "route":
            out["route"] = obj.route(q)
        elif case["call"] == "query":
            out["response"] = obj.query(q)
        else:
            out["response"] = asyncio.run(obj.aquery(q))
        out["fallback_key"] = obj.fallback_key
    else:
        cls = mod.LayaSingleSelector if case["cls"] == "single" else mod.LayaMultiSelector
        obj = cls(**kwargs)
        choices = [_choice(c, tool_metadata) for c in case["choices"]]
        if case["call"] == "select":
            result = obj.select(choices, q)
        else:
            result = asyncio.run(obj.aselect(choices, q))
        out["selections"] = [[s.index, s.reason] for s in result.selections]
    decision = obj.last_decision
    if kwargs.get("base_url") and isinstance(decision, dict):
        decision = {"answers": decision.get("answers")}
    out["last_decision"] = json.loads(json.dumps(decision))
    out["events"] = recorder.events
    return out


ENGINE_CASES: List[Dict[str, Any]] = [
    {"id": "engine_single_sync", "cls": "single", "async": False, "query": INVOICE},
    {"id": "engine_single_async", "cls": "single", "async": True, "query": CRASH},
    {"id": "engine_multi_one_sync", "cls": "multi", "async": False, "query": PRICING,
     "kwargs": {"max_outputs": 1}},
    {"id": "engine_multi_one_async", "cls": "multi", "async": True, "query": INVOICE,
     "kwargs": {"max_outputs": 1}},
    {"id": "engine_multi_two_sync", "cls": "multi", "async": False, "query": CRASH,
     "kwargs": {"probability_threshold": 0.0, "max_outputs": 2}},
    {"id": "engine_multi_two_async", "cls": "multi", "async": True, "query": PRICING,
     "kwargs": {"probability_threshold": 0.0, "max_outputs": 2}},
]
"""A real `RouterQueryEngine` over three fixed-text query engines, routed by the selectors."""


def engine_selection(mod: Any, agent: Any, case: Dict[str, Any], tool_metadata: Any) -> Any:
    """What the engine case's selector picks when called directly, as `[index, reason]` pairs."""
    cls = mod.LayaSingleSelector if case["cls"] == "single" else mod.LayaMultiSelector
    selector = cls(agent=agent, **case.get("kwargs", {}))
    result = selector.select([tool_metadata(**t) for t in (BILLING, TECH, SALES)], case["query"])
    return [[s.index, s.reason] for s in result.selections]


def run_engine_case(mod: Any, agent: Any, case: Dict[str, Any]) -> Dict[str, Any]:
    """One query through LlamaIndex's `RouterQueryEngine` with `mod`'s selector (no LLM is
    called: the engines answer fixed text, and `MockLLM` stands by for the summarizer)."""
    from llama_index.core.llms import MockLLM
    from llama_index.core.query_engine import CustomQueryEngine, RouterQueryEngine
    from llama_index.core.tools import QueryEngineTool

    class Fixed(CustomQueryEngine):
        text: str

        def custom_query(self, query_str: str) -> str:
            return self.text

        async def acustom_query(self, query_str: str) -> str:
            return self.text + " (async)"

    tools = [QueryEngineTool.from_defaults(Fixed(text=t["name"] + " engine"), name=t["name"],
                                           description=t["description"])
             for t in (BILLING, TECH, SALES)]
    cls = mod.LayaSingleSelector if case["cls"] == "single" else mod.LayaMultiSelector
    engine = RouterQueryEngine(selector=cls(agent=agent, **case.get("kwargs", {})),
                               query_engine_tools=tools, llm=MockLLM())
    if case["async"]:
        response = asyncio.run(engine.aquery(case["query"]))
    else:
        response = engine.query(case["query"])
    result = response.metadata["selector_result"]
    return {"response": str(response),
            "selections": [[s.index, s.reason] for s in result.selections]}
