"""The answer cache and the token cache: a hit is exactly a miss's answer, both are bounded and
counted, and both can be switched off per call and per engine."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

import kime
from kime.cache import LRU
from kime.laya import wire

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"],
             "option_order": [1, 0]},
    "spam": {"type": "noul", "instructions": "Is it spam?"},
}


def _engine(path, **kw) -> kime.Kime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.Kime(str(path), device="cpu", threads=1, **kw)


def test_lru_bounds_counts_and_evicts():
    cache: LRU[int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now the most recent
    cache.put("c", 3)  # evicts b
    assert cache.get("b") is None and cache.get("c") == 3 and len(cache) == 2
    assert cache.stats()["hits"] == 2 and cache.stats()["misses"] == 1
    off: LRU[int] = LRU(0)
    off.put("a", 1)
    assert off.get("a") is None and len(off) == 0
    with pytest.raises(ValueError):
        LRU(-1)


def test_hit_is_the_same_answer_as_a_miss(tiny_path):
    engine = _engine(tiny_path)
    req = {"state": "I was charged twice.", "questions": QUESTIONS}
    miss = engine.decide(req)
    hit = engine.decide(req)
    stats = engine.cache_stats()
    assert stats["answers"]["hits"] == 2 and stats["answers"]["misses"] == 2
    assert stats["tokens"]["hits"] == 2
    for qid in QUESTIONS:
        assert hit[qid].logits.tobytes() == miss[qid].logits.tobytes()
        assert hit[qid].act.tobytes() == miss[qid].act.tobytes()
    assert wire.result(hit) == wire.result(miss)
    # A caller mutating its answer never reaches the cache.
    hit["team"].logits[:] = 0
    assert engine.decide(req)["team"].logits.tobytes() == miss["team"].logits.tobytes()
    # Another state is another row: a miss.
    engine.decide({"state": "Something else.", "questions": QUESTIONS})
    assert engine.cache_stats()["answers"]["misses"] == 4


def test_switched_off_per_call_and_per_engine(tiny_path):
    engine = _engine(tiny_path)
    req = {"state": "Refund please.", "questions": QUESTIONS}
    first = engine.decide(req, cache=False)
    engine.decide(req, cache=False)
    stats = engine.cache_stats()["answers"]
    assert stats["hits"] == 0 and stats["size"] == 0
    _, timing = engine.decide_batch_timed([req], cache=False)
    assert timing.batches == 1
    off = _engine(tiny_path, answer_cache=0, token_cache=0)
    a, b = off.decide(req), off.decide(req)
    assert off.cache_stats()["answers"]["size"] == 0 and off.cache_stats()["tokens"]["size"] == 0
    for qid in QUESTIONS:
        np.testing.assert_array_equal(a[qid].logits, first[qid].logits)
        np.testing.assert_array_equal(b[qid].logits, first[qid].logits)


def test_answer_cache_is_bounded(tiny_path):
    engine = _engine(tiny_path, answer_cache=3)
    for i in range(5):
        engine.decide({"state": "state %d" % i, "questions": QUESTIONS})
    assert engine.cache_stats()["answers"]["size"] == 3
