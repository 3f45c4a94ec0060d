"""kime._cpu._attention (csrc/attention.c) against reference.py (float64) and the oracle.

The float64 references loop per row and per head and build the full score matrix, so they share
nothing with the kernel's blocked online softmax. Every path (portable, AVX2, AVX-512) the CPU has
is forced in turn through KIME_ISA (on aarch64: portable, neon, dotprod, i8mm, bf16).
"""
from __future__ import annotations

import numpy as np
import pytest

from kime._cpu import _attention
from kime._cpu import reference as oracle

from ..tolerances import FP32
from . import reference

WINDOWS = [0, 1, 4, 64, 1000, -1]
pytestmark = pytest.mark.usefixtures("one_blas_thread")


def bounds(lens) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)


def random_qkv(lens, H: int, hd: int, seed: int, scale: float = 1.5) -> np.ndarray:
    # Scores have standard deviation scale**2: 1.5 spreads them over several units, so the
    # softmax is far from uniform.
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((int(sum(lens)), 3 * H * hd)) * scale).astype(np.float32)


def tables(n: int, hd: int, theta: float = 10000.0):
    cos, sin = oracle.rope_tables(n, hd, theta)
    return np.ascontiguousarray(cos[:, :hd // 2]), np.ascontiguousarray(sin[:, :hd // 2])


@pytest.mark.parametrize("hd", [16, 24, 32, 64])
@pytest.mark.parametrize("half_window", WINDOWS)
def test_attention_mixed_rows(isa, hd, half_window):
    lens, H = [1, 7, 33, 129, 512, 2], 2
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=hd + half_window)
    out = _attention.attention(qkv, cu, H, hd, half_window)
    np.testing.assert_allclose(out, reference.attention_rows(qkv, cu, H, hd, half_window),
                               **FP32.attention.kw)


@pytest.mark.parametrize("seed", range(8))
def test_attention_random_shapes(isa, seed):
    rng = np.random.default_rng(seed)
    H, hd = int(rng.integers(1, 17)), int(rng.choice([16, 24, 32, 64]))
    lens = [int(n) for n in rng.integers(1, 150, size=int(rng.integers(1, 6)))]
    half_window = int(rng.choice(WINDOWS + [max(lens) - 1, max(lens) - 2]))
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed)
    out = _attention.attention(qkv, cu, H, hd, half_window)
    np.testing.assert_allclose(out, reference.attention_rows(qkv, cu, H, hd, half_window),
                               **FP32.attention.kw)


@pytest.mark.parametrize("hd", [2, 7, 128])
def test_attention_any_head_dim(isa, hd):
    lens, H = [1, 37, 70], 3
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=hd)
    for half_window in (-1, 3):
        out = _attention.attention(qkv, cu, H, hd, half_window)
        np.testing.assert_allclose(out, reference.attention_rows(qkv, cu, H, hd, half_window),
                               **FP32.attention.kw)


@pytest.mark.parametrize("half_window", [-1, 5])
def test_attention_sharp_softmax_as_accurate_as_oracle(isa, half_window):
    """Scores with a standard deviation of 36 (most weights underflow FP32): FP32 itself limits the
    accuracy, so the kernel must do as well as the FP32 oracle, not meet FP32.attention."""
    n, H, hd = 200, 4, 64
    qkv = random_qkv([n], H, hd, seed=1, scale=6.0)
    expected = reference.attention_rows(qkv, bounds([n]), H, hd, half_window)
    q, k, v = qkv.reshape(n, 3, H, hd).transpose(1, 2, 0, 3)
    fp32 = oracle.attention(q, k, v, None if half_window < 0 else half_window)
    error = np.abs(_attention.attention(qkv, bounds([n]), H, hd, half_window) - expected).max()
    assert error <= 1.5 * np.abs(fp32 - expected).max()


def test_attention_strided_out_and_empty_rows(isa):
    lens, H, hd = [0, 5, 0, 40, 0], 3, 16
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=3)
    buffer = np.full((qkv.shape[0], H * hd + 7), np.nan, dtype=np.float32)
    out = _attention.attention(qkv, cu, H, hd, 4, out=buffer[:, 3:3 + H * hd])
    np.testing.assert_allclose(out, reference.attention_rows(qkv, cu, H, hd, 4),
                               **FP32.attention.kw)
    assert np.isnan(buffer[:, :3]).all() and np.isnan(buffer[:, 3 + H * hd:]).all()


def test_attention_no_rows():
    out = _attention.attention(np.zeros((0, 48), np.float32), bounds([]), 1, 16, -1)
    assert out.shape == (0, 16)


@pytest.mark.parametrize("half_window", [-1, 4, 64])
def test_attention_bits_independent_of_threads_and_batch(isa, half_window):
    H, hd = 4, 64
    lens = [33, 512, 7, 300]
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=11)
    one = _attention.attention(qkv, cu, H, hd, half_window, threads=1)
    np.testing.assert_array_equal(_attention.attention(qkv, cu, H, hd, half_window, threads=2), one)
    np.testing.assert_array_equal(_attention.attention(qkv, cu, H, hd, half_window, threads=3), one)
    for r in (1, 3):  # the same row alone
        a, b = cu[r], cu[r + 1]
        alone = _attention.attention(np.ascontiguousarray(qkv[a:b]), bounds([b - a]), H, hd,
                                     half_window, threads=2)
        np.testing.assert_array_equal(alone, one[a:b])


