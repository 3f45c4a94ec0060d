"""`OptionStabilityHook` (`kime.laya.stability`, at Laya's path `kime.laya.hooks`) against Laya
0.4.15: every case of `tests/goldens/stability.json` (recorded by `tools/goldens_stability.py`
from `tests/laya/stability_cases.py`) replayed through kime — results with the same keys, order
and types, numbers within one unit of Laya's fourth decimal; refusals by type and message;
warnings by message — plus properties of the validators and helpers, and proof from the
engine's own counters that the variants run in the original request's forward pass.
"""
from __future__ import annotations

import asyncio
import json
import math
import threading
import warnings
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kime
import kime.laya.hooks as hooks
from kime.laya import stability

from ..laya_replay import GOLDENS, assert_same
from .stability_cases import EN, QUESTIONS, SMALL, STATES, run_case

GOLDEN = json.loads((GOLDENS / "stability.json").read_text(encoding="utf-8"))
CASES = GOLDEN["cases"]
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
HOOK = {"accept": 0.9, "escalate": 0.3}


def _unprefixed(message: str) -> str:
    return message.split(": ", 1)[1] if message.startswith(("laya: ", "kime: ")) else message


def _unscrub(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False).replace("<tiny>", TINY).replace("<ml>", ML)
    return json.loads(text)


def _agent(path: str, **kwargs: Any) -> kime.Agent:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(path, device="cpu", threads=1, **kwargs)


@pytest.fixture(scope="module")
def agents() -> Dict[str, Any]:
    return {"tiny": _agent(TINY), "multilingual-tiny": _agent(ML)}


def _router(hook_list: List[Any]) -> kime.Router:
    return kime.Router(models=MODELS, device="cpu", agent_kwargs={"threads": 1}, hooks=hook_list)


def test_the_goldens_cover_what_the_issue_asks():
    calls = {c["call"] for c in CASES}
    assert {"predict", "predict_batch", "router.predict", "router.predict_batch", "construct",
            "make_variants", "decide_reliability", "calibrate_reliability"} <= calls
    assert {c["checkpoint"] for c in CASES if c.get("checkpoint")} == {"tiny",
                                                                       "multilingual-tiny"}
    assert sum(1 for c in CASES if c["error"]) >= 30


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["id"])
def test_replays_laya(case, agents):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case["error"]:
            kind = {"ValueError": ValueError, "TypeError": TypeError}[case["error"]["type"]]
            with pytest.raises(kind) as info:
                run_case(hooks, case, agents, _router)
            assert str(info.value) == case["error"]["message"]
        else:
            ours = _unscrub(run_case(hooks, case, agents, _router))
            assert_same(ours, _unscrub(case["result"]))
    seen = [_unprefixed(str(w.message)) for w in caught
            if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    assert seen == [_unprefixed(m) for m in case["warnings"]]


def test_laya_paths_resolve_to_one_implementation():
    from kime.laya.hooks import OptionStabilityHook, calibrate_reliability

    assert OptionStabilityHook is stability.OptionStabilityHook
    assert calibrate_reliability is stability.calibrate_reliability
    assert hooks.VARIANT_PRESETS is stability.VARIANT_PRESETS
    assert isinstance(OptionStabilityHook(accept=None, escalate=None), hooks.BaseHook)
    with pytest.raises(AttributeError, match="no attribute 'NotAHook'"):
        hooks.NotAHook  # noqa: B018  (the access is the test)


# --- one forward pass --------------------------------------------------------------------------

def _counters(agent: kime.Agent) -> Dict[str, int]:
    s = agent.engine.scheduler
    return {"runs": s.runs, "batches": s.batches, "rows": s.rows}


def _delta(before: Dict[str, int], after: Dict[str, int]) -> Dict[str, int]:
    return {k: after[k] - before[k] for k in before}


def test_the_variants_run_in_the_originals_forward_pass():
    agent = _agent(TINY, answer_cache=0)
    hook = stability.OptionStabilityHook(**HOOK)
    before = _counters(agent)
    result = agent.predict(EN, QUESTIONS, hooks=[hook])
    moved = _delta(before, _counters(agent))
    variants = sum(a["reliability"]["n_variants"] - 1 for a in result["answers"].values()
                   if "reliability" in a)
    assert variants > 10
    # one engine run, one backend batch, every question and every variant in it
    assert moved == {"runs": 1, "batches": 1, "rows": len(QUESTIONS) + variants}
    assert set(result["answers"]) == set(QUESTIONS)


def test_a_batch_of_states_and_its_variants_share_one_pass():
    agent = _agent(TINY, answer_cache=0)
    hook = stability.OptionStabilityHook(**HOOK, variants="fast")
    before = _counters(agent)
    results = agent.predict_batch(STATES, SMALL, hooks=[hook])
    moved = _delta(before, _counters(agent))
    # seeded 'batch': every state gets the same variants, 2 per choice question here
    assert [r["answers"]["intent"]["reliability"]["n_variants"] for r in results] == [3, 3, 3]
    assert moved == {"runs": 1, "batches": 1, "rows": len(STATES) * (len(SMALL) + 2)}


def test_a_routed_request_and_its_variants_share_one_pass():
    hook = stability.OptionStabilityHook(**HOOK, variants="fast")
    router = _router([hook])
    first = router.predict(EN, SMALL, model="english")  # loads the checkpoint
    agent = router.acquire(router.resolve("english"))
    try:
        before = _counters(agent)
        again = router.predict(EN, SMALL, model="english")
        assert _delta(before, _counters(agent))["runs"] == 1
    finally:
        router.release(agent)
    assert again["answers"]["intent"]["reliability"] == first["answers"]["intent"]["reliability"]
    assert again["routing"]["model"] == "english"


# --- concurrency and the async driver ------------------------------------------------------------

def test_one_hook_serves_concurrent_calls(agents):
    agent = agents["tiny"]
    hook = stability.OptionStabilityHook(**HOOK)
    alone = [agent.predict(s, SMALL, hooks=[hook]) for s in STATES]
    got: Dict[int, Any] = {}
    errors: List[BaseException] = []

    def worker(i: int) -> None:
        try:
            for _ in range(3):
                got[i] = agent.predict(STATES[i % len(STATES)], SMALL, hooks=[hook])
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, result in got.items():
        assert result == alone[i % len(STATES)]


def test_the_async_twin_answers_the_same(agents):
    agent = agents["tiny"]
    hook = stability.OptionStabilityHook(**HOOK, seed="s")
    sync = agent.predict(EN, QUESTIONS, hooks=[hook])
    assert asyncio.run(agent.predict_async(EN, QUESTIONS, hooks=[hook])) == sync


def test_a_failed_call_leaves_the_next_one_whole(agents):
    agent = agents["tiny"]
    hook = stability.OptionStabilityHook(**HOOK)
    with pytest.raises((TypeError, ValueError), match="state must not be None"):
        agent.predict_batch([EN, None], SMALL, hooks=[hook])  # refused after the start hook
    result = agent.predict(EN, SMALL, hooks=[hook])
    assert list(result["answers"]) == list(SMALL)
    assert result["answers"]["intent"]["reliability"]["n_variants"] == 8


# --- properties of the validators and helpers ---------------------------------------------------

anything = st.one_of(st.none(), st.booleans(), st.integers(-5, 40), st.floats(allow_nan=True),
                     st.text(max_size=8), st.lists(st.sampled_from(["reorder", "rename", "x"]),
                                                   max_size=3))


def _build(**kwargs: Any) -> Any:
    return stability.OptionStabilityHook(**dict(HOOK, **kwargs))


@settings(max_examples=150, deadline=None)
@given(value=anything)
def test_counts_are_integers_not_bools(value):
    for name, least in (("n_shuffles", 0), ("rename_max_options", 2)):
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= least
        if ok:
            assert getattr(_build(**{name: value}), name) == value
        else:
            with pytest.raises(ValueError, match="^%s must be" % name):
                _build(**{name: value})


@settings(max_examples=150, deadline=None)
@given(accept=anything, escalate=anything)
def test_thresholds_are_checked_in_order(accept, escalate):
    def valid(v: Any, top: float) -> bool:
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                             and math.isfinite(v) and 0.0 <= v <= top)

    try:
        hook = stability.OptionStabilityHook(accept=accept, escalate=escalate)
    except ValueError as exc:
        if not valid(accept, 1.01):
            assert str(exc).startswith("accept must be a float in [0.0, 1.01]")
        elif not valid(escalate, 1.0):
            assert str(exc).startswith("escalate must be a float in [0.0, 1.0]")
        else:
            assert accept is not None and escalate is not None and escalate > accept
            assert str(exc).startswith("escalate (")
        return
    assert valid(accept, 1.01) and valid(escalate, 1.0)
    assert hook.accept == (None if accept is None else float(accept))
    assert hook.escalate == (None if escalate is None else float(escalate))


