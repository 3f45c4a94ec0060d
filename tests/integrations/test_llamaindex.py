"""kime's LlamaIndex integration (`kime.integrations.llamaindex`) against laya 0.4.15's and
against LlamaIndex itself.

- Every case of `tests/goldens/integrations_llamaindex.json` (recorded by
  `tools/goldens_llamaindex.py` from `llamaindex_cases.py`) replayed on kime agents, a kime
  Router, the same stub server and a real `kime serve` on loopback: selections, routes, answers
  and refusals as laya's, the decisions within 1e-4; where laya's answer is a fault
  (`laya_fault`), what kime does instead.
- A real `RouterQueryEngine` over three fixed-text `CustomQueryEngine`s, routed by kime's
  selectors, sync and async, one and two selections: the cases where laya 0.4.15 fails with
  `'SelectorResult' object has no attribute 'inds'`.
- The constructors' signatures as laya's; LlamaIndex's real types; llama-index-core imported
  only for a selector, and its absence naming the extra.
"""
from __future__ import annotations

import asyncio
import inspect
import json
import re
import subprocess
import sys
import warnings
from typing import Any, Dict, Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kime
from kime.integrations import caller

from .. import paths
from ..laya_replay import assert_same
from ..paths import GOLDENS
from . import llamaindex_cases as li

core = pytest.importorskip("llama_index.core", reason="needs llama-index-core: "
                           "pip install 'kime[llamaindex]'")

from llama_index.core.schema import QueryBundle  # noqa: E402
from llama_index.core.selectors import BaseSelector, SelectorResult, SingleSelection  # noqa: E402
from llama_index.core.tools import ToolMetadata  # noqa: E402

from kime.integrations import LayaLowConfidenceError  # noqa: E402
from kime.integrations import llamaindex as mod  # noqa: E402
from kime.integrations import llamaindex_common as common  # noqa: E402

GOLDEN = json.loads((GOLDENS / "integrations_llamaindex.json").read_text(encoding="utf-8"))
CASES = {case["id"]: case for case in GOLDEN["cases"]}
TINY = str(paths.TINY)
ML = str(paths.MULTILINGUAL_TINY)
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
CLOSED = "http://127.0.0.1:1"
NUMBER = re.compile(r"-?\d+\.\d+")


@pytest.fixture(scope="module")
def agents() -> Dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {"tiny": kime.load(TINY, device="cpu", threads=1),
                "ml": kime.load(ML, device="cpu", threads=1),
                "router": kime.Router(models=MODELS, device="cpu",
                                      agent_kwargs={"threads": 1})}


@pytest.fixture(scope="module")
def urls() -> Iterator[Dict[str, str]]:
    """The stub server and `kime serve` (the `tiny` checkpoint) on loopback."""
    pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")
    from ..serve.loopback import LoopbackServer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        engine = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    serve = LoopbackServer(engine)
    stub = li.StubServer()
    try:
        yield {"<stub>": stub.url, "<serve>": "http://127.0.0.1:%d" % serve.port,
               "<closed>": CLOSED}
    finally:
        stub.stop()
        serve.stop()


def _unscrub(value: Any, urls: Dict[str, str]) -> Any:
    text = json.dumps(value, ensure_ascii=False).replace("<tiny>", TINY).replace("<ml>", ML)
    for name in ("<stub>", "<serve>"):
        text = text.replace(name, urls[name])
    return json.loads(text)


def _same_reason(ours: str, theirs: str) -> None:
    """A reason as laya's: the same words, and each number (printed to three places from a
    decision that agrees to 1e-4) within one unit of the third place."""
    assert NUMBER.split(ours) == NUMBER.split(theirs), (ours, theirs)
    for a, b in zip(NUMBER.findall(ours), NUMBER.findall(theirs)):
        assert abs(float(a) - float(b)) <= 1e-3 + 1e-9, (ours, theirs)


def _same_selections(ours: Any, theirs: Any) -> None:
    assert [index for index, _ in ours] == [index for index, _ in theirs]
    for (_, a), (_, b) in zip(ours, theirs):
        _same_reason(a, b)


