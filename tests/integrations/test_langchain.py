"""kime's LangChain/LangGraph integration (`kime.integrations.langchain`) against laya 0.4.15's
and against the real frameworks (langchain-core, langgraph; nothing of theirs is mocked).

- Parity: every case of `tests/goldens/integrations_langchain.json` (laya's six classes on its
  own torch Agent and Router, `tools/goldens_langchain.py`) replayed on kime agents and a kime
  Router over the same checkpoints: results, `last_decision`, refusals, hook events, signatures.
- Where laya fails (LangGraph 1.2's `add_conditional_edges` with a `LayaRouter`: NameError while
  the graph is built), kime's graph builds, runs and routes as the router's `invoke` answers.
- A real LCEL chain (`RunnableLambda | LayaRouter`) with `invoke`, `batch`, `ainvoke`, `abatch`;
  a real LangGraph graph with a triage node and conditional edges, sync and async.
- One engine pass per `batch`, counted on the engine's scheduler.
- The same classes over `base_url=` against real `kime serve` processes on loopback.
"""
from __future__ import annotations

import asyncio
import builtins
import json
import subprocess
import sys
import time
import typing
import warnings
from typing import Any, Dict, Iterator, List

import pytest

pytest.importorskip("langchain_core")
langgraph_graph = pytest.importorskip("langgraph.graph")

import kime  # noqa: E402
from kime.integrations import langchain as module  # noqa: E402

from .. import paths  # noqa: E402
from ..laya_replay import assert_same  # noqa: E402
from . import langchain_cases as lc  # noqa: E402

sys.path.insert(0, str(paths.ROOT / "tools"))
import goldens_langchain as recorder  # noqa: E402  (its cases and signatures helper)

TINY = str(paths.TINY)
ML = str(paths.MULTILINGUAL_TINY)
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
GOLDENS = json.loads((paths.GOLDENS / "integrations_langchain.json").read_text(encoding="utf-8"))
CASES = {c["id"]: c for c in GOLDENS["cases"]}
SPEC_KEYS = ("id", "cls", "method", "runner", "kwargs", "input", "inputs", "attrs")
OUTCOME_KEYS = ("result", "error", "last_decision", "events", "attrs", "invoke")

KIME_DIFFERS = {
    "router_bad_surrogate": (kime.InvalidArgument, "unpaired surrogate (U+D800)"),
}
"""Bad input kime refuses more clearly than laya: a lone surrogate is laya's TypeError from
inside the tokenizer ("TextEncodeInput must be Union[...]"), and kime's InvalidArgument (a
ValueError) naming the state and the character."""

ROUTES = recorder.ROUTES
EN, BUG, DE = recorder.EN, recorder.BUG, recorder.DE


def unscrub(value: Any) -> Any:
    return json.loads(json.dumps(value).replace("<tiny>", TINY).replace("<ml>", ML))


def expected(case: Dict[str, Any]) -> Dict[str, Any]:
    """What kime must give for a recorded case: laya's outcome, but for a bare message input
    (laya reads its repr) laya's outcome with the message inside a dict (its content)."""
    source = case["as_content"] if case.get("bare_message") else case
    return {k: unscrub(source[k]) for k in OUTCOME_KEYS if k in source}


