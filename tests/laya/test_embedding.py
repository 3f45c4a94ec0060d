"""Laya's embedders on kime (`kime.laya.embedding`) replayed against what Laya 0.4.15 recorded
(tests/goldens/embed.json, tools/goldens_embed.py): `embed_fn_from_agent`'s vectors on both
committed checkpoints, `cached_embed_fn`'s results, counts and inner calls step by step, and
every refusal, on a `kime.load` Agent and a Router."""
from __future__ import annotations

import json
import math
import threading
import warnings
from typing import Any, Dict, List

import numpy as np
import pytest

import kime
from kime.laya.embedding import cached_embed_fn, embed_fn_from_agent
from kime.laya.router import Router

from ..paths import GOLDENS
from ..tolerances import Tol

DATA = json.loads((GOLDENS / "embed.json").read_text(encoding="utf-8"))
PATHS = {"tiny": GOLDENS / "checkpoints" / "tiny",
         "multilingual-tiny": GOLDENS / "checkpoints" / "multilingual-tiny"}

F32 = Tol(0.0, 1e-4, "FP32 against torch's FP32 encoder, relative to the case's largest |value|: "
          "two FP32 sums in different orders")
INT8 = Tol(0.0, 0.1, "the INT8 GEMMs' rounding through every encoder layer, relative to the "
           "largest |value|; the mean of a row smooths it")
BF16 = Tol(0.0, 0.05, "bfloat16 GEMM inputs (8 bits of mantissa), relative to the largest "
           "|value|")
TOL = {"f32": F32, "int8": INT8, "bf16": BF16}


def _load(name: str, precision: str = "f32") -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(str(PATHS[name]), device="cpu", precision=precision, answer_cache=0)


@pytest.fixture(scope="module")
def agents():
    made: Dict[tuple, Any] = {}

    def get(name: str, precision: str = "f32") -> Any:
        if (name, precision) not in made:
            made[name, precision] = _load(name, precision)
        return made[name, precision]
    yield get
    for agent in made.values():
        agent.close()


def _bf16_missing():
    from kime._cpu.backend import bf16_missing

    return bf16_missing()


PRECISIONS = ["f32", "int8", pytest.param("bf16", marks=pytest.mark.skipif(
    _bf16_missing() is not None, reason="no BF16 kernels here"))]


@pytest.mark.parametrize("case", DATA["embeddings"], ids=lambda c: c["id"])
def test_embeddings_equal_laya(agents, case):
    got = embed_fn_from_agent(agents(case["checkpoint"]), **case["kwargs"])(case["texts"])
    want = np.asarray(case["vectors"], dtype=np.float64).reshape(case["shape"])
    assert got.dtype == np.float32 and list(got.shape) == case["shape"]
    assert got.shape[1] == case["hidden"]
    scale = np.abs(want).max(initial=1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=F32.atol * scale)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("checkpoint", sorted(PATHS))
def test_every_precision_is_close_to_laya(agents, checkpoint, precision):
    case = next(c for c in DATA["embeddings"] if c["id"] == checkpoint + "_defaults")
    got = embed_fn_from_agent(agents(checkpoint, precision))(case["texts"])
    want = np.asarray(case["vectors"])
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL[precision].atol * scale)


@pytest.mark.parametrize("rec", DATA["cached_agent"], ids=lambda r: r["checkpoint"])
def test_cached_over_the_agent(agents, rec):
    cached = cached_embed_fn(embed_fn_from_agent(agents(rec["checkpoint"]), rec["max_length"]),
                             rec["maxsize"])
    for texts, want in zip(rec["calls"], rec["results"]):
        got = cached(texts)
        np.testing.assert_allclose(got, want, rtol=0, atol=F32.atol * np.abs(want).max())
    assert cached.cache_info() == rec["info"]


def toy(texts: List[str]) -> List[List[float]]:
    """tools/goldens_embed.py's `toy`, the same formula (the golden holds its outputs)."""
    if "boom" in texts:
        raise RuntimeError("boom")
    return [[math.nan, 1.0, math.inf] if t == "nan" else
            [float(len(t)), float(sum(map(ord, t)) % 97), float(t.count("a"))] for t in texts]


def _inner(scenario: Dict[str, Any], log: List[List[str]], dim: Dict[str, int]):
    if scenario["id"].startswith("bad_shape_"):
        def bad(texts: List[str]) -> Any:
            log.append(list(texts))
            n = len(texts)
            return {"n+1": [[0.0, 1.0]] * (n + 1), "1d": [0.0] * n, "n,0": [[]] * n,
                    "0d": 3.0}[scenario["shape"]]
        return bad
    if scenario["id"] == "changed_dim":
        def changing(texts: List[str]) -> Any:
            log.append(list(texts))
            return [[1.0] * dim["dim"] for _ in texts]
        return changing

    def logged(texts: List[str]) -> Any:
        log.append(list(texts))
        return toy(texts)
    return logged


@pytest.mark.parametrize("scenario", DATA["cache"], ids=lambda s: s["id"])
def test_cache_steps_replay(scenario):
    log: List[List[str]] = []
    dim = {"dim": 3}
    cached = cached_embed_fn(_inner(scenario, log, dim), maxsize=scenario["maxsize"])
    for step in scenario["steps"]:
        before = len(log)
        if "set_dim" in step:
            dim["dim"] = step["set_dim"]
        if step.get("clear"):
            cached.cache_clear()
        elif "error" in step:
            with pytest.raises(Exception) as info:
                cached(step["texts"])
            assert [type(info.value).__name__, str(info.value)] == step["error"]
        else:
            got = cached(step["texts"])
            assert list(got.shape) == step["shape"] and str(got.dtype) == step["dtype"]
            assert got.tolist() == step["result"]
        assert cached.cache_info() == step["info"]
        assert log[before:] == step["calls"]


def _target(on: str, agents: Any, router: Router) -> Any:
    return router if on == "router" else agents("tiny")


@pytest.fixture(scope="module")
def router():
    r = Router(models={"english": str(PATHS["tiny"])}, device="cpu")
    yield r
    r.unload()


@pytest.mark.parametrize("case", DATA["refusals"],
                         ids=lambda c: "%s-%s-%s" % (c["fn"], c["about"], c["kwargs"]))
def test_refusals(agents, router, case):
    if case["fn"] == "cached_embed_fn":
        target: Any = toy if "embed_fn" not in case else eval(case["embed_fn"])  # a literal repr
        call = lambda: cached_embed_fn(target, **case["kwargs"])  # noqa: E731
    else:
        call = lambda: embed_fn_from_agent(  # noqa: E731
            _target(case.get("on", "agent"), agents, router), **case["kwargs"])
    with pytest.raises(Exception) as info:
        call()
    assert [type(info.value).__name__, str(info.value)] == case["error"]


def test_the_cache_is_shared_between_threads(agents):
    inner = embed_fn_from_agent(agents("tiny"), max_length=24)
    texts = ["text %d %s" % (i, "x" * (i % 5)) for i in range(40)]
    want = inner(texts)
    cached = cached_embed_fn(inner, maxsize=16)
    errors: List[BaseException] = []

    def worker(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(6):
                pick = rng.choice(len(texts), size=8).tolist()
                got = cached([texts[i] for i in pick])
                assert np.array_equal(got, want[pick])
        except BaseException as e:  # reported below, on the test's thread
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    info = cached.cache_info()
    assert info["hits"] + info["misses"] == 6 * 6 * 8 and info["size"] <= 16
