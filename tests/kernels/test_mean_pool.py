"""forward.c's embedding pooling (`kime_mean_pool`, through the `_forward.mean_pool` test entry)
against a float64 NumPy reference: each row's mean over its tokens of the last hidden state, the
vector `Kime.embed` returns.

Random shapes cover widths across the kernel's 64-column chunks and their tails, rows of one
token, empty rows (zeros, as Laya's clamped count gives) and a bucket's worth of rows. A row's
bits do not depend on the thread count or on the rows beside it.
"""
from __future__ import annotations

import numpy as np
import pytest

from kime._cpu import _forward

from ..tolerances import Tol
from . import reference

POOL = Tol(2.0 ** -23, 1e-7, "the sum in double, one float32 rounding of the mean (rtol); the "
           "mean of values that cancel is bounded by their magnitude's rounding (atol)")


def pooled(x: np.ndarray, cu: np.ndarray, threads: int = 1) -> np.ndarray:
    out = np.full((len(cu) - 1, x.shape[1]), np.nan, dtype=np.float32)
    _forward.mean_pool(x, cu, out, threads)
    return out


def random_batch(seed: int):
    rng = np.random.default_rng(seed)
    d = int(rng.choice([1, 3, 63, 64, 65, 128, 200, 768]))
    lengths = rng.integers(0, 90, size=int(rng.integers(1, 12)))
    if seed % 3 == 0:
        lengths[0] = 0  # an empty row
    cu = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=cu[1:])
    x = (rng.standard_normal((int(cu[-1]), d)) * 4 + rng.normal()).astype(np.float32)
    return x, cu


@pytest.mark.parametrize("seed", range(24))
def test_matches_float64(seed):
    x, cu = random_batch(seed)
    want = reference.mean_pool_rows(x, cu)
    scale = np.abs(x).max(initial=1.0)
    np.testing.assert_allclose(pooled(x, cu), want, rtol=POOL.rtol, atol=POOL.atol * scale)


@pytest.mark.parametrize("seed", range(6))
def test_bits_do_not_depend_on_threads_or_neighbours(seed):
    x, cu = random_batch(seed + 100)
    together = pooled(x, cu)
    assert np.array_equal(together, pooled(x, cu, threads=3))
    for r in range(len(cu) - 1):
        a, b = int(cu[r]), int(cu[r + 1])
        alone = pooled(np.ascontiguousarray(x[a:b]), np.array([0, b - a], dtype=np.int32))
        assert np.array_equal(alone[0], together[r])


def test_an_empty_row_is_zeros():
    x = np.ones((4, 5), dtype=np.float32)
    out = pooled(x, np.array([0, 0, 4, 4], dtype=np.int32))
    assert np.array_equal(out[0], np.zeros(5)) and np.array_equal(out[2], np.zeros(5))
    assert np.array_equal(out[1], np.ones(5))


def test_refusals():
    x = np.ones((4, 5), dtype=np.float32)
    with pytest.raises(ValueError, match="cu must run from 0 to 4"):
        pooled(x, np.array([0, 3], dtype=np.int32))
    with pytest.raises(ValueError, match="cu must not decrease"):
        pooled(x, np.array([0, 3, 2, 4], dtype=np.int32))
    with pytest.raises(ValueError, match=r"mean_pool: out has shape \(1, 4\), expected \(1, 5\)"):
        _forward.mean_pool(x, np.array([0, 4], dtype=np.int32),
                           np.zeros((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="threads must be at least 1"):
        pooled(x, np.array([0, 4], dtype=np.int32), threads=0)
