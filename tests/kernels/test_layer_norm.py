"""forward.c's LayerNorm (`norm_row`, through the `_forward.layer_norm` test entry) against a
float64 NumPy reference: the norm every LayerNorm of the compiled forward pass runs (embedding,
encoder, final, decision head, scorer).

Widths cover 1, every tail of the kernel's eight interleaved partial sums, odd and large widths;
rows cover none, one and a bucket's worth. Determinism: a row's bits do not depend on the thread
count or on the rows beside it, and rows past the batch are never written.
"""
from __future__ import annotations

import numpy as np
import pytest

from kime._cpu import _forward

from ..tolerances import FP32
from . import reference

SHAPES = [(1, 1), (1, 7), (3, 8), (5, 9), (7, 13), (2, 17), (33, 65), (128, 96), (4, 768),
          (3, 1031), (576, 64)]
EPS = [1e-5, 1e-6, 1e-12, 0.1]
SENTINEL = np.float32(12345.0)


def random_rows(shape: tuple[int, ...], seed: int, scale: float = 3.0,
                offset: float = 0.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(shape) * scale + offset).astype(np.float32)


def normed(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float = 1e-5,
           threads: int = 1) -> np.ndarray:
    out = np.full_like(x, np.nan)
    _forward.layer_norm(x, weight, bias, eps, out, threads)
    return out


@pytest.mark.parametrize("shape", SHAPES, ids=[f"{n}x{d}" for n, d in SHAPES])
@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_matches_float64(shape, with_bias):
    for seed, eps in enumerate(EPS):
        x = random_rows(shape, seed=seed, offset=2.0)
        weight = random_rows((shape[1],), seed=100 + seed, scale=1.0)
        bias = random_rows((shape[1],), seed=200 + seed, scale=1.0) if with_bias else None
        np.testing.assert_allclose(normed(x, weight, bias, eps),
                                   reference.layer_norm(x, weight, bias, eps),
                                   **FP32.layer_norm.kw, err_msg=f"eps={eps}")


def test_every_partial_sum_tail():
    """Widths 1..40 leave every remainder of the eight partial sums, with a large mean (the
    statistics are doubles, so the centring loses nothing)."""
    for d in range(1, 41):
        x = random_rows((3, d), seed=d, offset=100.0)
        weight = random_rows((d,), seed=1000 + d, scale=1.0)
        bias = random_rows((d,), seed=2000 + d, scale=1.0)
        np.testing.assert_allclose(normed(x, weight, bias),
                                   reference.layer_norm(x, weight, bias, 1e-5),
                                   **FP32.layer_norm.kw, err_msg=f"d={d}")


def test_no_rows():
    x = np.empty((0, 8), dtype=np.float32)
    _forward.layer_norm(x, np.ones(8, np.float32), None, 1e-5, np.empty_like(x))


def test_width_one_is_the_bias():
    # One column: x - mean is exactly zero, so every output is the bias.
    x = random_rows((5, 1), seed=3)
    bias = np.array([0.25], dtype=np.float32)
    np.testing.assert_array_equal(normed(x, np.full(1, 2.0, np.float32), bias),
                                  np.full((5, 1), 0.25, np.float32))


def test_constant_row_is_bias():
    # Zero variance: eps keeps it finite and the normalised row is exactly zero.
    x = np.full((2, 9), 4.0, dtype=np.float32)
    bias = np.arange(9, dtype=np.float32)
    np.testing.assert_array_equal(normed(x, np.ones(9, np.float32), bias),
                                  np.broadcast_to(bias, x.shape))


@pytest.mark.parametrize("with_bias", [False, True], ids=["no-bias", "bias"])
def test_in_place(with_bias):
    """The final norm runs in place (y == x)."""
    x = random_rows((33, 65), seed=7)
    weight = random_rows((65,), seed=8)
    bias = random_rows((65,), seed=9) if with_bias else None
    expected = normed(x, weight, bias)
    _forward.layer_norm(x, weight, bias, 1e-5, x)
    np.testing.assert_array_equal(x, expected)


def test_rows_past_the_batch_are_untouched():
    x = random_rows((13, 96), seed=10)
    weight = random_rows((96,), seed=11)
    buffer = np.full((16, 96), SENTINEL, dtype=np.float32)
    _forward.layer_norm(x, weight, None, 1e-5, buffer[:13])
    assert (buffer[13:] == SENTINEL).all()
    np.testing.assert_array_equal(buffer[:13], normed(x, weight, None))


@pytest.mark.parametrize("shape", [(1, 96), (7, 14), (128, 96), (257, 64)])
def test_thread_count_does_not_change_bits(shape):
    x = random_rows(shape, seed=12)
    weight = random_rows((shape[1],), seed=13)
    bias = random_rows((shape[1],), seed=14)
    np.testing.assert_array_equal(normed(x, weight, bias, threads=1),
                                  normed(x, weight, bias, threads=3))