def _play(case: Dict[str, Any], agents: Dict[str, Any], urls: Dict[str, str]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return li.run_case(mod, agents, case, urls, ToolMetadata, QueryBundle)


FAULTS = {
    "single_stub_out_of_range": (RuntimeError, "Malformed decision response from Laya server at "
                                 "<stub>/out-of-range: 'choice' 'choice_7' names none of the 3 "
                                 "candidates"),
    "single_stub_unknown-choice": (RuntimeError, "Malformed decision response from Laya server "
                                   "at <stub>/unknown-choice: 'choice' 'billing' names none of "
                                   "the 3 candidates"),
    "single_stub_no-answers": (RuntimeError, "Malformed decision response from Laya server at "
                               "<stub>/no-answers: the reply has no 'answers' object"),
    "multi_stub_no-answers": (RuntimeError, "Malformed decision response from Laya server at "
                              "<stub>/no-answers: the reply has no 'answers' object"),
    "route_stub_no-answers": (RuntimeError, "Malformed decision response from Laya server at "
                              "<stub>/no-answers: the reply has no 'answers' object"),
    "route_list_engines": (TypeError, "query_engines must be a dict of key -> query engine, "
                           "got list"),
}
"""What kime does where laya's recorded answer is a fault (`laya_fault` in the golden)."""


def test_the_goldens_cover_what_the_brief_asks() -> None:
    cases = GOLDEN["cases"]
    assert len(cases) >= 20 and {c["cls"] for c in cases} == {"single", "multi", "router"}
    assert {c["call"] for c in cases} == {"select", "aselect", "route", "query", "aquery"}
    errors = {c["error"]["type"] for c in cases if c["error"]}
    assert {"ValueError", "RuntimeError", "LayaLowConfidenceError", "TypeError"} <= errors
    assert {c["id"] for c in cases if c.get("laya_fault")} == set(FAULTS)
    assert sum(1 for c in cases if "<serve>" in json.dumps(c["kwargs"])) >= 3


@pytest.mark.parametrize("case_id", list(CASES))
def test_replays_laya(case_id: str, agents: Dict[str, Any], urls: Dict[str, str]) -> None:
    case = CASES[case_id]
    if case_id in FAULTS:
        kind, message = FAULTS[case_id]
        with pytest.raises(kind) as info:
            _play(case, agents, urls)
        assert str(info.value) == _unscrub(message, urls)
        return
    if case["error"]:
        with pytest.raises(Exception) as info:
            _play(case, agents, urls)
        # kime's own refusals subclass the builtin laya raises (InvalidRequest, TooLong: ValueError)
        kinds = {"ValueError": ValueError, "RuntimeError": RuntimeError, "TypeError": TypeError,
                 "LayaLowConfidenceError": LayaLowConfidenceError}
        assert isinstance(info.value, kinds[case["error"]["type"]]), repr(info.value)
        want = _unscrub(case["error"]["message"], urls)
        if case["error"]["type"] == "LayaLowConfidenceError":
            _same_reason(str(info.value), want)
            err = info.value
            assert isinstance(err, LayaLowConfidenceError) and isinstance(err, ValueError)
            assert err.confidence < err.threshold == case["kwargs"]["confidence_threshold"]
            assert "answers" in err.raw_decision
        else:
            assert str(info.value) == want
        return
    ours = _play(case, agents, urls)
    theirs = _unscrub(case["result"], urls)
    assert list(ours) == list(theirs)
    if "selections" in theirs:
        _same_selections(ours.pop("selections"), theirs.pop("selections"))
    assert_same(ours, theirs)


@pytest.mark.parametrize("case", GOLDEN["engine"], ids=[c["id"] for c in GOLDEN["engine"]])
def test_router_query_engine_routes_by_kimes_selectors(case: Dict[str, Any],
                                                       agents: Dict[str, Any]) -> None:
    """Where laya 0.4.15 fails under llama-index-core 0.14, a real `RouterQueryEngine` routes by
    kime's selector: the selection laya makes when called directly, and that engine's answer."""
    assert case["error"] == {"type": "AttributeError",
                             "message": "'SelectorResult' object has no attribute 'inds'"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = li.run_engine_case(mod, agents["tiny"], case)
    _same_selections(got["selections"], case["selection"])
    names = [li.BILLING["name"], li.TECH["name"], li.SALES["name"]]
    suffix = " (async)" if case["async"] else ""
    answers = [names[index] + " engine" + suffix for index, _ in case["selection"]]
    if len(answers) == 1:
        assert got["response"] == answers[0]
    else:  # LlamaIndex's summarizer (MockLLM here) is handed each selected engine's answer
        assert all(answer in got["response"] for answer in answers), got["response"]
        others = set(names) - {names[index] for index, _ in case["selection"]}
        assert not any(name + " engine" in got["response"] for name in others)


def test_results_are_llama_indexs_own_types(agents: Dict[str, Any]) -> None:
    choices = [ToolMetadata(**li.BILLING), ToolMetadata(**li.TECH)]
    for cls in (mod.LayaSingleSelector, mod.LayaMultiSelector):
        selector = cls(agent=agents["tiny"], **({"probability_threshold": 0.0}
                                                if cls is mod.LayaMultiSelector else {}))
        assert isinstance(selector, BaseSelector)
        for result in (selector.select(choices, QueryBundle(li.CRASH)),
                       asyncio.run(selector.aselect(choices, li.CRASH))):
            assert type(result) is SelectorResult
            assert all(type(s) is SingleSelection for s in result.selections)
            assert result.inds == [s.index for s in result.selections]
            assert result.reasons == [s.reason for s in result.selections]
        assert selector.get_prompts() == {}
    assert {n for n in dir(kime.integrations) if n.startswith("Laya")} >= {
        "LayaSingleSelector", "LayaMultiSelector", "LayaQueryRouter"}
    assert kime.integrations.LayaSingleSelector is mod.LayaSingleSelector


@pytest.mark.parametrize("name", sorted(GOLDEN["signatures"]))
def test_constructors_take_laya_arguments(name: str) -> None:
    params = inspect.signature(getattr(mod, name)).parameters.values()
    ours = [[p.name, None if p.default is p.empty else repr(p.default)] for p in params]
    assert ours == GOLDEN["signatures"][name]
    assert set(caller.CONTROLS) <= {p.name for p in params}


def test_a_keyed_kime_serve(agents: Dict[str, Any]) -> None:
    """`api_key` reaches `kime serve` as a bearer key; without it, laya's server-error wording."""
    pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")
    from ..serve.loopback import LoopbackServer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        engine = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    serve = LoopbackServer(engine, api_keys=["sesame"])
    url = "http://127.0.0.1:%d/" % serve.port
    try:
        choices = [ToolMetadata(**li.BILLING), ToolMetadata(**li.TECH), ToolMetadata(**li.SALES)]
        keyed = mod.LayaSingleSelector(base_url=url, api_key="sesame").select(choices, li.PRICING)
        local = mod.LayaSingleSelector(agent=agents["tiny"]).select(choices, li.PRICING)
        assert keyed.inds == local.inds
        _same_reason(keyed.reasons[0], local.reasons[0])
        with pytest.raises(RuntimeError, match=r"^Laya server error 401: "):
            mod.LayaSingleSelector(base_url=url).select(choices, li.PRICING)
        router = mod.LayaQueryRouter(dict.fromkeys(li.ENGINES, lambda q: q), api_key="sesame",
                                     base_url=url + "v1/systemone", descriptions=li.DESCRIPTIONS)
        assert router.route(li.PRICING) == mod.LayaQueryRouter(
            dict.fromkeys(li.ENGINES), agent=agents["tiny"],
            descriptions=li.DESCRIPTIONS).route(li.PRICING)
    finally:
        serve.stop()


def test_llama_index_is_imported_only_for_a_selector() -> None:
    """`LayaQueryRouter` needs no LlamaIndex; a selector without it names the extra."""
    script = (
        "import sys\n"
        "import kime.integrations.llamaindex as m\n"
        "assert not any(k.startswith('llama_index') for k in sys.modules), 'imported'\n"
        "assert m.LayaQueryRouter({'a': None}).fallback_key == 'a'\n"
        "sys.modules['llama_index'] = None\n"
        "for name in ('LayaSingleSelector', 'LayaMultiSelector'):\n"
        "    try:\n"
        "        getattr(m, name)\n"
        "    except ImportError as e:\n"
        "        print(e)\n"
        "from kime.integrations import LayaMultiSelector\n")
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1 and "ImportError" in run.stderr, run.stderr
    lines = run.stdout.splitlines()
    assert lines == ["%s needs llama-index-core, which is not installed: pip install "
                     "'kime[llamaindex]'" % name
                     for name in ("LayaSingleSelector", "LayaMultiSelector")]
    assert "pip install 'kime[llamaindex]'" in run.stderr.splitlines()[-1]
    with pytest.raises(AttributeError, match="LayaNothing"):
        mod.LayaNothing  # noqa: B018  (the attribute lookup is the test)


@given(st.lists(st.one_of(
    st.builds(ToolMetadata, description=st.text(max_size=8),
              name=st.one_of(st.none(), st.text(max_size=8))),
    st.fixed_dictionaries({}, optional={"name": st.text(max_size=8),
                                        "description": st.text(max_size=8)}),
    st.text(max_size=8)), max_size=6))
def test_every_candidate_becomes_a_criterion(choices: Any) -> None:
    criteria = common.choice_criteria(choices)
    assert list(criteria) == ["choice_%d" % i for i in range(len(choices))]
    for i, choice in enumerate(choices):
        name = choice.get("name") if isinstance(choice, dict) else getattr(choice, "name", None)
        text = criteria["choice_%d" % i]
        assert text and (not name or text.startswith(name + ": "))
