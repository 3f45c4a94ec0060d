"""BF16 attention (kernels.h's KIME_ATTN_BF16, csrc/attention_bf16.h) against float64 on its own
rounded operands (reference.py's `attention_rows_bf16`), and its one set of bits.

The reference rounds what the kernel rounds (the scaled queries, the keys and the values) and
computes the rest in float64; the one rounding it leaves out, each probability's to bfloat16, is
bounded by BF16.attention_probs times the probability-weighted mean |v|. Every ISA level the CPU
has is forced in turn (levels.py's ISAS): AVX-512 runs vdpbf16ps where the CPU has
AVX512_BF16 and FMAs that give its bits elsewhere, so every SIMD level must give the same bits;
the portable C level gives its own. Where the CPU has AMX-BF16, its own level uncapped ("amx")
runs the products on AMX tiles for head dims of a multiple of 32: AMX's own bits, held to the
same reference (its queries and probabilities in two terms: 32 times tighter) and the same
independence of threads and batch. Rows of 0, 1, odd and many tokens, head dims odd and even,
windows, the parallel layout, and a full bucket (8 rows of 512: 4096 tokens).
"""
from __future__ import annotations

import os
import platform

import numpy as np
import pytest

from kime._cpu import _attention

from ..tolerances import BF16
from . import reference
from .levels import ISAS
from .test_attention import bounds, random_qkv
from .test_attention_parallel import parallel_batch

SIMD = [level for level in ISAS if level != "portable"]
X86 = platform.machine().lower() in ("x86_64", "amd64")


@pytest.fixture(params=ISAS + (["amx"] if X86 else []))
def isa(request, monkeypatch):
    """conftest.py's levels, forced through KIME_ISA, and on x86 "amx": the CPU's own level,
    uncapped, where the products run on AMX tiles (skipped where this process has none)."""
    if request.param != "amx":
        monkeypatch.setenv("KIME_ISA", request.param)
        if _attention.isa() != request.param:
            pytest.skip(f"this CPU has no {request.param}")
        return request.param
    monkeypatch.delenv("KIME_ISA", raising=False)
    monkeypatch.delenv("KIME_BGEMM", raising=False)
    if _attention.bf16_kernels() != "amx-bf16":
        pytest.skip("no AMX-BF16 that this process may use")
    return "amx"


pytestmark = pytest.mark.usefixtures("one_blas_thread")


def bf16_attention(qkv, cu, H, hd, w, **kw):
    return _attention.attention(qkv, cu, H, hd, w, precision="bf16", **kw)


def amx_runs(hd: int) -> bool:
    """Whether a call now runs on AMX tiles, with its two-term queries and probabilities."""
    return _attention.bf16_kernels() == "amx-bf16" and hd % 32 == 0


def check(got, qkv, cu, H, hd, w, positions=None, option_ids=None):
    two = amx_runs(hd)
    want, mag = reference.attention_rows_bf16(qkv, cu, H, hd, w, positions, option_ids, two)
    probs = BF16.attention_probs_two_terms if two else BF16.attention_probs
    bound = (BF16.attention.atol + BF16.attention.rtol * np.abs(want) + probs.atol * mag)
    excess = np.abs(got - want) - bound
    assert excess.max(initial=-1.0) <= 0, (
        "worst at %s: got %r, want %r, bound %r" % (
            np.unravel_index(excess.argmax(), excess.shape), got.flat[excess.argmax()],
            want.flat[excess.argmax()], bound.flat[excess.argmax()]))


@pytest.mark.parametrize("hd", [2, 7, 16, 24, 64, 128])
@pytest.mark.parametrize("half_window", [0, 1, 4, 64, -1])
def test_matches_float64_on_its_rounded_operands(isa, hd, half_window):
    lens, H = [1, 7, 0, 33, 129, 2, 65], 2
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=hd * 10 + half_window)
    check(bf16_attention(qkv, cu, H, hd, half_window, threads=2), qkv, cu, H, hd, half_window)