def test_row_bits_do_not_depend_on_batch():
    x = random_rows((64, 96), seed=15)
    weight = random_rows((96,), seed=16)
    whole = normed(x, weight, None, threads=2)
    for r in (0, 37, 63):
        np.testing.assert_array_equal(normed(x[r:r + 1], weight, None)[0], whole[r])


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_row_of_a_short_batch_has_its_own_bits(threads):
    """Every row of batches of 1 to 13 rows, split over 1-3 threads (so every chunk boundary
    the pool draws), has the bits it has alone: widths with and without a tail of the partial
    sums, in place too."""
    for d in (8, 13, 96):
        x = random_rows((13, d), seed=20 + d, offset=1.0)
        weight = random_rows((d,), seed=21 + d)
        bias = random_rows((d,), seed=22 + d)
        alone = np.concatenate([normed(x[r:r + 1], weight, bias) for r in range(13)])
        for n in range(1, 14):
            np.testing.assert_array_equal(normed(x[:n], weight, bias, threads=threads),
                                          alone[:n], err_msg=f"{n} rows of {d}")
            inplace = x[:n].copy()
            _forward.layer_norm(inplace, weight, bias, 1e-5, inplace, threads)
            np.testing.assert_array_equal(inplace, alone[:n], err_msg=f"in place, {n} of {d}")


def test_shape_mismatches_raise():
    x = np.zeros((4, 6), dtype=np.float32)
    weight = np.ones(6, dtype=np.float32)
    with pytest.raises(ValueError, match="weight has 5"):
        _forward.layer_norm(x, np.ones(5, np.float32), None, 1e-5, np.zeros_like(x))
    with pytest.raises(ValueError, match="bias has 7"):
        _forward.layer_norm(x, weight, np.ones(7, np.float32), 1e-5, np.zeros_like(x))
    with pytest.raises(ValueError, match="out has shape"):
        _forward.layer_norm(x, weight, None, 1e-5, np.zeros((4, 7), np.float32))
    with pytest.raises(ValueError, match="at least one column"):
        _forward.layer_norm(np.zeros((2, 0), np.float32), np.ones(0, np.float32), None, 1e-5,
                            np.zeros((2, 0), np.float32))
    with pytest.raises(ValueError, match="threads"):
        _forward.layer_norm(x, weight, None, 1e-5, np.zeros_like(x), 0)


def test_wrong_dtype_or_layout_is_refused():
    # Cython's buffer check raises ValueError for both; no silent copy or cast.
    weight = np.ones(4, dtype=np.float32)
    with pytest.raises(ValueError):
        _forward.layer_norm(np.zeros((2, 4), np.float64), weight, None, 1e-5,
                            np.zeros((2, 4), np.float32))
    strided = np.zeros((4, 8), dtype=np.float32)[:, ::2]
    with pytest.raises(ValueError):
        _forward.layer_norm(strided, weight, None, 1e-5, np.zeros((4, 4), np.float32))


def test_every_isa_path_gives_the_same_bits(monkeypatch):
    """The AVX-512 and AVX2 rows repeat the baseline row's arithmetic lane for lane, so a
    model's norms give the same bits whichever path this CPU takes (in place included)."""
    cases = []
    for i, (n, d) in enumerate(SHAPES + [(2, d) for d in range(1, 41)]):
        x = random_rows((n, d), seed=300 + i, offset=[0.0, 2.0, 100.0][i % 3])
        weight = random_rows((d,), seed=400 + i, scale=1.0)
        bias = random_rows((d,), seed=500 + i, scale=1.0) if i % 2 else None
        cases.append((x, weight, bias, EPS[i % len(EPS)]))
    outs = {}
    # this architecture's level names (x86: portable avx2 avx512; aarch64: portable neon ... bf16)
    names = [n for n in map(_forward.isa_name, range(8)) if n != "unknown"]
    for isa in names:
        monkeypatch.setenv("KIME_ISA", isa)
        if _forward.isa_name(_forward.isa_detect()) != isa:
            continue
        got = [normed(x, w, b, eps) for x, w, b, eps in cases]
        inplace = cases[8][0].copy()
        _forward.layer_norm(inplace, cases[8][1], cases[8][2], cases[8][3], inplace)
        outs[isa] = got + [inplace]
    if len(outs) < 2:
        pytest.skip("this CPU has only the portable path")
    for isa, got in outs.items():
        for k, (a, b) in enumerate(zip(got, outs["portable"])):
            np.testing.assert_array_equal(a, b, err_msg=f"{isa}, case {k}")
