"""The NumPy FP32 forward pass: slow, allocating, and readable. It is the oracle every fast
kernel is tested against, and the first backend.

It follows Laya's `DecisionModel` over transformers' `ModernBertModel` (DESIGN.md, "The forward
pass") one row at a time, so each row sees exactly its own tokens: there is no padding and no
mask beyond the local window. Computing each row on its own also makes a row's logits the same
bits whatever else is in the batch. NumPy has no erf, so the exact GELU comes from the compiled
`_ops` module.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from ..batch import Batch, Outputs
from ..checkpoint import HEAD_NORM_EPS, Checkpoint
from . import _ops  # compiled; typed by _ops.pyi

F32 = np.float32


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray], eps: float) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + F32(eps))
    y = y * weight
    return y + bias if bias is not None else y


def gelu(x: np.ndarray) -> np.ndarray:
    x2 = np.ascontiguousarray(x.reshape(-1, x.shape[-1]), dtype=F32)
    out = np.empty_like(x2)
    _ops.gelu_erf(x2, out)
    return out.reshape(x.shape)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def linear(x: np.ndarray, w: np.ndarray, b: Optional[np.ndarray] = None) -> np.ndarray:
    y = x @ w.T
    return y + b if b is not None else y


def rope_tables(n: int, head_dim: int, theta: float) -> Tuple[np.ndarray, np.ndarray]:
    """cos and sin [n, head_dim] in FP32, computed as transformers computes them."""
    inv_freq = F32(1.0) / (F32(theta) ** (np.arange(0, head_dim, 2, dtype=F32) / F32(head_dim)))
    freqs = np.arange(n, dtype=F32)[:, None] * inv_freq[None, :]
    emb = np.concatenate([freqs, freqs], axis=-1)
    return np.cos(emb), np.sin(emb)


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [heads, n, head_dim]: rotate-half RoPE (not interleaved)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, half_window: Optional[int]) -> np.ndarray:
    """q, k, v [heads, n, head_dim] -> [n, heads * head_dim]; a window when `half_window` is set."""
    heads, n, head_dim = q.shape
    scores = (q @ k.transpose(0, 2, 1)) * F32(head_dim ** -0.5)
    if half_window is not None and n > half_window + 1:
        pos = np.arange(n)
        outside = np.abs(pos[:, None] - pos[None, :]) > half_window
        scores = np.where(outside[None], F32(-np.inf), scores)
    out = softmax(scores) @ v
    return out.transpose(1, 0, 2).reshape(n, heads * head_dim)


class ReferenceModel:
    """Laya's decision model over a checkpoint's FP32 weights, row by row."""

    def __init__(self, ck: Checkpoint):
        self.ck = ck
        self.w: Mapping[str, np.ndarray] = ck.weights
        self.enc = ck.encoder
        self.n_act = ck.config.n_act
        self._rope: Dict[float, Tuple[np.ndarray, np.ndarray]] = {}

    def _tables(self, n: int, theta: float) -> Tuple[np.ndarray, np.ndarray]:
        cached = self._rope.get(theta)
        if cached is None or cached[0].shape[0] < n:
            cached = rope_tables(max(n, 512), self.enc.head_dim, theta)
            self._rope[theta] = cached
        return cached[0][:n], cached[1][:n]

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(x, self.w[name + ".weight"], self.w.get(name + ".bias"), self.enc.norm_eps)

    def encode(self, ids: np.ndarray) -> np.ndarray:
        """The ModernBERT encoder on one row: [n] ids -> [n, d] hidden states."""
        enc, w = self.enc, self.w
        n, heads, hd = len(ids), enc.heads, enc.head_dim
        x = self._norm(w["encoder.embeddings.tok_embeddings.weight"][ids], "encoder.embeddings.norm")
        for i in range(enc.layers):
            p = "encoder.layers.%d." % i
            h = self._norm(x, p + "attn_norm") if i > 0 else x
            qkv = linear(h, w[p + "attn.Wqkv.weight"], w.get(p + "attn.Wqkv.bias"))
            qkv = qkv.reshape(n, 3, heads, hd).transpose(1, 2, 0, 3)  # [3, heads, n, hd]
            is_global = enc.global_layers[i]
            cos, sin = self._tables(n, enc.global_theta if is_global else enc.local_theta)
            q, k = apply_rope(qkv[0], cos, sin), apply_rope(qkv[1], cos, sin)
            a = attention(q, k, qkv[2], None if is_global else enc.half_window)
            x = x + linear(a, w[p + "attn.Wo.weight"], w.get(p + "attn.Wo.bias"))
            h = linear(self._norm(x, p + "mlp_norm"), w[p + "mlp.Wi.weight"], w.get(p + "mlp.Wi.bias"))
            act = np.empty((n, enc.intermediate), dtype=F32)
            _ops.geglu(np.ascontiguousarray(h, dtype=F32), act)
            x = x + linear(act, w[p + "mlp.Wo.weight"], w.get(p + "mlp.Wo.bias"))
        return self._norm(x, "encoder.final_norm")

    def head(self, x: np.ndarray, qtype: int) -> np.ndarray:
        """Type embedding, then the pre-norm transformer layers of the decision head."""
        w, d = self.w, self.enc.hidden
        x = x + w["type_emb.weight"][qtype]
        heads = self.ck.head_heads
        hd = d // heads
        n = x.shape[0]
        for j in range(self.ck.config.head_layers):
            p = "head.layers.%d." % j
            h = layer_norm(x, w[p + "norm1.weight"], w[p + "norm1.bias"], HEAD_NORM_EPS)
            qkv = linear(h, w[p + "self_attn.in_proj_weight"], w[p + "self_attn.in_proj_bias"])
            qkv = qkv.reshape(n, 3, heads, hd).transpose(1, 2, 0, 3)
            a = attention(qkv[0], qkv[1], qkv[2], None)
            x = x + linear(a, w[p + "self_attn.out_proj.weight"], w[p + "self_attn.out_proj.bias"])
            h = layer_norm(x, w[p + "norm2.weight"], w[p + "norm2.bias"], HEAD_NORM_EPS)
            h = np.maximum(linear(h, w[p + "linear1.weight"], w[p + "linear1.bias"]), F32(0))
            x = x + linear(h, w[p + "linear2.weight"], w[p + "linear2.bias"])
        return x

    def score(self, x: np.ndarray, markers: np.ndarray) -> np.ndarray:
        """One logit per option, from the hidden state at its marker."""
        w = self.w
        m = layer_norm(x[markers], w["scorer.0.weight"], w["scorer.0.bias"], HEAD_NORM_EPS)
        m = gelu(linear(m, w["scorer.1.weight"], w["scorer.1.bias"]))
        return linear(m, w["scorer.3.weight"], w["scorer.3.bias"])[:, 0]

    def act(self, x: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The act head's probabilities from the first token and the answer's shape."""
        w = self.w
        p = softmax(logits.astype(F32))
        k = F32(max(len(logits), 2))
        entropy = -(p * np.log(np.maximum(p, F32(1e-9)))).sum() / np.log(k)
        top = np.sort(p)[::-1]
        top1 = top[0]
        top2 = top[1] if len(top) > 1 else F32(0)
        feats = np.array([top1, top1 - top2, entropy, k / F32(255.0)], dtype=F32)
        h = gelu(linear(np.concatenate([x[0], feats])[None, :], w["act_head.0.weight"],
                        w["act_head.0.bias"]))
        return softmax(linear(h, w["act_head.2.weight"], w["act_head.2.bias"])[0])

    def row(self, ids: np.ndarray, markers: np.ndarray, qtype: int) -> Tuple[np.ndarray, np.ndarray]:
        """(option logits [k], act probabilities [n_act]) for one row."""
        x = self.head(self.encode(ids), qtype)
        logits = self.score(x, markers).astype(F32)
        return logits, self.act(x, logits).astype(F32)

    def run(self, batch: Batch) -> Outputs:
        logits = np.empty(int(batch.mcu[-1]), dtype=F32)
        act = np.empty((batch.rows, self.n_act), dtype=F32)
        for r in range(batch.rows):
            a, b = batch.cu[r], batch.cu[r + 1]
            ma, mb = batch.mcu[r], batch.mcu[r + 1]
            logits[ma:mb], act[r] = self.row(batch.ids[a:b], batch.markers[ma:mb], int(batch.qtype[r]))
        return Outputs(logits=logits, act=act)
