"""Laya's shortlist and tournament (`kime.laya.shortlist`) against Laya 0.4.15
(`tests/goldens/shortlist.json`, recorded by `tools/goldens_shortlist.py`), on both committed
checkpoints, on an `Agent`, a `Router` (with `model=`) and stand-in agents.

Each case replays with the recorder's own embedders and stand-ins (`tests/shortlist_fixtures.py`):
the same result (keys and key order, numbers within Laya's last place), the same refusal (type
and message), the same warnings, the same texts embedded and the same number of predict calls.
Beside the goldens: one tournament round is one engine run (the scheduler's own counters), the
async tournament answers as the sync one, and Laya's names are at Laya's path.
"""
from __future__ import annotations

import asyncio
import copy
import warnings
from typing import Any, Dict, Optional

import pytest

import kime
from kime.laya import shortlist

from .. import shortlist_fixtures as fx
from ..laya_replay import assert_same, encode, load_agents, load_cases
from ..paths import MULTILINGUAL_TINY, TINY

CASES = load_cases("shortlist.json")
PATHS = {"<tiny>": str(TINY), "<ml>": str(MULTILINGUAL_TINY)}
MODELS = {"english": str(TINY), "multilingual": str(MULTILINGUAL_TINY),
          "typed-decisions": str(TINY)}
