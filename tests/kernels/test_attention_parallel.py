"""The parallel option layout in kime._cpu._attention (csrc/attention.c): RoPE at explicit position
ids, and attention with laya's option mask and a window measured in position ids, against the
float64 references (reference.py's `rope_rows`, `attention_rows`, `option_seen`).

Rows are laid out by laya's rule (kime.layout.parallel_layout) over random heads: 0 to 8 option
slots of uneven lengths, states of any length, rows cut short as max_len cuts them. Every ISA path
the CPU has is forced in turn through KIME_ISA. The sequential code path (no ids) must keep its
bits: ids that spell the sequential layout (position = index in row, no slots) give the same bits
through the masked path.
"""
from __future__ import annotations

from typing import List, Tuple

import numpy as np
import pytest

from kime._cpu import _attention
from kime.layout import parallel_layout

from ..tolerances import FP32
from . import reference
from .test_attention import bounds, random_qkv, tables

WINDOWS = [0, 1, 4, 8, 64, 1000, -1]


pytestmark = pytest.mark.usefixtures("one_blas_thread")


def parallel_row(rng: np.random.Generator, slots: int, max_len: int = 400
                 ) -> Tuple[List[int], List[int]]:
    """One row's (positions, option ids) by laya's rule: an instruction, `slots` option spans of
    uneven lengths (a marker each), the head's closing [SEP], a state; sometimes cut short."""
    start = int(rng.integers(1, 20))
    spans = [int(n) for n in rng.integers(1, 40, size=slots)]
    markers = [start + sum(spans[:s]) for s in range(slots)]
    head_len = start + sum(spans) + 1
    length = head_len + int(rng.integers(0, 120))
    positions, option_ids = parallel_layout(markers, head_len, length)
    cut = min(length, max_len, int(rng.integers(1, length + 1)) if rng.random() < 0.25 else length)
    return list(positions[:cut]), list(option_ids[:cut])


def parallel_batch(seed: int, rows: int, max_slots: int = 8):
    rng = np.random.default_rng(seed)
    laid = [parallel_row(rng, int(rng.integers(0, max_slots + 1))) for _ in range(rows)]
    lens = [len(p) for p, _ in laid]
    pos = np.array([p for ps, _ in laid for p in ps], dtype=np.int32)
    opt = np.array([o for _, os_ in laid for o in os_], dtype=np.int32)
    return lens, pos, opt


@pytest.mark.parametrize("seed", range(10))
def test_masked_attention_matches_float64(isa, seed):
    rng = np.random.default_rng(1000 + seed)
    H, hd = int(rng.integers(1, 5)), int(rng.choice([16, 24, 32, 64]))
    lens, pos, opt = parallel_batch(seed, int(rng.integers(1, 4)))
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed)
    for half_window in (int(rng.choice(WINDOWS[:-1])), -1):
        out = _attention.attention(qkv, cu, H, hd, half_window, threads=int(rng.integers(1, 3)),
                                   positions=pos, option_ids=opt)
        want = reference.attention_rows(qkv, cu, H, hd, half_window, pos, opt)
        np.testing.assert_allclose(out, want, **FP32.attention.kw,
                                   err_msg=f"half_window={half_window}")


@pytest.mark.parametrize("slots", [0, 1, 2, 5, 8])
@pytest.mark.parametrize("half_window", WINDOWS)
def test_every_slot_count_and_window(isa, slots, half_window):
    rng = np.random.default_rng(slots * 31 + half_window + 1)
    laid = [parallel_row(rng, slots) for _ in range(2)]
    lens = [len(p) for p, _ in laid]
    pos = np.array([p for ps, _ in laid for p in ps], dtype=np.int32)
    opt = np.array([o for _, os_ in laid for o in os_], dtype=np.int32)
    H, hd = 2, 32
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=slots)
    out = _attention.attention(qkv, cu, H, hd, half_window, positions=pos, option_ids=opt)
    np.testing.assert_allclose(out, reference.attention_rows(qkv, cu, H, hd, half_window, pos, opt),
                               **FP32.attention.kw)


def test_any_ids_not_only_laya_layouts(isa):
    """The kernel assumes nothing of the ids' order: shuffled positions, option ids in any order."""
    rng = np.random.default_rng(5)
    lens, H, hd = [70, 1, 150], 3, 16
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=5)
    pos = np.concatenate([rng.permutation(n) for n in lens]).astype(np.int32)
    opt = rng.integers(0, 4, size=sum(lens)).astype(np.int32)
    for half_window in (0, 3, 40, -1):
        out = _attention.attention(qkv, cu, H, hd, half_window, positions=pos, option_ids=opt)
        np.testing.assert_allclose(
            out, reference.attention_rows(qkv, cu, H, hd, half_window, pos, opt),
            **FP32.attention.kw)


