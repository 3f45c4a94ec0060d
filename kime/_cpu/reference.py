"""The NumPy FP32 forward pass: slow, allocating, and readable. It is the oracle every fast
kernel is tested against, and the first backend.

It walks the model graph (kime/graph.py, whose module doc states the forward pass) one row at a
time, so each row sees exactly its own tokens: there is no padding and no mask beyond the local
window. Computing each row on its own also makes a row's logits the same bits whatever else is in
the batch. A row in the parallel option layout (`positions`, `option_ids`) takes RoPE at its
position ids and the option mask in the encoder; the decision head is the same for both layouts.
NumPy has no erf, so the exact GELU comes from the compiled `_ops` module.
"""
from __future__ import annotations

from typing import Dict, Mapping, Optional, Tuple

import numpy as np

from ..batch import Batch, Outputs
from ..checkpoint import Checkpoint
from ..graph import (ACT_OPTION_SCALE, ACT_PROB_FLOOR, Attention, Block, Linear, Norm,
                     rope_tables)
from . import _ops  # compiled; typed by _ops.pyi

F32 = np.float32


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray],
               eps: float) -> np.ndarray:
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


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [heads, n, head_dim]: rotate-half RoPE (not interleaved)."""
    half = x.shape[-1] // 2
    rotated = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos + rotated * sin


def option_mask(positions: np.ndarray, option_ids: np.ndarray,
                half_window: Optional[int]) -> np.ndarray:
    """[n, n] True where query i may see key j in the parallel layout (laya's
    `parallel_option_masks`): not when both are in option slots and the slots differ, and in a
    local layer only within `half_window` position ids."""
    o = np.asarray(option_ids)
    allowed = ~((o[:, None] > 0) & (o[None, :] > 0) & (o[:, None] != o[None, :]))
    if half_window is not None:
        p = np.asarray(positions, dtype=np.int64)
        allowed &= np.abs(p[:, None] - p[None, :]) <= half_window
    return allowed


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, half_window: Optional[int],
              positions: Optional[np.ndarray] = None,
              option_ids: Optional[np.ndarray] = None) -> np.ndarray:
    """q, k, v [heads, n, head_dim] -> [n, heads * head_dim]; a window when `half_window` is set.
    With `positions` and `option_ids` (the parallel layout) the window reads position ids and
    the option mask applies (`option_mask`)."""
    heads, n, head_dim = q.shape
    scores = (q @ k.transpose(0, 2, 1)) * F32(head_dim ** -0.5)
    if positions is not None and option_ids is not None:
        allowed = option_mask(positions, option_ids, half_window)
        scores = np.where(allowed[None], scores, F32(-np.inf))
    elif half_window is not None and n > half_window + 1:
        pos = np.arange(n)
        outside = np.abs(pos[:, None] - pos[None, :]) > half_window
        scores = np.where(outside[None], F32(-np.inf), scores)
    out = softmax(scores) @ v
    return out.transpose(1, 0, 2).reshape(n, heads * head_dim)


class ReferenceModel:
    """Laya's decision model over a checkpoint's FP32 weights, row by row."""

    def __init__(self, ck: Checkpoint):
        self.graph = ck.graph
        # Its own FP32 copies, not the checkpoint's cache, so dropping the model frees them.
        self.w: Mapping[str, np.ndarray] = {name: ck.weights.fresh(name) for name in ck.weights}
        self.n_act = self.graph.n_act
        self._rope: Dict[float, Tuple[np.ndarray, np.ndarray]] = {}

    def _tables(self, n: int, head_dim: int, theta: float) -> Tuple[np.ndarray, np.ndarray]:
        cached = self._rope.get(theta)
        if cached is None or cached[0].shape[0] < n:
            cached = rope_tables(max(n, 512), head_dim, theta)
            self._rope[theta] = cached
        return cached[0][:n], cached[1][:n]

    def _norm(self, x: np.ndarray, norm: Optional[Norm]) -> np.ndarray:
        if norm is None:  # ModernBERT's identity attention norm at layer 0
            return x
        return layer_norm(x, self.w[norm.weight], self._optional(norm.bias), norm.eps)

    def _linear(self, x: np.ndarray, lin: Linear) -> np.ndarray:
        return linear(x, self.w[lin.weight], self._optional(lin.bias))

    def _optional(self, name: Optional[str]) -> Optional[np.ndarray]:
        return None if name is None else self.w[name]

    def _attend(self, h: np.ndarray, block: Block, positions: Optional[np.ndarray] = None,
                option_ids: Optional[np.ndarray] = None) -> np.ndarray:
        """Self-attention of one row: qkv, RoPE where the layer has it, the window, out. With
        `positions` and `option_ids` (an encoder layer of a parallel-layout row) RoPE takes the
        position ids and attention the option mask."""
        att: Attention = block.attention
        n = h.shape[0]
        qkv = self._linear(h, block.qkv)
        qkv = qkv.reshape(n, 3, att.heads, att.head_dim).transpose(1, 2, 0, 3)  # [3, heads, n, hd]
        q, k = qkv[0], qkv[1]
        if att.theta is not None:
            if positions is None:
                cos, sin = self._tables(n, att.head_dim, att.theta)
            else:
                cos, sin = self._tables(int(positions.max(initial=0)) + 1, att.head_dim, att.theta)
                cos, sin = cos[positions], sin[positions]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        return self._linear(attention(q, k, qkv[2], att.half_window, positions, option_ids),
                            block.out)

    def _block(self, x: np.ndarray, block: Block, positions: Optional[np.ndarray] = None,
               option_ids: Optional[np.ndarray] = None) -> np.ndarray:
        x = x + self._attend(self._norm(x, block.norm), block, positions, option_ids)
        h = self._linear(self._norm(x, block.norm2), block.up)
        if block.up.geglu:
            act = np.empty((h.shape[0], block.up.n_out // 2), dtype=F32)
            _ops.geglu(np.ascontiguousarray(h, dtype=F32), act)
        else:
            act = np.maximum(h, F32(0))
        return x + self._linear(act, block.down)

    def encode(self, ids: np.ndarray, positions: Optional[np.ndarray] = None,
               option_ids: Optional[np.ndarray] = None) -> np.ndarray:
        """The ModernBERT encoder on one row: [n] ids -> [n, d] hidden states; `positions` and
        `option_ids` ([n] each, given together) lay the row out in the parallel layout."""
        if (positions is None) != (option_ids is None):
            raise ValueError("positions and option_ids go together: give both or neither")
        if positions is not None and option_ids is not None:
            positions = np.asarray(positions, dtype=np.int64)
            option_ids = np.asarray(option_ids, dtype=np.int64)
            if positions.shape != ids.shape or option_ids.shape != ids.shape:
                raise ValueError("positions and option_ids must have one entry per token")
            if (positions < 0).any():
                raise ValueError("position ids must not be negative")
        g = self.graph
        x = self._norm(self.w[g.embedding][ids], g.emb_norm)
        for block in g.layers:
            x = self._block(x, block, positions, option_ids)
        return self._norm(x, g.final_norm)

    def head(self, x: np.ndarray, qtype: int) -> np.ndarray:
        """Type embedding, then the pre-norm transformer layers of the decision head."""
        x = x + self.w[self.graph.type_emb][qtype]
        for block in self.graph.head:
            x = self._block(x, block)
        return x

    def score(self, x: np.ndarray, markers: np.ndarray) -> np.ndarray:
        """One logit per option, from the hidden state at its marker."""
        scorer = self.graph.scorer
        m = gelu(self._linear(self._norm(x[markers], scorer.norm), scorer.hidden))
        return self._linear(m, scorer.out)[:, 0]

    def act(self, x: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The act head's probabilities from the first token and the answer's shape."""
        head = self.graph.act
        p = softmax(logits.astype(F32))
        k = F32(max(len(logits), 2))
        entropy = -(p * np.log(np.maximum(p, F32(ACT_PROB_FLOOR)))).sum() / np.log(k)
        top = np.sort(p)[::-1]
        top1 = top[0]
        top2 = top[1] if len(top) > 1 else F32(0)
        feats = np.array([top1, top1 - top2, entropy, k / F32(ACT_OPTION_SCALE)], dtype=F32)
        h = gelu(self._linear(np.concatenate([x[0], feats])[None, :], head.hidden))
        return softmax(self._linear(h, head.out)[0])

    def row(self, ids: np.ndarray, markers: np.ndarray, qtype: int,
            positions: Optional[np.ndarray] = None,
            option_ids: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """(option logits [k], act probabilities [n_act]) for one row; `positions` and
        `option_ids` for a row in the parallel layout (the encoder reads them, the head not)."""
        x = self.head(self.encode(ids, positions, option_ids), qtype)
        logits = self.score(x, markers).astype(F32)
        return logits, self.act(x, logits).astype(F32)

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """One row's embedding: the mean over its tokens of the encoder's last hidden state
        (after the final norm), summed in float64 as the compiled pooling does."""
        if len(ids) == 0:
            return np.zeros(self.graph.hidden, dtype=F32)
        return self.encode(ids).astype(np.float64).mean(axis=0).astype(F32)

    def run(self, batch: Batch) -> Outputs:
        if batch.embed:
            pooled = np.empty((batch.rows, self.graph.hidden), dtype=F32)
            for r in range(batch.rows):
                pooled[r] = self.embed(batch.ids[batch.cu[r]:batch.cu[r + 1]])
            return Outputs(logits=np.empty(0, dtype=F32), act=np.empty((0, self.n_act), F32),
                           pooled=pooled)
        logits = np.empty(int(batch.mcu[-1]), dtype=F32)
        act = np.empty((batch.rows, self.n_act), dtype=F32)
        for r in range(batch.rows):
            a, b = batch.cu[r], batch.cu[r + 1]
            ma, mb = batch.mcu[r], batch.mcu[r + 1]
            pos = None if batch.positions is None else batch.positions[a:b]
            opt = None if batch.option_ids is None else batch.option_ids[a:b]
            logits[ma:mb], act[r] = self.row(batch.ids[a:b], batch.markers[ma:mb],
                                             int(batch.qtype[r]), pos, opt)
        return Outputs(logits=logits, act=act)