@pytest.mark.parametrize("seed", range(6))
def test_random_shapes(isa, seed):
    rng = np.random.default_rng(500 + seed)
    H, hd = int(rng.integers(1, 13)), int(rng.choice([3, 16, 24, 32, 64]))
    lens = [int(n) for n in rng.integers(0, 300, size=int(rng.integers(1, 6)))]
    half_window = int(rng.choice([0, 3, 64, max(lens) - 2, -1]))
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed)
    got = bf16_attention(qkv, cu, H, hd, half_window, threads=int(rng.integers(1, 4)))
    check(got, qkv, cu, H, hd, half_window)


@pytest.mark.parametrize("seed", range(4))
def test_parallel_layout(isa, seed):
    rng = np.random.default_rng(700 + seed)
    H, hd = int(rng.integers(1, 5)), int(rng.choice([16, 24, 64]))
    lens, pos, opt = parallel_batch(seed, int(rng.integers(1, 4)))
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed)
    for half_window in (8, -1):
        got = bf16_attention(qkv, cu, H, hd, half_window, threads=2, positions=pos,
                             option_ids=opt)
        check(got, qkv, cu, H, hd, half_window, pos, opt)


@pytest.mark.slow  # a full bucket against float64: about 2 s per level
@pytest.mark.parametrize("half_window", [64, -1])
def test_a_full_bucket(isa, half_window):
    """8 rows of 512 tokens: the largest bucket (kime.buckets), as W3's batches fill it."""
    lens, H, hd = [512] * 8, 2, 64
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=8)
    check(bf16_attention(qkv, cu, H, hd, half_window, threads=2), qkv, cu, H, hd, half_window)


def test_empty_and_single_rows(isa):
    assert bf16_attention(np.zeros((0, 48), np.float32), bounds([]), 1, 16, -1).shape == (0, 16)
    lens, H, hd = [0, 1, 0, 1], 3, 16
    qkv = random_qkv(lens, H, hd, seed=4)
    got = bf16_attention(qkv, bounds(lens), H, hd, -1)
    # one key: its own value, rounded to bfloat16
    np.testing.assert_array_equal(got, reference.bf16(qkv[:, 2 * H * hd:]))


def test_really_rounds(isa):
    """Not FP32 under another name: the bits differ from FP32's, and the rounded reference
    explains the output where the unrounded one cannot."""
    lens, H, hd = [150, 40], 4, 64
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=9)
    got = bf16_attention(qkv, cu, H, hd, -1)
    assert got.tobytes() != _attention.attention(qkv, cu, H, hd, -1).tobytes()
    check(got, qkv, cu, H, hd, -1)
    exact = reference.attention_rows(qkv, cu, H, hd, -1)
    _, mag = reference.attention_rows_bf16(qkv, cu, H, hd, -1)
    assert (np.abs(got - exact) > BF16.attention_probs.atol * mag + 1e-5).any()


@pytest.mark.parametrize("half_window", [-1, 4, 64])
def test_bits_independent_of_threads_and_batch(isa, half_window):
    H, hd = 4, 64
    lens = [33, 512, 7, 300, 1]
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=11)
    one = bf16_attention(qkv, cu, H, hd, half_window, threads=1)
    for threads in (2, 3):
        np.testing.assert_array_equal(bf16_attention(qkv, cu, H, hd, half_window,
                                                     threads=threads), one)
    for r in (1, 2, 4):  # the same row alone: its pairs start afresh, at its first token
        a, b = cu[r], cu[r + 1]
        alone = bf16_attention(np.ascontiguousarray(qkv[a:b]), bounds([b - a]), H, hd,
                               half_window, threads=2)
        np.testing.assert_array_equal(alone, one[a:b])


@pytest.mark.parametrize("seed", range(3))
def test_attention_some_gives_the_full_attention_bits(isa, seed):
    rng = np.random.default_rng(900 + seed)
    H, hd = int(rng.integers(1, 5)), int(rng.choice([16, 24, 64]))
    lens = [int(n) for n in rng.integers(1, 200, size=int(rng.integers(1, 5)))]
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=seed)
    full = bf16_attention(qkv, cu, H, hd, -1, threads=1)
    picks = [cu[r] + rng.integers(0, n, size=int(rng.integers(1, 30))) for r, n in enumerate(lens)]
    tokens = np.concatenate(picks)
    q = np.ascontiguousarray(qkv[tokens, :H * hd])
    for threads in (1, 3):
        got = _attention.attention_some(q, bounds([len(p) for p in picks]), qkv, cu, H, hd,
                                        threads=threads, precision="bf16")
        np.testing.assert_array_equal(got, full[tokens])