@pytest.mark.parametrize("hd", [2, 7, 128])
def test_any_head_dim(isa, hd):
    lens, pos, opt = parallel_batch(hd, 2, max_slots=4)
    cu = bounds(lens)
    qkv = random_qkv(lens, 2, hd, seed=hd)
    for half_window in (-1, 5):
        out = _attention.attention(qkv, cu, 2, hd, half_window, positions=pos, option_ids=opt)
        np.testing.assert_allclose(
            out, reference.attention_rows(qkv, cu, 2, hd, half_window, pos, opt),
            **FP32.attention.kw)


@pytest.mark.parametrize("half_window", WINDOWS)
def test_sequential_ids_give_the_sequential_bits(isa, half_window):
    """Position = index in the row and no option slots through the masked path: the bits of the
    sequential path (which takes no ids), so both paths visit the same key blocks and mask alike."""
    lens, H, hd = [1, 7, 33, 129, 300, 2, 0], 3, 32
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=7)
    pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int32)
    opt = np.zeros(sum(lens), np.int32)
    plain = _attention.attention(qkv, cu, H, hd, half_window, threads=2)
    masked = _attention.attention(qkv, cu, H, hd, half_window, threads=2, positions=pos,
                                  option_ids=opt)
    np.testing.assert_array_equal(masked, plain)


@pytest.mark.parametrize("half_window", [-1, 4, 64])
def test_bits_independent_of_threads_and_batch(isa, half_window):
    H, hd = 4, 64
    lens, pos, opt = parallel_batch(3, 4)
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=3)
    one = _attention.attention(qkv, cu, H, hd, half_window, threads=1, positions=pos,
                               option_ids=opt)
    for threads in (2, 3):
        np.testing.assert_array_equal(
            _attention.attention(qkv, cu, H, hd, half_window, threads=threads, positions=pos,
                                 option_ids=opt), one)
    for r in range(len(lens)):  # each row alone
        a, b = cu[r], cu[r + 1]
        alone = _attention.attention(np.ascontiguousarray(qkv[a:b]), bounds([b - a]), H, hd,
                                     half_window, threads=2, positions=pos[a:b].copy(),
                                     option_ids=opt[a:b].copy())
        np.testing.assert_array_equal(alone, one[a:b])


@pytest.mark.parametrize("seed", range(4))
def test_rope_at_position_ids(seed):
    lens, pos, opt = parallel_batch(20 + seed, 3)
    H, hd = 3, 24
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=seed)
    cos, sin = tables(512, hd)
    expected = reference.rope_rows(qkv, cu, H, hd, cos, sin, pos)
    for threads in (1, 2):
        x = qkv.copy()
        _attention.rope(x, cu, H, hd, cos, sin, threads=threads, positions=pos)
        np.testing.assert_allclose(x, expected, **FP32.rope.kw)
        np.testing.assert_array_equal(x[:, 2 * H * hd:], qkv[:, 2 * H * hd:])  # v untouched
        if threads == 1:
            first = x
        else:
            np.testing.assert_array_equal(x, first)


def test_rope_index_positions_give_the_sequential_bits():
    lens, H, hd = [1, 7, 129, 0, 33], 3, 24
    cu = bounds(lens)
    qkv = random_qkv(lens, H, hd, seed=5)
    cos, sin = tables(200, hd)
    plain, by_ids = qkv.copy(), qkv.copy()
    _attention.rope(plain, cu, H, hd, cos, sin)
    pos = np.concatenate([np.arange(n) for n in lens]).astype(np.int32)
    _attention.rope(by_ids, cu, H, hd, cos, sin, positions=pos)
    np.testing.assert_array_equal(by_ids, plain)


def test_rejects_bad_ids():
    qkv = np.zeros((10, 3 * 2 * 16), np.float32)
    cu = bounds([10])
    pos, opt = np.arange(10, dtype=np.int32), np.zeros(10, np.int32)
    with pytest.raises(ValueError, match="go together"):
        _attention.attention(qkv, cu, 2, 16, -1, positions=pos)
    with pytest.raises(ValueError, match="go together"):
        _attention.attention(qkv, cu, 2, 16, -1, option_ids=opt)
    with pytest.raises(ValueError, match="positions has 9 entries"):
        _attention.attention(qkv, cu, 2, 16, -1, positions=pos[:9].copy(), option_ids=opt)
    with pytest.raises(ValueError, match="option_ids has 11 entries"):
        _attention.attention(qkv, cu, 2, 16, -1, positions=pos,
                             option_ids=np.zeros(11, np.int32))
    cos, sin = tables(12, 16)
    with pytest.raises(ValueError, match=r"positions\[3\] = 12 is outside"):
        bad = pos.copy()
        bad[3] = 12
        _attention.rope(qkv.copy(), cu, 2, 16, cos, sin, positions=bad)
    with pytest.raises(ValueError, match=r"positions\[0\] = -1 is outside"):
        bad = pos.copy()
        bad[0] = -1
        _attention.rope(qkv.copy(), cu, 2, 16, cos, sin, positions=bad)
