"""The parallel option layout's attention in a CUDA plan's slot layout, vectorised, for the
emulator (tests/kernels/reference.py's `attention` with positions is the loop-by-loop one), and a
model of the keys kernels.cu's widened key range visits, so that the emulator answers wrong where
a row's reach (layout.py's `shift`) is too small to cover a key the rule allows.

The rule (kime/batch.py, Laya's `parallel_option_masks`): query i sees key j of its own row unless
both are in options and the options differ; a local layer also needs |pos[i] - pos[j]| <=
half_window. The decision head is unmasked and sequential.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

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
    live = seen.any(axis=0)  # keys some query sees: a NaN elsewhere must not reach a result
    out = np.zeros((n, d))
    for h in range(heads):
        q = qkv[:, h * hd:(h + 1) * hd]
        k = np.where(live[:, None], qkv[:, d + h * hd:d + (h + 1) * hd], 0.0)
        v = np.where(live[:, None], qkv[:, 2 * d + h * hd:2 * d + (h + 1) * hd], 0.0)
        scores = np.where(seen, (q @ k.T) * hd ** -0.5, -np.inf)
        top = scores.max(axis=1, keepdims=True)
        p = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
        total = p.sum(axis=1, keepdims=True)
        out[:, h * hd:(h + 1) * hd] = np.divide(p @ v, total, out=np.zeros((n, hd)),
                                                where=total > 0)
    return out
