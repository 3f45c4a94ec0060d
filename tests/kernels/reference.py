"""One float64 NumPy reference of each kernel kime runs, the CPU ones (kime/_cpu/csrc) and the
CUDA ones (kime/_cuda/kernels.cu), written the slow, obvious way from their definitions
(kime/graph.py) so that a wrong kernel cannot share a bug with them. tests/kernels holds the CPU
kernels to them, tests/cuda the GPU kernels, and tests/cuda/emulator.py runs them in place of the
GPU kernels to check the CUDA backend's lowering on a CPU.

Two layouts. The CPU kernels take rows back to back, bounded by offsets `cu` (the `*_rows`
functions). The CUDA kernels take a plan's slot layout (kime/_cuda/layout.py): rows start at
multiples of 16 and every slot carries the bounds `lo`, `hi` of its row, so a slot sees only the
keys within its bounds and nothing from a padding slot reaches a row.

The model oracle, kime/_cpu/reference.py, is another thing: the FP32 forward pass, a backend of
its own. The kernel tests compare with it only where FP32 itself bounds the accuracy.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import numpy as np

from ..tolerances import FP32

F64 = np.float64
_erf = np.vectorize(math.erf, otypes=[F64])


def gelu(v: np.ndarray) -> np.ndarray:
    """The exact (erf) GELU."""
    v = np.asarray(v, dtype=F64)
    return 0.5 * v * (1.0 + _erf(v / math.sqrt(2.0)))


def layer_norm(v: np.ndarray, w: np.ndarray, b: Optional[np.ndarray], eps: float) -> np.ndarray:
    """torch's LayerNorm over the last axis; eps rounded to float32 first, as the model stores
    it and every kernel takes it."""
    v = np.asarray(v, dtype=F64)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (v - mean) / np.sqrt(var + float(np.float32(eps))) * np.asarray(w, F64)
    return y + np.asarray(b, F64) if b is not None else y


def geglu(big: np.ndarray, bias: Optional[np.ndarray], inter: int) -> np.ndarray:
    """gelu(the first `inter` columns) times the next `inter`, after an optional bias."""
    big = np.asarray(big, F64)
    if bias is not None:
        big = big + bias
    return gelu(big[:, :inter]) * big[:, inter:2 * inter]


# The GEMMs (gemm.c, qgemm.c, bgemm.c): epilogues, INT8 and BF16 rounding, FP32's sum error.

def epilogue(x: np.ndarray, name: str, c0: Optional[np.ndarray] = None) -> np.ndarray:
    """A GEMM epilogue on x = A @ W.T + bias: store, accum (c0 + x), gelu, relu, or geglu (over
    the two halves of the columns)."""
    x = np.asarray(x, F64)
    if name == "accum":
        assert c0 is not None
        return np.asarray(c0, F64) + x
    if name == "gelu":
        return gelu(x)
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "geglu":
        return geglu(x, None, x.shape[1] // 2)
    assert name == "store", name
    return x


def epilogue_and_magnitude(x: np.ndarray, mag: np.ndarray, name: str,
                           c0: Optional[np.ndarray]) -> Tuple[np.ndarray, np.ndarray]:
    """The exact epilogue of x = A @ W.T + bias (float64), and the magnitude float32 rounding
    errors scale with, given mag = |A| @ |W|.T + |bias|."""
    want = epilogue(x, name, c0)
    if name == "accum":
        assert c0 is not None
        return want, np.abs(c0) + mag
    if name == "gelu":
        return want, 1.2 * mag
    if name == "geglu":
        half = x.shape[1] // 2
        a, g = x[:, :half], x[:, half:]
        return want, 1.2 * mag[:, :half] * np.abs(g) + np.abs(gelu(a)) * mag[:, half:]
    return want, mag


def check_gemm(got: np.ndarray, want: np.ndarray, mag: np.ndarray, k: int, what: str) -> None:
    """`got` is `want` within FP32's error on a sum of `k` products of magnitude `mag`."""
    tol = FP32.gemm.rtol * np.abs(want) + FP32.gemm.atol * math.sqrt(k) * mag + 1e-30
    err = np.abs(got.astype(F64) - want)
    bad = err > tol
    assert not bad.any(), f"{what}: {bad.sum()} elements off, worst {(err / tol).max():.2f}x tol"