ERRORS = {"ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError}


@pytest.fixture(scope="module")
def agents() -> Dict[str, Any]:
    return load_agents()


@pytest.fixture(scope="module")
def router() -> kime.Router:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        built = kime.Router(models=MODELS, device="cpu", agent_kwargs={"threads": 1})
        built.preload()  # as the recorder did: its load warnings are no case's
    return built


def unscrub(value: Any) -> Any:
    """The recorded value with `<tiny>` / `<ml>` back to this checkout's paths."""
    if isinstance(value, str):
        for mark, path in PATHS.items():
            value = value.replace(mark, path)
        return value
    if isinstance(value, dict):
        return {unscrub(k): unscrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [unscrub(v) for v in value]
    return value


def target_of(case: Dict[str, Any], agents: Dict[str, Any], router: Any) -> Optional[fx.Counted]:
    if case["on"] is None:
        return None
    if case["on"] == "agent":
        return fx.Counted(agents[case["checkpoint"]])
    if case["on"] == "router":
        return fx.Counted(router)
    return fx.Counted(fx.FAKE_AGENTS[case["on"]](agents[case["checkpoint"]]))


def call(case: Dict[str, Any], target: Any, embedder: Any) -> Any:
    args = dict(case["args"])  # the recorded values themselves: they must come back unchanged
    if case["call"] == "shortlist_choice":
        return shortlist.shortlist_choice(args.pop("state"), args.pop("criteria"), embedder,
                                          **args)
    if case["call"] == "predict_shortlist":
        return shortlist.predict_shortlist(target, args.pop("state"), args.pop("questions"),
                                           embedder, **args)
    return shortlist.predict_tournament(target, args.pop("state"), args.pop("questions"), **args)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_as_laya_does(case, agents, router):
    target = target_of(case, agents, router)
    if case["embedder"] == "encoder":
        embedder: Any = fx.Recording(shortlist.embed_fn_from_agent(agents[case["checkpoint"]]))
    else:
        embedder = fx.embed_fn(case["embedder"]) if case["embedder"] else None
    before = copy.deepcopy(case["args"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case["error"]:
            with pytest.raises(ERRORS[case["error"]["type"]]) as info:
                call(case, target, embedder)
            assert str(info.value) == case["error"]["message"]
            if isinstance(info.value, kime.InvalidRequest):  # a refusal names its field
                assert info.value.problems[0]["msg"] == case["error"]["message"]
        else:
            assert_same(encode(call(case, target, embedder)), unscrub(case["result"]))
    assert [str(w.message) for w in caught] == case["warnings"]
    assert getattr(embedder, "calls", []) == case["embedded"]
    assert (target.calls if target is not None else 0) == case["calls"]
    assert case["args"] == before, "the caller's arguments were changed"


def test_goldens_cover_the_brief():
    calls = {c["call"] for c in CASES}
    assert calls == {"shortlist_choice", "predict_shortlist", "predict_tournament"}
    assert {c["checkpoint"] for c in CASES} == {None, "tiny", "multilingual-tiny"}
    assert {c["on"] for c in CASES} >= {"agent", "router", "list_reply", "missing_group"}
    rounds = {meta["rounds"] for c in CASES if c["call"] == "predict_tournament" and c["result"]
              for meta in c["result"]["tournament"].values()}
    assert {0, 1, 2, 3} <= rounds
    assert sum(c["error"] is not None for c in CASES) >= 30


WIDE = {"intent": {"type": "choice", "instructions": "Which intent?",
                   "criteria": ["intent %03d" % i for i in range(120)]},
        "angry": {"type": "noul", "instructions": "The customer is angry."}}


def test_one_round_is_one_engine_run(agents):
    """120 labels in groups of 16: one round of 8 group questions, then the final call. Each
    call is one scheduler run (one shared forward pass), counted by the engine itself."""
    agent = agents["tiny"]
    scheduler = agent.engine.scheduler
    agent.engine.clear_caches()  # every row must reach the device
    runs, rows = scheduler.runs, scheduler.rows
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = shortlist.predict_tournament(agent, "a card payment went twice", WIDE,
                                              group_size=16)
    assert result["tournament"]["intent"]["rounds"] == 1
    assert len(result["tournament"]["intent"]["labels"]) == 8
    assert scheduler.runs - runs == 2
    assert scheduler.rows - rows == 8 + 2  # the round's 8 groups; the final's choice and noul


def test_several_rounds_on_a_router_one_run_each(router):
    engine = router.load("english").engine
    engine.clear_caches()
    runs = engine.scheduler.runs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = shortlist.predict_tournament(router, "my pin is blocked", WIDE, group_size=4,
                                              model="english")
    played = result["tournament"]["intent"]["rounds"]
    assert played == 3 and result["routing"]["model"] == "english"
    assert engine.scheduler.runs - runs == played + 1


@pytest.mark.parametrize("on", ["agent", "router"])
def test_async_tournament_answers_as_the_sync_one(on, agents, router):
    answerer = agents["multilingual-tiny"] if on == "agent" else router
    kwargs = {"model": "multilingual"} if on == "router" else {}
    questions = dict(WIDE, intent=dict(WIDE["intent"], option_order=list(range(120))))
    with warnings.catch_warnings(record=True) as sync_warnings:
        warnings.simplefilter("always")
        want = shortlist.predict_tournament(answerer, "Karte gesperrt", questions, 10, **kwargs)
    with warnings.catch_warnings(record=True) as async_warnings:
        warnings.simplefilter("always")
        got = asyncio.run(shortlist.predict_tournament_async(answerer, "Karte gesperrt",
                                                             questions, 10, **kwargs))
    assert got == want
    assert [str(w.message) for w in async_warnings] == [str(w.message) for w in sync_warnings]
    assert len(sync_warnings) == 1 and "'intent'" in str(sync_warnings[0].message)


def test_async_tournament_runs_a_sync_only_agent_off_the_loop(agents):
    agent = fx.Counted(fx.SystemOneOnly(agents["tiny"]))
    got = asyncio.run(shortlist.predict_tournament_async(agent, "refund", WIDE, 16))
    assert agent.calls == 2
    assert got == shortlist.predict_tournament(agents["tiny"], "refund", WIDE, 16)


def test_refusals_name_their_field():
    with pytest.raises(kime.InvalidRequest) as info:
        shortlist.predict_tournament(object(), "x", {"q": {"type": "choice", "criteria": []}})
    assert info.value.problems[0]["loc"] == ["questions", "q", "criteria"]
    with pytest.raises(kime.InvalidRequest) as info:
        shortlist.shortlist_choice("x", ["a", "b"], fx.Embedder(), k=0)
    assert info.value.problems[0]["loc"] == ["k"]
    with pytest.raises(kime.InvalidArgument) as info:
        shortlist.predict_shortlist(object(), "x", [], fx.Embedder())
    assert info.value.problems[0]["loc"] == ["questions"]


def test_laya_names_at_laya_path():
    assert shortlist.DEFAULT_SHORTLIST_K == 20 and shortlist.DEFAULT_TOURNAMENT_GROUP == 16
    for name in shortlist.__all__ + ["embed_fn_from_agent", "cached_embed_fn"]:
        if name in ("embed_fn_from_agent", "cached_embed_fn"):
            pytest.importorskip("kime.laya.embedding")
        assert callable(getattr(shortlist, name)) or isinstance(getattr(shortlist, name), int)
    with pytest.raises(AttributeError):
        shortlist.no_such_name  # noqa: B018


def test_choice_labels_keep_criteria_order_and_refuse_as_the_tournament_does():
    assert shortlist.choice_labels({"b": "x", 2: None, "a": ""}) == ["b", 2, "a"]
    assert shortlist.choice_labels(["z", "y"]) == ["z", "y"]
    with pytest.raises(kime.InvalidRequest) as info:
        shortlist.choice_labels(["a", "b", "a"], ["questions", "q", "criteria"])
    assert str(info.value) == "choice criteria label 'a' is duplicated"
    assert info.value.problems[0]["loc"] == ["questions", "q", "criteria"]
    with pytest.raises(kime.InvalidArgument):
        shortlist.choice_labels("a, b")
