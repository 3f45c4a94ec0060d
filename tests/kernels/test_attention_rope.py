"""RoPE inside attention (kernels.h's kime_attention_rope, `_attention.attention_rope`): the
encoder's one call per layer. With BF16 products it rotates q and k as it reads them, so it must
give the bits of `rope` then `attention` exactly, leave qkv as it was, and, through those bits,
stay within the float64 references' bounds (reference.py's `rope_rows`, then
`attention_rows_bf16`). With FP32 products it rotates qkv in place first.

Random shapes: rows of 0, 1, odd and many tokens, even head dims from 2 to 128, windows, the
parallel layout's position ids (which the rotation reads as well as the window), 1 to 3 threads,
and every ISA level the CPU has (levels.py's ISAS).
"""
from __future__ import annotations

import numpy as np
import pytest

from kime._cpu import _attention

from ..tolerances import FP32
from . import reference
from .test_attention import bounds, random_qkv, tables
from .test_attention_bf16 import check
from .test_attention_parallel import parallel_batch


pytestmark = pytest.mark.usefixtures("one_blas_thread")


def rope_then_attention(qkv, cu, H, hd, w, cos, sin, precision, threads, pos=None, opt=None):
    x = qkv.copy()
    _attention.rope(x, cu, H, hd, cos, sin, threads=threads, positions=pos)
    return x, _attention.attention(x, cu, H, hd, w, threads=threads, positions=pos,
                                   option_ids=opt, precision=precision)


def random_case(seed: int):
    rng = np.random.default_rng(seed)
    H = int(rng.integers(1, 6))
    hd = 2 * int(rng.integers(1, 65))
    lens = [int(n) for n in rng.integers(0, 300, size=int(rng.integers(1, 5)))]
    lens[int(rng.integers(0, len(lens)))] = int(rng.choice([0, 1, 2, 33]))
    w = int(rng.choice([-1, 0, 1, 4, 64]))
    return H, hd, lens, w


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("precision", ["bf16", "f32"])
def test_gives_rope_then_attention_bits(isa, seed, precision):
    H, hd, lens, w = random_case(seed)
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=seed)
    cos, sin = tables(512, hd)
    for threads in (1, 2, 3):
        rotated, want = rope_then_attention(qkv, cu, H, hd, w, cos, sin, precision, threads)
        x = qkv.copy()
        got = _attention.attention_rope(x, cu, H, hd, w, cos, sin, threads=threads,
                                        precision=precision)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))
        # BF16 reads q and k rotated and writes nothing back; FP32 rotates qkv where it lies
        np.testing.assert_array_equal(x, qkv if precision == "bf16" else rotated)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("half_window", [4, 64, -1])
def test_parallel_layout_rotates_at_the_position_ids(isa, seed, half_window):
    lens, pos, opt = parallel_batch(40 + seed, 3)
    H, hd = 3, 24
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=seed)
    cos, sin = tables(512, hd)
    for precision in ("bf16", "f32"):
        _, want = rope_then_attention(qkv, cu, H, hd, half_window, cos, sin, precision, 2, pos,
                                      opt)
        got = _attention.attention_rope(qkv.copy(), cu, H, hd, half_window, cos, sin, threads=2,
                                        positions=pos, option_ids=opt, precision=precision)
        np.testing.assert_array_equal(got.view(np.int32), want.view(np.int32))


@pytest.mark.parametrize("hd", [2, 16, 64, 128])
@pytest.mark.parametrize("half_window", [0, 8, -1])
def test_matches_float64(isa, hd, half_window):
    lens, H = [1, 70, 0, 131], 2
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=hd)
    cos, sin = tables(256, hd)
    rotated = reference.rope_rows(qkv, cu, H, hd, cos, sin)
    np.testing.assert_allclose(rotated[:, 2 * H * hd:], qkv[:, 2 * H * hd:])  # v not rotated
    got = _attention.attention_rope(qkv.copy(), cu, H, hd, half_window, cos, sin, threads=2,
                                    precision="bf16")
    # the reference's rotation differs from the kernel's in the last bit: round it as the kernel
    # did before the bounds, which are the BF16 path's own
    x = qkv.copy()
    _attention.rope(x, cu, H, hd, cos, sin)
    np.testing.assert_allclose(x, rotated, **FP32.rope.kw)
    check(got, x, cu, H, hd, half_window)


def test_bits_independent_of_the_batch(isa):
    H, hd, lens = 4, 64, [33, 512, 7, 300, 1]
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=3)
    cos, sin = tables(512, hd)
    whole = _attention.attention_rope(qkv.copy(), cu, H, hd, 64, cos, sin, threads=2,
                                      precision="bf16")
    for r in range(len(lens)):
        a, b = cu[r], cu[r + 1]
        alone = _attention.attention_rope(np.ascontiguousarray(qkv[a:b]), bounds([b - a]), H, hd,
                                          64, cos, sin, threads=3, precision="bf16")
        np.testing.assert_array_equal(alone, whole[a:b])


def test_rejects_what_rope_rejects():
    H, hd = 2, 16
    cu = bounds([10])
    qkv = np.zeros((10, 3 * H * hd), np.float32)
    cos, sin = tables(8, hd)
    with pytest.raises(ValueError, match="row 0 has 10 tokens; the tables 8"):
        _attention.attention_rope(qkv, cu, H, hd, -1, cos, sin, precision="bf16")
    cos, sin = tables(16, hd)
    with pytest.raises(ValueError, match=r"cos and sin must both be \[max_pos, 8\]"):
        _attention.attention_rope(qkv, cu, H, hd, -1, cos[:, :4].copy(), sin, precision="bf16")
    pos = np.arange(10, dtype=np.int32) + 7
    with pytest.raises(ValueError, match=r"positions\[9\] = 16 is outside"):
        _attention.attention_rope(qkv, cu, H, hd, -1, cos, sin, positions=pos,
                                  option_ids=np.zeros(10, np.int32), precision="bf16")
    with pytest.raises(ValueError, match="go together"):
        _attention.attention_rope(qkv, cu, H, hd, -1, cos, sin, positions=pos[:10] - 7)
    with pytest.raises(ValueError, match="rope needs an even head dim"):
        _attention.attention_rope(np.zeros((10, 3 * H * 7), np.float32), cu, H, 7, -1,
                                  cos, sin)