@pytest.mark.skipif(len(SIMD) < 2, reason="one SIMD level here")
def test_every_simd_level_gives_the_same_bits(monkeypatch):
    """vdpbf16ps where the CPU has it, the FMA emulation elsewhere: one set of bits, so the INT8
    model, which runs this attention, keeps its bits across levels (test_output_bits.py)."""
    rng = np.random.default_rng(3)
    lens, pos, opt = parallel_batch(3, 3)
    cases = []
    for hd in (3, 16, 64, 128):
        H = 2
        seq = [0, 1, 31, 33, 200]
        cases.append((random_qkv(seq, H, hd, seed=hd), bounds(seq), H, hd, int(rng.choice([5, -1])),
                      None, None))
        cases.append((random_qkv(lens, H, hd, seed=hd + 1), bounds(lens), H, hd, 8, pos, opt))
    runs = {}
    for level in SIMD:
        monkeypatch.setenv("KIME_ISA", level)
        runs[level] = [bf16_attention(qkv, cu, H, hd, w, threads=2, positions=p, option_ids=o)
                       for qkv, cu, H, hd, w, p, o in cases]
    first = runs[SIMD[0]]
    for level, outs in runs.items():
        for a, b in zip(first, outs):
            np.testing.assert_array_equal(a, b, err_msg="%s against %s" % (level, SIMD[0]))


def test_kernels_named():
    names = {"portable": "c", "avx2": "avx2 fma", "neon": "neon fma"}
    if platform.machine().lower() in ("aarch64", "arm64") or "KIME_ISA" in os.environ:
        assert _attention.bf16_kernels() in ("c", "avx2 fma", "neon fma", "vdpbf16ps")
        return
    assert _attention.bf16_kernels() in ("amx-bf16", "vdpbf16ps",
                                         names.get(_attention.isa(), "avx2 fma"))


def test_amx_runs_its_own_bits_where_it_may_and_only_there(monkeypatch):
    """Uncapped on an AMX CPU, head dims of a multiple of 32 take the tiles: other bits than
    vdpbf16ps's (which KIME_BGEMM=avx512bf16 and a named KIME_ISA=avx512 run), each within the
    reference; other head dims run vdpbf16ps's bits."""
    monkeypatch.delenv("KIME_ISA", raising=False)
    monkeypatch.delenv("KIME_BGEMM", raising=False)
    if _attention.bf16_kernels() != "amx-bf16":
        pytest.skip("no AMX-BF16 that this process may use")
    lens, H = [150, 40, 3], 2
    for hd, tiles in ((64, True), (32, True), (24, False), (48, False)):
        cu = bounds(lens)
        qkv = random_qkv(lens, H, hd, seed=hd)
        got = bf16_attention(qkv, cu, H, hd, -1, threads=2)
        check(got, qkv, cu, H, hd, -1)
        monkeypatch.setenv("KIME_BGEMM", "avx512bf16")
        assert _attention.bf16_kernels() == "vdpbf16ps"
        dp = bf16_attention(qkv, cu, H, hd, -1, threads=2)
        monkeypatch.delenv("KIME_BGEMM")
        monkeypatch.setenv("KIME_ISA", "avx512")
        np.testing.assert_array_equal(bf16_attention(qkv, cu, H, hd, -1, threads=2), dp)
        monkeypatch.delenv("KIME_ISA")
        assert (got.tobytes() != dp.tobytes()) == tiles, hd


def test_rejects_an_unknown_precision():
    with pytest.raises(ValueError, match="'f32' or 'bf16'"):
        _attention.attention(np.zeros((1, 48), np.float32), bounds([1]), 1, 16, -1,
                             precision="f16")