@settings(max_examples=150, deadline=None)
@given(probes=anything, variants=st.one_of(anything, st.sampled_from(["full", "fast"]),
                                           st.lists(st.sampled_from(
                                               list(stability.ALL_VARIANTS) + ["x"]), max_size=3)))
def test_probes_and_variants_name_themselves(probes, variants):
    try:
        _build(probes=probes, variants=variants)
    except (TypeError, ValueError) as exc:
        assert any(word in str(exc) for word in ("probe", "variant", "relabel")), str(exc)


@settings(max_examples=100, deadline=None)
@given(labels=st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=30, unique=True),
       seed=st.text(max_size=10), n=st.integers(0, 3), relabel=st.booleans(),
       reorder=st.booleans())
def test_variants_are_permutations_without_repeats(labels, seed, n, relabel, reorder):
    made = stability.make_variants(labels, seed, n, relabel=relabel, reorder=reorder)
    assert made[0] == ("original", labels, False)
    assert made == stability.make_variants(labels, seed, n, relabel=relabel, reorder=reorder)
    keys = [(tuple(order), renamed) for _, order, renamed in made]
    assert len(set(keys)) == len(keys)
    for name, order, renamed in made:
        assert sorted(order) == sorted(labels)
        assert renamed == name.startswith("letters")
        assert not renamed or (relabel and len(labels) <= 26)


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.floats(0, 1), st.booleans()), min_size=1, max_size=30),
       target=st.floats(0, 1))
def test_calibrated_cutoffs_are_observed_scores(pairs, target):
    scores = [s for s, _ in pairs]
    accept, escalate = stability.calibrate_reliability(scores, [c for _, c in pairs], target)
    assert accept == 1.01 or accept in scores
    assert escalate == 0.0 or (escalate in scores and escalate < accept)
    kept = [c for s, c in pairs if s >= accept]
    assert accept == 1.01 or sum(kept) / len(kept) >= target
