"""The parallel option layout's attention in a CUDA plan's slot layout, vectorised, for the
emulator (tests/kernels/reference.py's `attention` with positions is the loop-by-loop one), and a
model of the keys kernels.cu's widened key range visits, so that the emulator answers wrong where
a row's reach (layout.py's `shift`) is too small to cover a key the rule allows.

The rule (kime/batch.py, Laya's `parallel_option_masks`): query i sees key j of its own row unless
both are in options and the options differ; a local layer also needs |pos[i] - pos[j]| <=
half_window. The decision head is unmasked and sequential.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from kime.batch import Batch
from kime.layout import parallel_layout

F64 = np.float64


def allowed(lo: np.ndarray, hi: np.ndarray, pos: np.ndarray, opt: np.ndarray,
            half_window: Optional[int]) -> np.ndarray:
    """[n, n] bool: slot q may attend slot k (the rule above, on a plan's slots)."""
    n = len(lo)
    k = np.arange(n)[None, :]
    seen = (k >= np.asarray(lo)[:, None]) & (k < np.asarray(hi)[:, None])
    oq, ok = np.asarray(opt)[:, None], np.asarray(opt)[None, :]
    seen &= ~((oq > 0) & (ok > 0) & (oq != ok))
    if half_window is not None:
        seen &= np.abs(np.asarray(pos)[:, None] - np.asarray(pos)[None, :]) <= half_window
    return seen


def key_ranges(lo: np.ndarray, hi: np.ndarray, shift: np.ndarray,
               half_window: Optional[int]) -> np.ndarray:
    """[n, n] bool: the keys kernels.cu's `key_range` visits for each slot's group of 16 in the
    parallel variant (the window widened by the row's reach), as the kernel computes them."""
    n = len(lo)
    hw = (1 << 30) if half_window is None else half_window
    out = np.zeros((n, n), dtype=bool)
    for q0 in range(0, n, 16):
        s, e = int(lo[q0]), int(hi[q0])
        w = hw + int(shift[q0])
        span_end = s + ((e - s + 15) & ~15)
        kb = max(s, q0 - w) & ~15
        ke = (min(span_end, q0 + 16 + w) + 15) & ~15
        out[q0:q0 + 16, max(kb, 0):min(ke, n)] = True
    return out


def attention(qkv: np.ndarray, lo: np.ndarray, hi: np.ndarray, pos: np.ndarray, opt: np.ndarray,
              d: int, heads: int, half_window: Optional[int],
              shift: Optional[np.ndarray] = None) -> np.ndarray:
    """The parallel attention on a plan's slots: each query over the keys `allowed` lets it see,
    the full score matrix per head; a slot that sees none gets zeros. With `shift`, only the keys
    the kernel's key range visits count too, so a reach too small shows as a wrong answer."""
    qkv = np.asarray(qkv, F64)
    n, hd = qkv.shape[0], d // heads
    seen = allowed(lo, hi, pos, opt, half_window)
    if shift is not None:
        seen &= key_ranges(lo, hi, shift, half_window)
    lo, hi = np.asarray(lo), np.asarray(hi)
    out = np.zeros((n, d))
    # Runs of slots with the same bounds (a row, a gap slot, a padding row), each over its own
    # row's keys only: a NaN in another row cannot reach it (0 * NaN is NaN).
    edges = [0] + [int(i) for i in np.flatnonzero((lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])) + 1]
    for start, end in zip(edges, edges[1:] + [n]):
        a, b = int(lo[start]), int(hi[start])
        if b <= a:
            continue
        blk = seen[start:end, a:b]
        for h in range(heads):
            q = qkv[start:end, h * hd:(h + 1) * hd]
            k = qkv[a:b, d + h * hd:d + (h + 1) * hd]
            v = qkv[a:b, 2 * d + h * hd:2 * d + (h + 1) * hd]
            scores = np.where(blk, (q @ k.T) * hd ** -0.5, -np.inf)
            top = scores.max(axis=1, keepdims=True)
            p = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
            total = p.sum(axis=1, keepdims=True)
            out[start:end, h * hd:(h + 1) * hd] = np.divide(
                p @ v, total, out=np.zeros((end - start, hd)), where=total > 0)
    return out


def pack_parallel(spec: Sequence[Tuple[int, Sequence[int], int]], vocab: int, seed: int,
                  low: int = 0) -> Batch:
    """A batch of rows of random ids in Laya's parallel layout (kime.layout.parallel_layout),
    one per (tokens before the first marker, option slot lengths, state tokens after the
    closing [SEP]); random question types."""
    rng = np.random.default_rng(seed)
    ids, markers, positions, options = [], [], [], []
    for prefix, slots, tail in spec:
        ms = [prefix + int(sum(slots[:s])) for s in range(len(slots))]
        head_len = prefix + int(sum(slots)) + 1  # the closing [SEP]
        pos, opt = parallel_layout(ms, head_len, head_len + tail)
        ids.append(rng.integers(low, vocab, head_len + tail).tolist())
        markers.append(ms)
        positions.append(pos)
        options.append(opt)
    return Batch.pack(ids, markers, rng.integers(0, 3, len(spec)).tolist(), positions=positions,
                      option_ids=options)


def random_spec(rng: np.random.Generator, rows: int,
                most: int = 60) -> List[Tuple[int, List[int], int]]:
    """`rows` random row shapes: 1 to 12 slots of 1 to 40 tokens, a state of 0 to `most`."""
    return [(int(rng.integers(1, 8)), rng.integers(1, 41, int(rng.integers(1, 13))).tolist(),
             int(rng.integers(0, most + 1))) for _ in range(rows)]