def quantize_int8(x: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Per-row symmetric INT8 in float32, as qgemm.c: q = clamp(rint(x * (127 / amax))), and
    the scale amax / 127."""
    x = np.asarray(x, np.float32)
    amax = np.abs(x).max(axis=1) if x.shape[1] else np.zeros(x.shape[0], np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(amax > 0, np.float32(127.0) / amax, np.float32(0.0)).astype(np.float32)
    q = np.clip(np.rint(x * inv[:, None]), -127, 127).astype(np.int64)
    return q, (amax / np.float32(127.0)).astype(np.float32)


def int8_sums(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The exact integer sums of the quantized A and W, in int64."""
    qa, _ = quantize_int8(a)
    qw, _ = quantize_int8(w)
    return qa @ qw.T


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits as the kernels round: nearest even on the top 16 bits, a NaN
    quietened (its top bits kept), a float32 denormal to a zero of its sign."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    u = np.where((u & 0x7F800000) == 0, u & 0x80000000, u)
    nearest = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    return np.where(nan, (u >> 16) | 0x40, nearest).astype(np.uint16)


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 rounded to bfloat16, back in float32."""
    return (bf16_bits(x).astype(np.uint32) << 16).view(np.float32).reshape(np.shape(x))


# RoPE and attention: on the slot layout (CUDA), and on rows back to back (CPU).

def row_starts(cu: Sequence[int]) -> Tuple[np.ndarray, np.ndarray]:
    """Each token's row bounds (lo, hi) for rows back to back at offsets `cu`."""
    offsets = np.asarray(cu)
    lengths = np.diff(offsets)
    return np.repeat(offsets[:-1], lengths), np.repeat(offsets[1:], lengths)


def rope(qkv: np.ndarray, bias: Optional[np.ndarray], cos: np.ndarray, sin: np.ndarray,
         lo: np.ndarray, d: int, head_dim: int, positions: Optional[np.ndarray] = None
         ) -> np.ndarray:
    """Rotate-half RoPE on q and k (the first 2 * d columns) at each slot's position in its row,
    or at `positions` (one position id per slot: the parallel layout); `cos`/`sin` are the
    [positions, head_dim / 2] tables. v is left as it is."""
    out = np.asarray(qkv, F64).copy()
    if bias is not None:
        out += bias
    n = out.shape[0]
    pos = np.arange(n) - np.asarray(lo) if positions is None else np.asarray(positions)
    c = np.asarray(cos, F64)[pos]
    s = np.asarray(sin, F64)[pos]
    half = head_dim // 2
    for base in range(0, 2 * d, head_dim):
        x1 = out[:, base:base + half].copy()
        x2 = out[:, base + half:base + head_dim].copy()
        out[:, base:base + half] = x1 * c - x2 * s
        out[:, base + half:base + head_dim] = x2 * c + x1 * s
    return out


def rope_rows(qkv: np.ndarray, cu: Sequence[int], heads: int, head_dim: int, cos: np.ndarray,
              sin: np.ndarray, positions: Optional[np.ndarray] = None) -> np.ndarray:
    """`rope` on rows back to back at offsets `cu` (attention.c's layout)."""
    lo, _ = row_starts(cu)
    return rope(qkv, None, cos, sin, lo, heads * head_dim, head_dim, positions)


def option_seen(pos_q: np.ndarray, opt_q: np.ndarray, pos_k: np.ndarray, opt_k: np.ndarray,
                half_window: Optional[int]) -> np.ndarray:
    """[queries, keys] True where a query may see a key in the parallel layout (laya's
    `parallel_option_masks`): not when both lie in option slots (id > 0) of different slots,
    and with a window only within `half_window` position ids. Loops, not broadcasting, so it
    shares no vectorised trick with a kernel."""
    seen = np.zeros((len(pos_q), len(pos_k)), dtype=bool)
    for i in range(len(pos_q)):
        for j in range(len(pos_k)):
            other = opt_q[i] > 0 and opt_k[j] > 0 and opt_q[i] != opt_k[j]
            near = half_window is None or abs(int(pos_q[i]) - int(pos_k[j])) <= half_window
            seen[i, j] = near and not other
    return seen


def attention(qkv: np.ndarray, lo: np.ndarray, hi: np.ndarray, d: int, heads: int,
              half_window: Optional[int], positions: Optional[np.ndarray] = None,
              option_ids: Optional[np.ndarray] = None) -> np.ndarray:
    """Slot q attends to slot k when lo[q] <= k < hi[q] and |q - k| <= half_window (None:
    no window); a slot that sees no key gets zeros. With `positions` and `option_ids` (one per
    slot: the parallel layout) the window reads position ids and `option_seen` masks the
    options. The full score matrix of each row and head, so it shares nothing with a kernel's
    blocked online softmax."""
    qkv = np.asarray(qkv, F64)
    lo, hi = np.asarray(lo), np.asarray(hi)
    n = qkv.shape[0]
    hd = d // heads
    out = np.zeros((n, d))
    # Runs of slots with the same bounds: a row's slots, or padding. Only the keys a slot sees
    # reach it, so a NaN elsewhere cannot (0 * NaN is NaN).
    edges = [0] + [int(i) for i in np.flatnonzero((lo[1:] != lo[:-1]) | (hi[1:] != hi[:-1])) + 1]
    for start, end in zip(edges, edges[1:] + [n]):
        a, b = int(lo[start]), int(hi[start])
        if b <= a or end <= start:
            continue
        seen = np.ones((end - start, b - a), dtype=bool)
        if positions is not None and option_ids is not None:
            seen = option_seen(positions[start:end], option_ids[start:end], positions[a:b],
                               option_ids[a:b], half_window)
        elif half_window is not None:
            seen = np.abs(np.arange(start, end)[:, None] - np.arange(a, b)[None, :]) <= half_window
        for h in range(heads):
            q = qkv[start:end, h * hd:(h + 1) * hd]
            k = qkv[a:b, d + h * hd:d + (h + 1) * hd]
            v = qkv[a:b, 2 * d + h * hd:2 * d + (h + 1) * hd]
            scores = np.where(seen, (q @ k.T) * hd ** -0.5, -np.inf)
            top = scores.max(axis=1, keepdims=True)
            p = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
            total = p.sum(axis=1, keepdims=True)
            out[start:end, h * hd:(h + 1) * hd] = np.divide(
                p @ v, total, out=np.zeros((end - start, hd)), where=total > 0)
    return out


def attention_rows(qkv: np.ndarray, cu: Sequence[int], heads: int, head_dim: int,
                   half_window: int, positions: Optional[np.ndarray] = None,
                   option_ids: Optional[np.ndarray] = None) -> np.ndarray:
    """`attention` on rows back to back at offsets `cu`; half_window < 0 is no window
    (attention.c's convention)."""
    lo, hi = row_starts(cu)
    return attention(qkv, lo, hi, heads * head_dim, heads, None if half_window < 0 else half_window,
                     positions, option_ids)


def attention_rows_bf16(qkv: np.ndarray, cu: Sequence[int], heads: int, head_dim: int,
                        half_window: int, positions: Optional[np.ndarray] = None,
                        option_ids: Optional[np.ndarray] = None, two_terms: bool = False
                        ) -> Tuple[np.ndarray, np.ndarray]:
    """BF16 attention's operands, then float64 (`attention_rows` of them): the queries scaled by
    float32(log2(e)) / sqrtf(hd) in float32 and rounded to bfloat16, the keys and values
    rounded, the scores in base 2. Returns (out, mag): mag is, per output element, the
    probability-weighted mean of the rounded values' magnitudes, the scale of the one error this
    leaves out, the kernel's rounding of each probability to bfloat16 (at most 2^-8 of it).
    two_terms: the AMX path's operands, the queries as hi + lo, bf16 each (16 bits: so mag's
    error is at most about 2^-16 of a probability, and the queries' own about 2^-16 of each
    score term)."""
    qkv = np.asarray(qkv, np.float32)
    d = heads * head_dim
    scale = np.float32(1.4426950408889634) / np.sqrt(np.float32(head_dim))
    q32 = qkv[:, :d] * scale
    hi = bf16(q32)
    q = (hi.astype(F64) + bf16(q32 - hi).astype(F64)) if two_terms else hi.astype(F64)
    k, v = bf16(qkv[:, d:2 * d]).astype(F64), bf16(qkv[:, 2 * d:]).astype(F64)
    # attention_rows takes base-e scores scaled by hd^-0.5: undo both on the keys' side
    base_e = np.concatenate([q, k * np.log(2.0) * np.sqrt(head_dim), v], axis=1)
    out = attention_rows(base_e, cu, heads, head_dim, half_window, positions, option_ids)
    mag = attention_rows(np.concatenate([q, base_e[:, d:2 * d], np.abs(v)], axis=1), cu, heads,
                         head_dim, half_window, positions, option_ids)
    return out, mag


# The CUDA kernels' compositions: embedding, residual and final norms, the scorer.

def embed_norm(ids, table, w, b, eps) -> np.ndarray:
    return layer_norm(np.asarray(table, F64)[ids], w, b, eps)


def add(x, y, ybias) -> np.ndarray:
    out = np.asarray(x, F64) + np.asarray(y, F64)
    return out + ybias if ybias is not None else out


def final_norm(x, y, ybias, fw, fb, eps, type_emb, qtok, w1, b1,
               eps1) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """The encoder's last residual and final norm, plus the type embedding; then the decision
    head's first norm when its weights are given."""
    xn = layer_norm(add(x, y, ybias), fw, fb, eps) + np.asarray(type_emb, F64)[qtok]
    return xn, (layer_norm(xn, w1, b1, eps1) if w1 is not None else None)


def bias_act(io, bias, relu) -> np.ndarray:
    out = np.asarray(io, F64) + bias
    return np.maximum(out, 0.0) if relu else out


def gather_norm(x, mtok, w, b, eps) -> np.ndarray:
    return layer_norm(np.asarray(x, F64)[mtok], w, b, eps)


def score(s1, b1, w3, b3) -> np.ndarray:
    """The scorer's output layer: one logit per marker."""
    hidden = gelu(np.asarray(s1, F64) + b1)
    return hidden @ np.asarray(w3, F64).reshape(-1) + float(np.asarray(b3).reshape(-1)[0])


# The act head (kime/graph.py, step 6).

def act_features(logits: np.ndarray) -> np.ndarray:
    """The four features of one row's option logits: p = softmax(logits), k = max(options, 2),
    [top1, top1 - top2, -sum(p log max(p, 1e-9)) / log k, k / 255]. A row without options gets
    forward.c's answer, [0, 0, 0, 2 / 255]."""
    if len(logits) == 0:
        return np.array([0.0, 0.0, 0.0, 2 / 255])
    z = np.asarray(logits, F64)
    p = np.exp(z - z.max())
    p /= p.sum()
    k = max(len(z), 2)
    entropy = -(p * np.log(np.maximum(p, 1e-9))).sum() / math.log(k)
    top = np.sort(p)[::-1]
    top2 = top[1] if len(top) > 1 else 0.0
    return np.array([top[0], top[0] - top2, entropy, k / 255])


def _act_row(first: np.ndarray, logits: np.ndarray, w0t: np.ndarray, b0: np.ndarray,
             w2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """softmax(act_head.2(gelu(act_head.0([first token, features])))); w0t is [d + 4, hidden]."""
    hidden = gelu(np.concatenate([np.asarray(first, F64), act_features(logits)])
                  @ np.asarray(w0t, F64) + b0)
    a = hidden @ np.asarray(w2, F64).T + b2
    a = np.exp(a - a.max())
    return a / a.sum()


def act_head_rows(x: np.ndarray, cu: np.ndarray, logits: np.ndarray, mcu: np.ndarray,
                  w0: np.ndarray, b0: np.ndarray, w2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """forward.c's act head: every row, its first token at x[cu[r]], options mcu[r]:mcu[r + 1];
    w0 is [hidden, d + 4]."""
    w0t = np.asarray(w0, F64).T
    return np.array([_act_row(x[cu[r]], logits[mcu[r]:mcu[r + 1]], w0t, b0, w2, b2)
                     for r in range(len(cu) - 1)]).reshape(len(cu) - 1, len(b2))


def act_head(x, logits, mcu, rfirst, w0t, b0, w2, b2) -> np.ndarray:
    """kernels.cu's act head: rows with markers only (the kernel skips the others, left zero
    here), the first token at slot rfirst[r]: [rows, n_act]."""
    x, logits = np.asarray(x, F64), np.asarray(logits, F64)
    out = np.zeros((len(mcu) - 1, len(b2)))
    for r in range(len(mcu) - 1):
        ma, mb = int(mcu[r]), int(mcu[r + 1])
        if ma < mb:
            out[r] = _act_row(x[rfirst[r]], logits[ma:mb], w0t, b0, w2, b2)
    return out


def mean_pool_rows(x: np.ndarray, cu: Sequence[int]) -> np.ndarray:
    """Each row's mean over its tokens x[cu[r]:cu[r + 1]] (an embedding), zeros for an empty row:
    Laya's masked mean, whose token count is clamped at 1."""
    x = np.asarray(x, F64)
    out = np.zeros((len(cu) - 1, x.shape[1]), F64)
    for r in range(len(cu) - 1):
        a, b = int(cu[r]), int(cu[r + 1])
        out[r] = x[a:b].sum(axis=0) / max(b - a, 1)
    return out


def mean_pool_slots(x: np.ndarray, rfirst: Sequence[int], hi: Sequence[int]) -> np.ndarray:
    """`mean_pool_rows` in a CUDA plan's slot layout: row r runs from slot rfirst[r] to the end
    bound hi[] of that slot."""
    starts = [int(s) for s in rfirst]
    return np.stack([mean_pool_rows(x[s:int(hi[s])], [0, int(hi[s]) - s])[0] for s in starts])
