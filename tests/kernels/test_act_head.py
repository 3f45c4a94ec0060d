"""forward.c's act head, through the `_forward.act_features` and `_forward.act_head` test entries,
against the float64 NumPy references of reference.py, written from Laya's definition
(kime/graph.py, step 6):
`p = softmax(logits)`, `k = max(options, 2)`, features `[top1, top1 - top2,
-sum(p log max(p, 1e-9)) / log k, k / 255]`, then
`softmax(act_head.2(gelu(act_head.0([x[first token], features]))))`.

Cases: one option (top2 is 0), ties, a saturated softmax, up to 300 options, rows without
options; widths 1, odd and large; every ISA this CPU has. Determinism: a row's bits do not
depend on the thread count or on the rows beside it.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kime import graph
from kime._cpu import _forward, _gemm

from ..tolerances import FP32
from . import reference

ISAS = list(range(_gemm.isa_detect() + 1))
def offsets(lengths: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)


def features(logits: np.ndarray, mcu: np.ndarray) -> np.ndarray:
    out = np.full((len(mcu) - 1, 4), np.nan, dtype=np.float32)
    _forward.act_features(logits, mcu, out)
    return out


def random_logits(n: int, seed: int, scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(n) * scale).astype(np.float32)


def test_act_hidden_agrees_with_the_graph():
    assert _forward.ACT_HIDDEN == graph.ACT_HIDDEN
    assert len(graph.ACT_FEATURES) == 4


@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_features_match_float64(scale):
    counts = [1, 2, 3, 4, 7, 8, 9, 31, 64, 255, 300]
    logits = random_logits(sum(counts), seed=int(scale * 10), scale=scale)
    mcu = offsets(counts)
    got = features(logits, mcu)
    for r in range(len(counts)):
        np.testing.assert_allclose(got[r], reference.act_features(logits[mcu[r]:mcu[r + 1]]),
                                   **FP32.act_features.kw, err_msg=f"k={counts[r]}")


def test_features_edge_cases():
    rows = [
        np.array([1.5], np.float32),  # one option: top2 is 0, k counts as 2
        np.array([0.7, 0.7], np.float32),  # a tie: margin 0, entropy 1
        np.full(5, -2.0, np.float32),  # uniform: entropy exactly 1 up to rounding
        np.array([80.0, -80.0, 0.0], np.float32),  # saturated: p clamps at 1e-9 inside log
        np.array([], np.float32),  # no options
        np.array([3.0, 1.0, 3.0, 2.0], np.float32),  # a tie for the top
    ]
    got = features(np.concatenate(rows), offsets([len(r) for r in rows]))
    for r, row in enumerate(rows):
        np.testing.assert_allclose(got[r], reference.act_features(row), **FP32.act_features.kw,
                                   err_msg=f"row {r}: {row}")
    assert got[0, 1] == got[0, 0]  # one option: the margin is top1 itself
    assert got[1, 1] == 0 and got[5, 1] == 0
    np.testing.assert_array_equal(got[4], np.array([0, 0, 0, 2 / 255], np.float32))


def test_features_refuse_bad_offsets():
    logits = random_logits(6, seed=1)
    with pytest.raises(ValueError, match="mcu"):
        features(logits, np.array([0, 3, 5], np.int32))  # does not end at 6
    with pytest.raises(ValueError, match="mcu"):
        features(logits, np.array([0, 4, 3, 6], np.int32))
    with pytest.raises(ValueError, match="out has shape"):
        _forward.act_features(logits, np.array([0, 6], np.int32), np.zeros((2, 4), np.float32))


def make_head(d: int, n_act: int, isa: int, seed: int):
    rng = np.random.default_rng(seed)
    hidden = _forward.ACT_HIDDEN
    w0 = (rng.standard_normal((hidden, d + 4)) / math.sqrt(d + 4)).astype(np.float32)
    b0 = rng.standard_normal(hidden).astype(np.float32)
    w2 = (rng.standard_normal((n_act, hidden)) / 16).astype(np.float32)
    b2 = rng.standard_normal(n_act).astype(np.float32)
    return (w0, b0, w2, b2), (_gemm.pack(w0, isa=isa), b0, _gemm.pack(w2, isa=isa), b2)


def make_batch(d: int, tokens: list[int], options: list[int], seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((sum(tokens), d)).astype(np.float32)
    logits = (rng.standard_normal(sum(options)) * 3).astype(np.float32)
    return x, offsets(tokens), logits, offsets(options)


def run_head(x, cu, logits, mcu, packed, n_act, isa, threads=1) -> np.ndarray:
    act = np.full((len(cu) - 1, n_act), np.nan, dtype=np.float32)
    w0, b0, w2, b2 = packed
    _forward.act_head(x, cu, logits, mcu, w0, b0, w2, b2, act, isa, threads)
    return act


CASES = [(1, 1, [1], [1]), (5, 3, [2, 1, 7], [1, 2, 3]), (64, 3, [9, 30, 1, 4], [4, 1, 0, 2]),
         (67, 5, [3] * 17, [1 + r % 6 for r in range(17)]), (768, 3, [12, 5], [255, 3])]


@pytest.mark.parametrize("isa", ISAS, ids=[_gemm.isa_name(i) for i in ISAS])
@pytest.mark.parametrize("d, n_act, tokens, options", CASES,
                         ids=[f"d{c[0]}-act{c[1]}-rows{len(c[2])}" for c in CASES])
def test_act_head_matches_float64(isa, d, n_act, tokens, options):
    weights, packed = make_head(d, n_act, isa, seed=d)
    x, cu, logits, mcu = make_batch(d, tokens, options, seed=d + 1)
    got = run_head(x, cu, logits, mcu, packed, n_act, isa)
    np.testing.assert_allclose(got, reference.act_head_rows(x, cu, logits, mcu, *weights),
                               **FP32.act_head.kw)
    if n_act == 1:
        np.testing.assert_array_equal(got, 1.0)


def test_act_head_bits_do_not_depend_on_threads_or_batch():
    isa = _gemm.isa_detect()
    d, n_act = 96, 3
    tokens, options = [5, 1, 40, 3, 8, 2, 2, 9], [2, 1, 3, 3, 1, 4, 2, 5]
    _, packed = make_head(d, n_act, isa, seed=3)
    x, cu, logits, mcu = make_batch(d, tokens, options, seed=4)
    whole = run_head(x, cu, logits, mcu, packed, n_act, isa, threads=1)
    np.testing.assert_array_equal(run_head(x, cu, logits, mcu, packed, n_act, isa, threads=3),
                                  whole)
    for r in range(len(tokens)):
        alone = run_head(x[cu[r]:cu[r + 1]], offsets([tokens[r]]), logits[mcu[r]:mcu[r + 1]],
                         offsets([options[r]]), packed, n_act, isa)
        np.testing.assert_array_equal(alone[0], whole[r], err_msg=f"row {r}")


def test_act_head_refuses_what_does_not_fit():
    isa = _gemm.isa_detect()
    _, packed = make_head(8, 3, isa, seed=5)
    x, cu, logits, mcu = make_batch(8, [2, 3], [1, 2], seed=6)
    with pytest.raises(ValueError, match="w0"):
        run_head(x[:, :7].copy(), cu, logits, mcu, packed, 3, isa)
    with pytest.raises(ValueError, match="w2"):
        run_head(x, cu, logits, mcu, packed, 4, isa)
    with pytest.raises(ValueError, match="first token"):
        run_head(x, np.array([0, 0, 5], np.int32), logits, mcu, packed, 3, isa)
    with pytest.raises(ValueError, match="cu"):
        run_head(x, np.array([0, 2, 4], np.int32), logits, mcu, packed, 3, isa)
    with pytest.raises(ValueError, match="isa"):
        run_head(x, cu, logits, mcu, packed, 3, _gemm.isa_detect() + 1)
