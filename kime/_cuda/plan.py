"""A `Plan`: everything one slot count's batches touch on the GPU (the device arena, the
metadata buffer and its pinned twin, the pinned outputs) and the forward pass lowered once into
kernel launches and GEMMs, run eagerly or replayed from its CUDA graph (see backend.py).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np

from ..batch import Batch, Outputs
from ..graph import Linear, Norm, rope_half_tables, rope_half_tables_uncached
from .embed import EmbedMode
from .gemm import GemmCall
from .kernels import Launch, Parallel, capture
from .layout import SLACK, Layout, buffer_ints, offsets, plan_caps, used_ints

Op = Union[Launch, GemmCall]


class Plan:
    """One slot count `cap`: its arena, staging buffers, lowered forward pass and CUDA graph."""

    def __init__(self, owner: Any, cap: int):  # owner: the CudaBackend (typed Any: no cycle)
        cp = owner.cupy
        graph = owner.graph
        d, inter = graph.hidden, graph.spec.intermediate
        act = np.float16 if owner.half else np.float32
        self.owner = owner
        self.cap = cap
        self.n_act = graph.n_act
        rows = cap + SLACK
        wide = max(n for b in graph.blocks for n in (b.qkv.n_out, b.up.n_out))
        # Zeroed once: the slack rows the attention kernel may stage are finite.
        self.x = cp.zeros((rows, d), dtype=np.float32)
        self.h = cp.zeros((rows, d), dtype=act)
        self.y = cp.zeros((rows, d), dtype=act)
        self.big = cp.zeros(rows * wide, dtype=act)
        self.mid = cp.zeros(rows * inter, dtype=act)
        self.meta = cp.zeros(buffer_ints(cap), dtype=np.int32)
        self.logits = cp.zeros(cap, dtype=np.float32)
        self.act = cp.zeros((cap, self.n_act), dtype=np.float32)
        self.rope: Dict[float, Any] = {}
        tables = rope_half_tables if cap <= plan_caps()[-1] else rope_half_tables_uncached
        for theta in graph.rope_thetas():
            cos, sin = tables(cap, graph.spec.head_dim, theta)
            self.rope[theta] = (cp.asarray(cos), cp.asarray(sin))
        self.device_arrays = [self.x, self.h, self.y, self.big, self.mid, self.meta, self.logits,
                              self.act] + [a for pair in self.rope.values() for a in pair]
        """Every device buffer the plan owns (its weights are the backend's)."""

        self.pinned = [cp.cuda.alloc_pinned_memory(4 * n)
                       for n in (buffer_ints(cap), cap, cap * self.n_act)]
        meta_host = np.frombuffer(self.pinned[0], np.int32, buffer_ints(cap))
        meta_host[:] = 0
        self.layout = Layout(cap, meta_host)
        self.logits_host = np.frombuffer(self.pinned[1], np.float32, cap)
        self.act_host = np.frombuffer(self.pinned[2], np.float32, cap * self.n_act).reshape(
            cap, self.n_act)

        at = offsets(cap)
        self.fields = {name: self.meta[at[name]:at[name] + cap + (name == "mcu")] for name in at}
        self.ops: List[Op] = self._lower()
        self.graph: Any = None
        self.graph_error: Optional[str] = None
        self.parallel_ops: Optional[List[Op]] = None  # built on the first parallel batch
        self.parallel_graph: Any = None
        self.parallel_graph_error: Optional[str] = None
        self.embedding: Optional[EmbedMode] = None
        """The embedding mode (embed.py), built on the plan's first embedding batch."""

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self.device_arrays) + sum(
            int(p.size()) for p in self.pinned)

    def _mm(self, ops: List[Op]) -> Callable[[Any, Linear, Any], None]:
        """Appends to `ops` the GEMM of a linear layer over every slot."""
        o = self.owner
        return lambda src, lin, dst: ops.append(o.gemm.call(
            src, o.weights[lin.weight], dst, self.cap, lin.n_out, lin.n_in, lin.weight,
            o.gemm_rows))

    def _norm_args(self, norm: Optional[Norm]) -> Tuple[Any, Any, float]:
        """weight, bias, eps; no norm is null pointers, which the kernel skips."""
        w = self.owner.weights
        return (None, None, 0.0) if norm is None else (w[norm.weight], w.get(norm.bias), norm.eps)

    def lower_encoder(self, ops: List[Op], zero_type: Any = None,
                      parallel: Optional[Parallel] = None) -> None:
        """The encoder's launches into `ops`, up to its final norm: fused with the question-type
        embedding and the first head norm for decisions; for an embedding (`zero_type`, a zero
        type table) the final norm alone, leaving the last hidden state in `x`. `parallel`: the
        parallel layout's rope and attention."""
        o = self.owner
        g, w, k = o.graph, o.weights, o.compiled
        d, n = g.hidden, self.cap
        x, h, y, big, mid = self.x, self.h, self.y, self.big, self.mid
        f = self.fields
        mm, norm_args = self._mm(ops), self._norm_args
        ops.append(k.embed_norm(f["ids"], w[g.embedding], *norm_args(g.emb_norm), n, d, x, h))
        for i, layer in enumerate(g.layers):
            att = layer.attention
            mm(h, layer.qkv, big)
            assert att.theta is not None  # every encoder layer rotates q and k
            cos, sin = self.rope[att.theta]
            # The rope kernel adds the qkv bias too.
            ops.append(k.rope(big, w.get(layer.qkv.bias), cos, sin, f["lo"], n, d, att.head_dim,
                              parallel))
            ops.append(k.attention(big, f["lo"], f["hi"], n, d, att.heads, att.half_window, h,
                                   parallel))
            mm(h, layer.out, y)
            ops.append(k.add_norm(x, y, w.get(layer.out.bias), *norm_args(layer.norm2), n, d, h))
            mm(h, layer.up, big)
            ops.append(k.geglu(big, w.get(layer.up.bias), n, layer.up.n_out // 2, mid))
            mm(mid, layer.down, y)
            bias = w.get(layer.down.bias)
            if i + 1 < len(g.layers):
                ops.append(k.add_norm(x, y, bias, *norm_args(g.layers[i + 1].norm), n, d, h))
            elif zero_type is not None:  # an embedding: the final norm alone
                ops.append(k.final_norm(x, y, bias, *norm_args(g.final_norm), zero_type,
                                        f["qtok"], None, None, 0.0, n, d, h))
            else:
                first = g.head[0].norm if g.head else None
                ops.append(k.final_norm(x, y, bias, *norm_args(g.final_norm), w[g.type_emb],
                                        f["qtok"], *norm_args(first), n, d, h))

    def _lower(self, parallel: Optional[Parallel] = None) -> List[Op]:
        """The forward pass as a flat list of launches, every address and size bound. Each norm
        after the first is fused into the residual add before it (`add_norm`), so the lowering
        looks one block ahead for the norm that opens it. `parallel`: the parallel layout's
        encoder (the head is the same)."""
        o = self.owner
        g, w, k = o.graph, o.weights, o.compiled
        d, n = g.hidden, self.cap
        x, h, y, big = self.x, self.h, self.y, self.big
        f = self.fields
        ops: List[Op] = []
        mm, norm_args = self._mm(ops), self._norm_args
        self.lower_encoder(ops, parallel=parallel)
        for j, layer in enumerate(g.head):
            att = layer.attention
            mm(h, layer.qkv, big)
            ops.append(k.bias_act(big, w[layer.qkv.bias], n, layer.qkv.n_out, relu=False))
            ops.append(k.attention(big, f["lo"], f["hi"], n, d, att.heads, att.half_window, h))
            mm(h, layer.out, y)
            ops.append(k.add_norm(x, y, w[layer.out.bias], *norm_args(layer.norm2), n, d, h))
            mm(h, layer.up, big)
            ops.append(k.bias_act(big, w[layer.up.bias], n, layer.up.n_out, relu=True))
            mm(big, layer.down, y)
            nxt = g.head[j + 1].norm if j + 1 < len(g.head) else None
            ops.append(k.add_norm(x, y, w[layer.down.bias], *norm_args(nxt), n, d, h))
        scorer, head = g.scorer, g.act
        ops.append(k.gather_norm(x, f["mtok"], *norm_args(scorer.norm), n, d, h))
        mm(h, scorer.hidden, y)
        ops.append(k.score(y, w[scorer.hidden.bias], w[scorer.out.weight], w[scorer.out.bias], n,
                           d, self.logits))
        ops.append(k.act_head(x, self.logits, f["mcu"], f["rfirst"], w[head.hidden.weight],
                              w[head.hidden.bias], w[head.out.weight], w[head.out.bias],
                              n, d, head.hidden.n_out, self.n_act, self.act))
        return ops

    def lower_parallel(self) -> List[Op]:
        """The parallel layout's lowering, built on first use (before any capture)."""
        if self.parallel_ops is None:
            f = self.fields
            self.parallel_ops = self._lower(Parallel(f["pos"], f["opt"], f["shift"]))
        return self.parallel_ops

    def _replay(self, ops: List[Op], graph: Any, error: Optional[str],
                graphs: bool) -> Tuple[Any, Optional[str]]:
        """Enqueue `ops`: eagerly; or, with `graphs`, eagerly then captured on the first batch
        (cuBLAS warms up outside the capture) and that graph after. Returns (graph, error)."""
        if graphs and error is None and graph is not None:
            graph.launch(self.owner.stream)
            return graph, error
        for op in ops:
            op()
        return capture(self.owner.stream, ops) if graphs and error is None else (graph, error)

    def embed_mode(self) -> EmbedMode:
        """The plan's embedding mode, built (its buffers allocated) on first use."""
        if self.embedding is None:
            self.embedding = EmbedMode(self)
        return self.embedding

    def fill(self, batch: Batch) -> Tuple[int, int]:
        """Lay the batch into the slots and enqueue the metadata's upload: (markers, rows)."""
        markers, rows = self.layout.fill(batch)
        runtime, stream = self.owner.cupy.cuda.runtime, self.owner.stream
        # One copy: the sequential fields, and the parallel ones after them when there are any.
        runtime.memcpyAsync(self.meta.data.ptr, self.layout.buffer.ctypes.data,
                            4 * used_ints(self.cap, batch.parallel), runtime.memcpyHostToDevice,
                            stream.ptr)
        return markers, rows

    def run(self, batch: Batch, graphs: bool) -> Outputs:
        """Lay the batch in, run, and return views of the pinned outputs (valid until the next
        run of this plan)."""
        if batch.embed:
            return self.embed_mode().run(batch, graphs)
        markers, rows = self.fill(batch)
        cp, stream = self.owner.cupy, self.owner.stream
        runtime = cp.cuda.runtime
        if batch.parallel:  # its own lowering and graph: never the sequential one's launches
            self.parallel_graph, self.parallel_graph_error = self._replay(
                self.lower_parallel(), self.parallel_graph, self.parallel_graph_error, graphs)
        else:
            self.graph, self.graph_error = self._replay(self.ops, self.graph, self.graph_error,
                                                        graphs)
        runtime.memcpyAsync(self.logits_host.ctypes.data, self.logits.data.ptr, 4 * markers,
                            runtime.memcpyDeviceToHost, stream.ptr)
        runtime.memcpyAsync(self.act_host.ctypes.data, self.act.data.ptr,
                            4 * rows * self.n_act, runtime.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
        return Outputs(logits=self.logits_host[:markers], act=self.act_host[:rows])
