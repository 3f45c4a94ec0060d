"""Float64 NumPy references of each kernel in kime/_cuda/kernels.cu, on a plan's slot layout
(kime/_cuda/layout.py): rows of the batch start at multiples of 16 and every slot carries the
bounds `lo`, `hi` of its row. The GPU kernel tests compare against these, and the emulated
backend (emulator.py) runs them in place of the kernels to check the lowering on a CPU."""
from __future__ import annotations

import math
from typing import Optional, Tuple

import numpy as np

F64 = np.float64
_erf = np.vectorize(math.erf, otypes=[F64])


def gelu(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=F64)
    return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))


def layer_norm(v: np.ndarray, w: np.ndarray, b: Optional[np.ndarray], eps: float) -> np.ndarray:
    v = np.asarray(v, dtype=F64)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (v - mean) / np.sqrt(var + eps) * w
    return y + b if b is not None else y


def embed_norm(ids, table, w, b, eps) -> np.ndarray:
    return layer_norm(np.asarray(table, F64)[ids], w, b, eps)


def add(x, y, ybias) -> np.ndarray:
    out = np.asarray(x, F64) + np.asarray(y, F64)
    return out + ybias if ybias is not None else out


def final_norm(x, y, ybias, fw, fb, eps, type_emb, qtok, w1, b1, eps1) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    xn = layer_norm(add(x, y, ybias), fw, fb, eps) + np.asarray(type_emb, F64)[qtok]
    return xn, (layer_norm(xn, w1, b1, eps1) if w1 is not None else None)


def geglu(big, bias, inter) -> np.ndarray:
    big = np.asarray(big, F64)
    if bias is not None:
        big = big + bias
    return gelu(big[:, :inter]) * big[:, inter:2 * inter]


def bias_act(io, bias, relu) -> np.ndarray:
    out = np.asarray(io, F64) + bias
    return np.maximum(out, 0.0) if relu else out


def rope(qkv, bias, cos, sin, lo, d, head_dim) -> np.ndarray:
    """Rotate-half RoPE on q and k at each slot's position in its row; `cos`/`sin` are the
    [positions, head_dim / 2] tables."""
    out = np.asarray(qkv, F64).copy()
    if bias is not None:
        out += bias
    n = out.shape[0]
    pos = np.arange(n) - np.asarray(lo)
    c = np.asarray(cos, F64)[pos]
    s = np.asarray(sin, F64)[pos]
    half = head_dim // 2
    for base in range(0, 2 * d, head_dim):
        x1 = out[:, base:base + half].copy()
        x2 = out[:, base + half:base + head_dim].copy()
        out[:, base:base + half] = x1 * c - x2 * s
        out[:, base + half:base + head_dim] = x2 * c + x1 * s
    return out


def attention(qkv, lo, hi, d, heads, half_window: Optional[int]) -> np.ndarray:
    """Slot q attends to slot k when lo[q] <= k < hi[q] and |q - k| <= half_window."""
    qkv = np.asarray(qkv, F64)
    n = qkv.shape[0]
    hd = d // heads
    idx = np.arange(n)
    lo, hi = np.asarray(lo), np.asarray(hi)
    mask = (idx[None, :] >= lo[:, None]) & (idx[None, :] < hi[:, None])
    if half_window is not None:
        mask &= np.abs(idx[:, None] - idx[None, :]) <= half_window
    out = np.zeros((n, d))
    for h in range(heads):
        q = qkv[:, h * hd:(h + 1) * hd]
        k = qkv[:, d + h * hd:d + (h + 1) * hd]
        v = qkv[:, 2 * d + h * hd:2 * d + (h + 1) * hd]
        with np.errstate(invalid="ignore", over="ignore"):
            scores = np.where(mask, (q @ k.T) * hd ** -0.5, -np.inf)
        scores -= scores.max(axis=1, keepdims=True)
        p = np.exp(scores)
        p /= p.sum(axis=1, keepdims=True)
        # Only the keys a slot sees reach it, so a NaN elsewhere cannot (0 * NaN is NaN).
        for q_slot in range(n):
            keys = np.nonzero(mask[q_slot])[0]
            out[q_slot, h * hd:(h + 1) * hd] = p[q_slot, keys] @ v[keys]
    return out


def gather_norm(x, mtok, w, b, eps) -> np.ndarray:
    return layer_norm(np.asarray(x, F64)[mtok], w, b, eps)


def score(s1, b1, w3, b3) -> np.ndarray:
    return gelu(np.asarray(s1, F64) + b1) @ np.asarray(w3, F64).reshape(-1) + float(np.asarray(b3).reshape(-1)[0])


def act_head(x, logits, mcu, rfirst, w0t, b0, w2, b2) -> np.ndarray:
    """Rows with markers only (the kernel skips the others): [rows, n_act]."""
    x, logits = np.asarray(x, F64), np.asarray(logits, F64)
    out = np.zeros((len(mcu) - 1, len(b2)))
    for r in range(len(mcu) - 1):
        ma, mb = int(mcu[r]), int(mcu[r + 1])
        if ma == mb:
            continue
        z = logits[ma:mb]
        p = np.exp(z - z.max())
        p /= p.sum()
        k = max(mb - ma, 2)
        entropy = -(p * np.log(np.maximum(p, 1e-9))).sum() / math.log(k)
        top = np.sort(p)[::-1]
        top2 = top[1] if len(top) > 1 else 0.0
        feats = np.array([top[0], top[0] - top2, entropy, k / 255.0])
        hidden = gelu(np.concatenate([x[rfirst[r]], feats]) @ np.asarray(w0t, F64) + b0)
        a = hidden @ np.asarray(w2, F64).T + b2
        a = np.exp(a - a.max())
        out[r] = a / a.sum()
    return out
