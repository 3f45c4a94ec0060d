"""Rows at and past the model's limits (issue 53): a `max_len` past the RoPE tables answers as
Laya 0.4.15 does (`tests/goldens/limits.json`, `tools/goldens_limits.py`), and a batch past
the largest bucket runs in a plan that is freed when the call returns.

Before, a 12,000-token `max_len` raised a bare `ValueError` ("a row is longer than the model's
positions", a 500 over HTTP) after building a 16,384-token plan that was kept for good.
"""
from __future__ import annotations

import os
import tracemalloc
import warnings
from pathlib import Path
from typing import Any, Dict

import numpy as np
import pytest

import kime
from kime.buckets import BUCKETS

from ..golden_cases import LIMITS, assert_same, call_case, case_rows, limits_checkpoint
from ..tolerances import FP32

QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "tech", "sales"]},
             "spam": {"type": "noul", "instructions": "Is it spam?"}}


def _load(path: Path, backend: str = "compiled", **kw: Any) -> kime.Agent:
    old = os.environ.get("KIME_CPU_BACKEND")
    os.environ["KIME_CPU_BACKEND"] = backend
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return kime.load(str(path), device="cpu", threads=1, **kw)
    finally:
        if old is None:
            del os.environ["KIME_CPU_BACKEND"]
        else:
            os.environ["KIME_CPU_BACKEND"] = old


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, kime.Agent]:
    tmp = tmp_path_factory.mktemp("limits")
    return {name: _load(limits_checkpoint(name, tmp)) for name in LIMITS["checkpoints"]}


def _cases(slow: bool):
    big = [c for c in LIMITS["cases"] if c["checkpoint"] == "tiny"]
    small = [c for c in LIMITS["cases"] if c["checkpoint"] != "tiny"]
    chosen = big if slow else small
    return pytest.mark.parametrize("case", chosen, ids=[c["id"] for c in chosen])


REFUSED = {"head_max_len_true", "head_max_len_float"}
"""Where laya answers and kime refuses, naming the field: a bool or a float is not a token
budget. laya reads `True` as 1, and a float reaches its slices only when the options crowd
(`error_head_max_len_float_crowded`: there it raises a bare TypeError from inside), so what it
does with one depends on the options, not on the value; laya serve and laya's MCP tools refuse
both."""


def _replay(agent: kime.Agent, case: Dict[str, Any]) -> None:
    if case["id"] in REFUSED:
        with pytest.raises(kime.InvalidArgument) as refused:
            call_case(agent, case)
        assert refused.value.problems[0]["loc"] == ["head_max_len"]
        assert "head_max_len must be an integer" in str(refused.value)
        return
    if case["error"]:
        kind = {"ValueError": ValueError, "TypeError": TypeError}[case["error"]["type"]]
        with pytest.raises(kind) as info:
            call_case(agent, case)
        assert isinstance(info.value, kime.InvalidRequest)
        first = info.value.problems[0]
        if "option markers fit" in case["error"]["message"] and first["loc"][0] == "questions":
            assert first["msg"] == case["error"]["message"]  # a budget the options overflow
        else:  # laya's refusal of a value that is no budget (raw, from inside, or as overflow)
            field = "head_max_len" if "head_max_len" in case["id"] else "max_len"
            assert first["loc"] == [field] and field + " must be" in first["msg"]
        return
    assert_same(call_case(agent, case), case["result"])
    rows = case_rows(agent, case)
    assert [(r.ids, r.markers) for r, _ in rows] == [(w["ids"], w["markers"])
                                                     for w in case["rows"]]
    outputs = agent.engine.run_rows([r for r, _ in rows],
                                    [kime.render.QTYPES[qt] for _, qt in rows], cache=False)
    for (logits, act), want in zip(outputs, case["rows"]):
        np.testing.assert_allclose(logits, want["logits"], **FP32.logits.kw)
        np.testing.assert_allclose(act, want["act"], **FP32.probs.kw)


@_cases(slow=False)
def test_laya_at_the_positions_limit(agents, case):
    _replay(agents[case["checkpoint"]], case)


@pytest.mark.slow
@_cases(slow=True)
def test_laya_past_modernberts_8192_positions(agents, case):
    _replay(agents[case["checkpoint"]], case)


def test_a_row_past_the_tables_runs_as_the_reference(tmp_path):
    """Past the RoPE tables, the compiled forward pass reads tables made for the call, with
    the same bits where both reach: rows of 100 to 700 tokens on 64 positions."""
    path = limits_checkpoint("tiny-positions-64", tmp_path)
    compiled, reference = _load(path).engine, _load(path, "reference").engine
    assert compiled.checkpoint.graph.max_positions == 160
    compiled.decide({"state": "warm", "questions": QUESTIONS})
    before = compiled.memory().plans
    for max_len in (100, 161, 700):
        req = {"state": "I was charged twice for one order. " * 200, "questions": QUESTIONS,
               "max_len": max_len}
        a, b = compiled.decide(req, cache=False), reference.decide(req, cache=False)
        for qid in QUESTIONS:
            np.testing.assert_allclose(a[qid].logits, b[qid].logits, **FP32.logits.kw)
    assert compiled.memory().plans == before  # the plans of long rows were not kept


def test_a_text_past_the_tables_is_embedded_as_the_reference_embeds_it(tmp_path):
    """Laya's embedder runs the encoder on whatever `max_length` lets through, past the
    positions too (kime refused such a text before)."""
    path = limits_checkpoint("tiny-positions-64", tmp_path)
    compiled, reference = _load(path).engine, _load(path, "reference").engine
    texts = ["short", "I was charged twice for one order. " * 60]
    got = compiled.embed(texts, max_length=400, cache=False)
    want = reference.embed(texts, max_length=400, cache=False)
    assert len(compiled.layouter.tok.encode_framed(texts, 400)[1]) > 160
    np.testing.assert_allclose(got, want, rtol=0, atol=FP32.embeddings.atol * np.abs(want).max())


def _rss() -> int:
    """Resident bytes once the C allocator has handed back what is free (glibc keeps freed
    blocks mapped otherwise, so the reading would measure its caching, not what is held)."""
    import ctypes
    import ctypes.util

    libc = ctypes.util.find_library("c")
    if libc and hasattr(ctypes.CDLL(libc), "malloc_trim"):
        ctypes.CDLL(libc).malloc_trim(0)
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc (Linux)")
def test_a_batch_past_the_largest_bucket_frees_its_plan(tiny_path):
    """The plan of a 4,200-token row (past the largest bucket, 4,096) is released when the
    call returns: the engine reports no plan kept, the traced memory falls back, and three
    more such calls leave the process's resident memory where it was, give or take half a
    plan."""
    engine = _load(tiny_path, answer_cache=0).engine
    state = "I was charged twice for one order. " * 1500
    request = {"state": state, "questions": QUESTIONS, "max_len": 4200}
    assert len(engine.rows_for(request)[0].ids) == 4200 > BUCKETS[-1]
    engine.decide({"state": "warm", "questions": QUESTIONS})
    plans = engine.memory().plans
    tracemalloc.start()
    try:
        engine.decide(request)
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # The arena's activations alone are 6000 * d floats per buffer, several buffers.
    one_plan = 4200 * engine.checkpoint.graph.hidden * 4 * 8
    assert peak > one_plan, "the plan was never built"
    assert held < one_plan // 8, "the plan was kept: %d bytes still traced" % held
    assert engine.memory().plans == plans
    rss = _rss()
    for _ in range(3):
        engine.decide(request)
    assert _rss() - rss < one_plan // 2, (rss, _rss())
    engine.close()