@pytest.fixture(scope="module")
def runners() -> Iterator[Dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = {"tiny": kime.load(TINY, device="cpu", threads=1),
               "ml": kime.load(ML, device="cpu", threads=1),
               "router": kime.Router(models=MODELS, device="cpu", agent_kwargs={"threads": 1})}
    yield out
    out["router"].unload()
    out["tiny"].close()
    out["ml"].close()


def _kime_error_is(got: Dict[str, Any], want: Dict[str, Any]) -> None:
    """kime's refusal is laya's: the same type, or a kime error subclassing it (InvalidRequest
    is a ValueError, the client's ConnectFailure a RuntimeError), with laya's message."""
    if got["type"] != want["type"]:
        cls = (getattr(kime, got["type"], None) or getattr(module, got["type"], None)
               or getattr(kime.client, got["type"], None))
        base = getattr(builtins, want["type"], None)
        assert cls is not None and base is not None and issubclass(cls, base), (got, want)
    assert got["message"] == want["message"], (got, want)
    for attr in ("violations", "raw_decision"):
        if attr in want:
            assert_same(got[attr], want[attr], attr)


def check_outcome(got: Dict[str, Any], want: Dict[str, Any], method: str) -> None:
    """`got` (kime's run_case) against laya's recorded outcome."""
    assert set(got) == set(want), (sorted(got), sorted(want))
    if "error" in want:
        _kime_error_is(got["error"], want["error"])
    for key in ("result", "last_decision", "attrs", "invoke"):
        if key in want:
            assert_same(got[key], want[key], key)
    if "events" in want:
        # LangChain's own batch (a server, or a Router with hooks) runs invoke on a thread
        # pool, so the events of different inputs may interleave in either order
        if method.startswith("batch") or method == "abatch":
            assert sorted(got["events"]) == sorted(want["events"])
        else:
            assert got["events"] == want["events"]


def replay(case: Dict[str, Any], runners: Dict[str, Any]) -> Dict[str, Any]:
    spec = unscrub({k: case[k] for k in SPEC_KEYS if k in case})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return lc.run_case(module, spec, runners)


# --- parity with laya ----------------------------------------------------------------------------

def test_goldens_cover_every_class_and_refusal():
    classes = {c["cls"] for c in GOLDENS["cases"]}
    assert classes == {"router", "guardrail", "triage", "evaluator", "decision"}
    assert sum("error" in c for c in GOLDENS["cases"]) >= 30
    assert any(c.get("laya_fault") for c in GOLDENS["cases"])
    assert [c["id"] for c in recorder.cases()] == list(CASES), "re-record the goldens"


@pytest.mark.parametrize("case_id", [i for i, c in CASES.items() if not c.get("laya_fault")])
def test_goldens(case_id, runners):
    case = CASES[case_id]
    got = replay(case, runners)
    want = expected(case)
    if case_id in KIME_DIFFERS:
        kind, text = KIME_DIFFERS[case_id]
        assert got["error"]["type"] == kind.__name__ and text in got["error"]["message"]
        assert issubclass(kind, ValueError)
        return
    check_outcome(got, want, case["method"])


@pytest.mark.parametrize("case_id", [i for i, c in CASES.items() if c.get("laya_fault")])
def test_laya_fault_works_on_kime(case_id, runners):
    """laya's LayaRouter as a conditional edge fails while the graph is built; kime's builds,
    runs, and sends the state to the node its `invoke` names (laya's `invoke` answer too)."""
    case = CASES[case_id]
    assert case["error"] == {"type": "NameError", "message": "name 'Dict' is not defined"}
    got = replay(case, runners)
    assert "error" not in got, got.get("error")
    assert got["invoke"] == case["invoke"]
    assert got["result"] == dict(case["input"], handled_by=case["invoke"])
    assert_same(got["last_decision"], unscrub(case["last_decision"]))


def test_signatures_are_layas():
    assert recorder.signatures(module) == GOLDENS["signatures"]


def test_type_hints_resolve_without_a_namespace(runners):
    """What LangGraph 1.2 does to a branch path (`typing.get_type_hints(path)`): laya's string
    annotations raise NameError there; kime's are real types."""
    for obj in (module.LayaRouter(ROUTES, agent=runners["tiny"]),
                module.LayaGuardrail(agent=runners["tiny"]), module.LayaTriage(),
                module.LayaEvaluator({}), module.LayaDecision(recorder.SCHEMA)):
        typing.get_type_hints(obj)  # the instance: its class's own annotations
        hints = typing.get_type_hints(type(obj))  # the class: its bases' too
        assert hints["agent"] == typing.Optional[typing.Any]
        # every class but LayaDecision takes min_confidence (laya's LayaDecision does not)
        assert (hints.get("min_confidence") == typing.Optional[float]) != isinstance(
            obj, module.LayaDecision)
    assert typing.get_type_hints(module.LayaRouter(ROUTES))["criteria"] == Dict[str, str]


def test_the_six_names_on_kime():
    from kime.integrations import LayaGuardrailError as lazy

    assert lazy is module.LayaGuardrailError
    for name in module.__all__:
        assert getattr(kime, name) is getattr(module, name)
    assert issubclass(module.LayaGuardrailError, ValueError)


def test_missing_langchain_names_the_extra():
    code = ("import sys; sys.modules['langchain_core'] = None\n"
            "try:\n    import kime.integrations.langchain\nexcept ImportError as e:\n"
            "    print(e)\n"
            "try:\n    import kime; kime.LayaRouter\nexcept ImportError as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=str(paths.ROOT))
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2, out
    assert all("pip install 'kime[langchain]'" in line for line in lines), lines


# --- a real chain and a real graph ---------------------------------------------------------------

def _runs(agent: Any) -> int:
    return int(agent.engine.scheduler.runs)


@pytest.fixture(scope="module")
def counted() -> Iterator[Any]:
    """An agent without an answer cache, so every decision runs the engine."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(TINY, device="cpu", threads=1, answer_cache=0)
    yield agent
    agent.close()


def test_lcel_chain_invoke_batch_ainvoke_abatch(counted):
    from langchain_core.runnables import RunnableLambda

    router = module.LayaRouter(ROUTES, agent=counted)
    chain = RunnableLambda(lambda ticket: ticket["body"]) | router
    tickets = [{"body": text} for text in (EN, BUG, DE, recorder.JAILBREAK)]
    one_by_one = [router.invoke(t["body"]) for t in tickets]
    assert chain.invoke(tickets[0]) == one_by_one[0]
    before = _runs(counted)
    assert chain.batch(tickets) == one_by_one
    assert _runs(counted) - before == 1  # four inputs, one engine pass
    assert asyncio.run(chain.ainvoke(tickets[1])) == one_by_one[1]
    before = _runs(counted)
    assert asyncio.run(chain.abatch(tickets)) == one_by_one
    assert _runs(counted) - before == 1
    assert list(chain.stream(tickets[2])) == [one_by_one[2]]
    assert router.last_decision["answers"]["route"]["choice"] in ROUTES


@pytest.mark.parametrize("cls", ["router", "guardrail", "triage", "evaluator", "decision"])
def test_batch_is_one_engine_pass(counted, cls):
    """laya's five batched runnables (and kime's LayaDecision, which laya loops) answer a batch
    in one engine run, with what `invoke` answers per input; invoke is one run each."""
    make = {"router": lambda: module.LayaRouter(ROUTES, agent=counted),
            "guardrail": lambda: module.LayaGuardrail(recorder.GUARD, action="annotate",
                                                      agent=counted),
            "triage": lambda: module.LayaTriage(agent=counted),
            "evaluator": lambda: module.LayaEvaluator(recorder.RUBRIC, agent=counted),
            "decision": lambda: module.LayaDecision(recorder.SCHEMA, agent=counted)}[cls]
    obj = make()
    inputs = [EN, {"input": BUG}, DE, {"messages": [{"role": "user", "content": EN}]}, "x"]
    before = _runs(counted)
    each = [obj.invoke(i) for i in inputs]
    assert _runs(counted) - before == len(inputs)
    before = _runs(counted)
    assert obj.batch(inputs) == each
    assert _runs(counted) - before == 1


def test_batch_on_a_router_is_one_pass_per_checkpoint():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        router = kime.Router(models=MODELS, device="cpu",
                             agent_kwargs={"threads": 1, "answer_cache": 0})
    try:
        laya_router = module.LayaRouter(ROUTES, agent=router)
        texts = [EN, BUG, recorder.JAILBREAK]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            each = [laya_router.invoke(t) for t in texts]  # loads the english checkpoint
        agent = router.acquire(router.resolve("english"))
        try:
            before = _runs(agent)
            assert laya_router.batch(texts) == each
            assert _runs(agent) - before == 1
        finally:
            router.release(agent)
        assert laya_router.last_decision["routing"]["model"] == "english"
    finally:
        router.unload()


class _SlowFirst:
    """A hook that holds the call deciding `text` for a while, so on LangChain's thread pool
    that input finishes after the ones given after it."""

    def __init__(self, text: str) -> None:
        self.text = text

    def on_predict_start(self, ctx: Any) -> None:
        if any(self.text in str(state) for state in ctx.states or []):
            time.sleep(0.5)


def test_after_a_hooked_batch_the_last_decision_is_the_last_inputs(runners):
    """A Router with hooks gets LangChain's per-input batch on a thread pool; the first input,
    held by its hook, finishes last, yet `last_decision` is the last input's, as in order."""
    router = runners["router"]
    laya_router = module.LayaRouter(ROUTES, agent=router)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        laya_router.invoke(DE)
        last = laya_router.last_decision
        laya_router.invoke(EN)
        first = laya_router.last_decision
        assert first != last
        hooked = module.LayaRouter(ROUTES, agent=router, hooks=[_SlowFirst(EN)])
        assert hooked.batch([EN, DE]) == [pick_label(first), pick_label(last)]
    assert hooked.last_decision == last


def pick_label(decision: Dict[str, Any]) -> str:
    return str(decision["answers"]["route"]["choice"])


def _graph(router: Any, triage: Any) -> Any:
    class State(typing.TypedDict, total=False):
        input: str
        triage: Dict[str, Any]
        handled_by: str

    graph: Any = langgraph_graph.StateGraph(State)
    graph.add_node("triage", triage)
    for route in ROUTES:
        graph.add_node(route, (lambda r: lambda state: {"handled_by": r})(route))
        graph.add_edge(route, langgraph_graph.END)
    graph.add_edge(langgraph_graph.START, "triage")
    graph.add_conditional_edges("triage", router, {r: r for r in ROUTES})
    return graph.compile()


def test_langgraph_conditional_edges(runners):
    """A triage node, then conditional edges routed by LayaRouter: built, run sync, async and
    as a batch; each state reaches the node the router names."""
    router = module.LayaRouter(ROUTES, state_key="input", agent=runners["tiny"])
    app = _graph(router, module.LayaTriage(state_key="input", agent=runners["tiny"]))
    states = [{"input": text} for text in (EN, BUG, DE)]
    routes = [router.invoke(s) for s in states]
    triages = [module.LayaTriage(agent=runners["tiny"]).invoke(s)["triage"] for s in states]
    for state, route, triage in zip(states, routes, triages):
        out = app.invoke(state)
        assert out["handled_by"] == route
        assert_same(out["triage"], triage)
    assert [o["handled_by"] for o in app.batch(states)] == routes
    assert asyncio.run(app.ainvoke(states[1]))["handled_by"] == routes[1]


# --- over base_url, against kime serve ----------------------------------------------------------

def _remote_cases(runner: str) -> List[str]:
    """The recorded local cases a server must answer the same: no hooks or callables (they
    cannot cross HTTP), no graph, no refusal; on one checkpoint, no routing hints."""
    out = []
    for case_id, case in CASES.items():
        kwargs = case["kwargs"]
        if case["runner"] != runner or "error" in case or case.get("laya_fault"):
            continue
        if case["method"] in ("construct", "graph_node") or "<recorder>" in kwargs.values():
            continue
        if kwargs.get("lang_guess") == "<callable>":
            continue
        if runner == "tiny" and {"task", "model", "lang_guess"} & set(kwargs):
            continue
        out.append(case_id)
    return out


def _strip_served(value: Any) -> Any:
    """A served decision without what laya serve adds to `predict`'s (`x_jev_confidence`)."""
    if isinstance(value, dict):
        return {k: _strip_served(v) for k, v in value.items() if k != "x_jev_confidence"}
    if isinstance(value, list):
        return [_strip_served(v) for v in value]
    return value


@pytest.fixture(scope="module")
def servers(tmp_path_factory) -> Iterator[Dict[str, Any]]:
    from ..serve.test_server_router import Serve

    one = Serve(tmp_path_factory.mktemp("one"), "--model", TINY)
    three = Serve(tmp_path_factory.mktemp("three"),
                  *[a for name, src in MODELS.items() for a in ("--model", "%s=%s" % (name, src))])
    yield {"tiny": one, "router": three}
    one.stop()
    three.stop()


@pytest.mark.slow
@pytest.mark.parametrize("runner", ["tiny", "router"])
def test_goldens_over_base_url(servers, runner):
    """Each eligible recorded case with `base_url=` (and an API key) in place of `agent=`:
    laya's recorded answers, from a kime serve on loopback."""
    from ..serve.test_server import KEYS

    server = servers[runner]
    ids = _remote_cases(runner)
    assert len(ids) >= (30 if runner == "tiny" else 8)
    for case_id in ids:
        case = CASES[case_id]
        spec = unscrub({k: case[k] for k in SPEC_KEYS if k in case})
        spec["runner"] = None
        spec["kwargs"] = dict(spec["kwargs"], base_url="http://127.0.0.1:%d" % server.port,
                              api_key=KEYS[0])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = _strip_served(lc.run_case(module, spec, {}))
        want = expected(case)
        if case["method"] in ("batch", "batch_configs", "abatch"):
            # one POST per input on LangChain's thread pool: which input's decision ends up
            # as `last_decision` is a race (laya's too); the outputs are in input order
            got.pop("last_decision", None)
            want.pop("last_decision", None)
        try:
            check_outcome(got, want, case["method"])
        except AssertionError as e:
            raise AssertionError("%s over base_url: %s" % (case_id, e)) from e


@pytest.mark.slow
def test_base_url_refusals(servers):
    """A wrong key is the server's 401 in laya's wording; hooks never leave the process."""
    url = "http://127.0.0.1:%d" % servers["tiny"].port
    with pytest.raises(RuntimeError, match=r"^Laya server error 401: "):
        module.LayaRouter(ROUTES, base_url=url, api_key="wrong").invoke(EN)
    with pytest.raises(ValueError, match="hooks run in the local runner"):
        module.LayaTriage(base_url=url, hooks=[lc.Recorder()]).batch([EN, BUG])
    with pytest.raises(RuntimeError, match=r"^Laya server error 422: "):
        module.LayaRouter({}, base_url=url, api_key="first-key").invoke(EN)


# --- properties ----------------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from kime.integrations.langchain.text import CANDIDATE_KEYS, extract_text  # noqa: E402

_text = st.text(max_size=20)


@given(_text, st.sampled_from(CANDIDATE_KEYS), st.dictionaries(st.text(max_size=5), _text))
def test_a_dict_is_read_at_its_first_candidate_key(text, key, others):
    state = {k: v for k, v in others.items() if k not in CANDIDATE_KEYS}
    state[key] = text
    assert extract_text(state) == text
    assert extract_text(text) == text
    # a state_key the dict lacks falls through to the candidates
    assert extract_text(state, state_key="\x00absent") == text


@given(st.lists(st.one_of(_text, st.fixed_dictionaries({"type": st.just("text"), "text": _text}),
                          st.fixed_dictionaries({"type": st.just("image")})), max_size=6))
def test_content_blocks_are_their_text_parts(blocks):
    from langchain_core.messages import HumanMessage

    parts = [b if isinstance(b, str) else b["text"] for b in blocks
             if isinstance(b, str) or "text" in b]
    got = extract_text(HumanMessage(content=blocks))
    if not parts:
        assert got == blocks  # nothing textual: handed back as the caller shaped it
    else:
        assert got == (parts[0] if len(parts) == 1 else "\n".join(parts))


@settings(max_examples=50)
@given(st.floats(allow_nan=False))
def test_guardrail_threshold_must_be_a_probability(threshold):
    if 0.0 <= threshold <= 1.0:
        assert module.LayaGuardrail(threshold=threshold).threshold == threshold
    else:
        with pytest.raises(ValueError, match=r"^threshold must be a probability in \[0, 1\]"):
            module.LayaGuardrail(threshold=threshold)


def test_laya_reads_a_bare_message_as_its_repr():
    """Why kime's bare-message cases replay laya's dict reading: laya's own answer for the bare
    message saw more state tokens (the repr: content=..., additional_kwargs=..., ...)."""
    case = CASES["router_human_message"]
    bare = case["last_decision"]["usage"]["state_tokens"]
    assert bare > case["as_content"]["last_decision"]["usage"]["state_tokens"]