@pytest.mark.parametrize("seed", range(4))
def test_attention_some_gives_the_full_attention_bits(isa, seed):
    """The decision head's last layer attends for a row's first token and markers only: each
    chosen query must get exactly the bits the full attention gives its token, at any thread
    count, a query taken twice or in any order included."""
    rng = np.random.default_rng(100 + seed)
    H, hd = int(rng.integers(1, 5)), int(rng.choice([16, 24, 64]))
    lens = [int(n) for n in rng.integers(1, 200, size=int(rng.integers(1, 5)))]
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=seed)
    full = _attention.attention(qkv, cu, H, hd, -1, threads=1)
    picks = [cu[r] + rng.integers(0, n, size=int(rng.integers(1, 40))) for r, n in enumerate(lens)]
    tokens = np.concatenate(picks)
    qcu = bounds([len(p) for p in picks])
    q = np.ascontiguousarray(qkv[tokens, :H * hd])
    for threads in (1, 2, 3):
        got = _attention.attention_some(q, qcu, qkv, cu, H, hd, threads=threads)
        np.testing.assert_array_equal(got, full[tokens])
    ref = reference.attention_rows(qkv, cu, H, hd, -1)[tokens]
    np.testing.assert_allclose(got, ref, **FP32.attention.kw)


def test_attention_some_rejects_bad_offsets():
    lens, H, hd = [5, 3], 2, 16
    qkv = random_qkv(lens, H, hd, seed=0)
    q = np.zeros((4, H * hd), np.float32)
    with pytest.raises(ValueError, match="qcu must have 3 entries"):
        _attention.attention_some(q, np.array([0, 4], np.int32), qkv, bounds(lens), H, hd)
    with pytest.raises(ValueError, match="must not decrease"):
        _attention.attention_some(q, np.array([0, 5, 4], np.int32), qkv, bounds(lens), H, hd)
    with pytest.raises(ValueError, match="row 1 has queries but no keys"):
        _attention.attention_some(q, np.array([0, 2, 4], np.int32), qkv[:5], bounds([5, 0]), H, hd)


def test_rope_matches_reference():
    lens, H, hd = [1, 7, 129, 0, 33], 3, 24
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=5)
    cos, sin = tables(200, hd)
    expected = reference.rope_rows(qkv, cu, H, hd, cos, sin)
    for threads in (1, 2):
        x = qkv.copy()
        _attention.rope(x, cu, H, hd, cos, sin, threads=threads)
        np.testing.assert_allclose(x, expected, **FP32.rope.kw)
        np.testing.assert_array_equal(x[:, 2 * H * hd:], qkv[:, 2 * H * hd:])  # v untouched


@pytest.mark.parametrize("hd,half_window,theta", [(64, -1, 160000.0), (64, 64, 10000.0),
                                                  (16, 4, 10000.0), (32, 1000, 10000.0)])
def test_matches_model_oracle(isa, hd, half_window, theta):
    """kime's rope + attention against the oracle's apply_rope + attention, row by row."""
    lens, H = [129, 1, 300], 3
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=hd)
    cos, sin = tables(512, hd, theta)
    x = qkv.copy()
    _attention.rope(x, cu, H, hd, cos, sin)
    out = _attention.attention(x, cu, H, hd, half_window)
    for a, b in zip(cu[:-1], cu[1:]):
        n = b - a
        q, k, v = qkv[a:b].reshape(n, 3, H, hd).transpose(1, 2, 0, 3)
        full_cos, full_sin = oracle.rope_tables(n, hd, theta)
        q, k = (oracle.apply_rope(part, full_cos, full_sin) for part in (q, k))
        roped = np.concatenate([q, k]).transpose(1, 0, 2).reshape(n, 2 * H * hd)
        np.testing.assert_allclose(x[a:b, :2 * H * hd], roped, **FP32.rope.kw)
        expected = oracle.attention(q, k, v, None if half_window < 0 else half_window)
        np.testing.assert_allclose(out[a:b], expected, **FP32.attention.kw)


def test_rejects_bad_arguments():
    qkv = np.zeros((10, 3 * 2 * 16), np.float32)
    with pytest.raises(ValueError, match="columns"):
        _attention.attention(qkv, bounds([10]), 2, 32, -1)
    with pytest.raises(ValueError, match="end at"):
        _attention.attention(qkv, bounds([11]), 2, 16, -1)
    with pytest.raises(ValueError, match="decrease"):
        _attention.attention(qkv, np.array([0, 6, 4, 10], np.int32), 2, 16, -1)
    with pytest.raises(ValueError, match="threads"):
        _attention.attention(qkv, bounds([10]), 2, 16, -1, threads=0)
    with pytest.raises(ValueError, match="out must be"):
        _attention.attention(qkv, bounds([10]), 2, 16, -1, out=np.zeros((10, 31), np.float32))
    cos, sin = tables(4, 16)
    with pytest.raises(ValueError, match="tables"):
        _attention.rope(qkv, bounds([10]), 2, 16, cos, sin)
