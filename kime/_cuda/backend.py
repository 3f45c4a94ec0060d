"""The CUDA backend: Laya's forward pass on one GPU through CuPy, cuBLAS and `kernels.cu`.

`CudaBackend` uploads the weights once (FP16 by default, or FP32 with TF32 off) and keeps one
`Plan` per slot count (`layout.pick_cap`). A plan owns everything a batch touches: the device
arena, sized once; the metadata buffer and its pinned host twin, filled by `Layout.fill` and
uploaded with one copy; pinned buffers the logits and act probabilities come back through; and
the forward pass, lowered once from the model graph (`kime.graph`) into a flat list of kernel
launches and GEMMs. With `graphs=True` (the default) the first batch of a plan runs that list
eagerly, which also lets cuBLAS set up its workspace outside a capture, then captures it into a
CUDA graph that every later batch replays: one launch per forward pass and no allocation.
`graphs=False` runs the list eagerly every time; both give the same bits
(tests/cuda/test_backend.py).

A plan fixes its slot count, so a batch that does not fill it is padded (layout.py): padding and
gap slots are rows of their own that no real row can see, so a row's bits do not depend on what
else the batch holds. Running out of device memory while building a plan splits the batch into
smaller ones; it never falls back to the CPU. `close()` frees the weights and plans and returns
the memory to the device; a run after it raises `BackendError`. An embedding batch
(`Batch.embed`) runs in the same plans, through the plan's embedding mode (embed.py).

A parallel-layout batch (`Batch.parallel`) runs the plan's second lowering and graph, built on
its first such batch (in `warm` for a parallel checkpoint): the encoder's rope and attention read
the position ids, option ids and row reach uploaded in the same metadata copy. A sequential batch
replays exactly the launches it always had; the decision head's attention is unmasked in both.
"""
from __future__ import annotations

import types
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ..backend import Device, Memory, Precision
from ..batch import Batch, Outputs
from ..buckets import BUCKETS, PRELOAD
from ..checkpoint import Checkpoint
from ..errors import BackendError, BadOption, Unsupported
from ..graph import Linear, Norm, rope_half_tables, rope_half_tables_uncached
from .device import open_cupy, stack
from .embed import EmbedMode
from .gemm import Gemm, GemmCall
from .kernels import Kernels, Launch, Parallel, capture
from .layout import (SLACK, Layout, aligned_tokens, buffer_ints, offsets, pick_cap, plan_caps,
                     run_halves, used_ints)

Op = Union[Launch, GemmCall]

CUDA_ERROR_MEMORY_ALLOCATION = 2


def toolkit(ordinal: int) -> Tuple[Any, Any]:
    """CuPy and its cuBLAS module, once GPU `ordinal` is known to run (device.open_cupy)."""
    cupy = open_cupy(ordinal)
    from cupy_backends.cuda.libs import cublas

    return cupy, cublas


class Plan:
    """One slot count `cap`: its arena, staging buffers, lowered forward pass and CUDA graph."""

    def __init__(self, owner: "CudaBackend", cap: int):
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


class CudaBackend:
    """Laya's forward pass on GPU `ordinal` in `precision` `f16` (the default) or `f32`.

    `graphs=False` runs every batch eagerly (for tests and debugging); `attention` picks the
    attention kernel: `auto` (tensor cores where the device and head size allow), `mma` (insist
    on them) or `simple` (the FP32-math kernel everywhere). `gemm_rows` issues every GEMM in
    slices of that many rows (a divisor of every plan's slot count, e.g. 288), so a row's bits do
    not depend on the plan it runs in even where cuBLAS picks kernels by shape (gemm.py).
    """

    weights_from = "uploaded"
    weights_file: Optional[str] = None

    def __init__(self, ck: Checkpoint, ordinal: int = 0,
                 precision: Union[Precision, str] = Precision.F16, preload: bool = False,
                 threads: int = 0, graphs: bool = True, attention: str = "auto",
                 gemm_rows: Optional[int] = None):
        self.device = Device("cuda", ordinal)
        self.precision = Precision.parse(precision).on(self.device)  # refuses int8
        if attention not in ("auto", "mma", "simple"):
            raise BadOption("attention=%r: use 'auto', 'mma' or 'simple'" % (attention,))
        cp, cublas = toolkit(ordinal)
        self.cupy = cp
        self.graph = ck.graph
        self.ordinal = ordinal
        self.half = self.precision is Precision.F16
        self.graphs = graphs
        self.gemm_rows = gemm_rows
        self.threads = threads
        self.max_batch_tokens = BUCKETS[-1]
        self._closed = False
        self._device = cp.cuda.Device(ordinal)
        with self._device:
            props = cp.cuda.runtime.getDeviceProperties(ordinal)
            name = props.get("name", b"GPU")
            self.gpu_name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
            self.capability = (int(props["major"]), int(props["minor"]))
            self.kernels = "sm_%d%d" % self.capability
            self.stream = cp.cuda.Stream(non_blocking=True)
            self.gemm = Gemm(cublas, self.stream.ptr, self.half)
            # On the plan stream: CuPy copies asynchronously on the current stream, and a
            # non-blocking stream does not wait for copies on the null stream.
            with self.stream:
                self.weights = self._upload(ck)
            head_dims = sorted({b.attention.head_dim for b in self.graph.blocks})
            self.compiled = Kernels(cp, self.half, head_dims, mma=attention != "simple",
                                    mma_ok=self.capability >= (8, 0))
            self.parallel = ck.config.parallel  # its batches are in the parallel layout
            if self.parallel:
                self.compiled.load_parallel()
        if attention == "mma" and not self.compiled.use_mma:
            raise Unsupported("attention='mma' needs precision='f16' and a GPU of compute "
                              "capability 8.0 or newer; this is %s (sm_%d%d) in %s"
                              % ((self.gpu_name,) + self.capability + (str(self.precision),)))
        self._plans: Dict[int, Plan] = {}
        self._oom_cap: Optional[int] = None
        if preload:
            for cap in plan_caps()[:PRELOAD]:
                self.warm(cap)

    def _upload(self, ck: Checkpoint) -> Any:
        from .weights import DeviceWeights

        try:
            return DeviceWeights(ck, self.cupy, self.half)
        except self.cupy.cuda.memory.OutOfMemoryError as e:
            raise Unsupported("the weights of %s do not fit in the memory of cuda:%d (%s): %s"
                              % (ck.path, self.ordinal, self.gpu_name, e)) from e

    # --- plans ---------------------------------------------------------------------------------

    @property
    def plans(self) -> Mapping[int, Plan]:
        """The plans built so far, by slot count (read-only)."""
        return types.MappingProxyType(self._plans)

    @property
    def oom_cap(self) -> Optional[int]:
        """The smallest slot count whose plan ran out of device memory: batches that would need
        a plan this large are split instead. None until that happens."""
        return self._oom_cap

    def prepare(self, tokens: int) -> None:
        cap = pick_cap(tokens)
        if cap not in self._plans:
            self.warm(cap)

    def plan(self, cap: int, keep: bool = True) -> Plan:
        """The plan of `cap` slots, built on first use; with `keep=False` built for one call
        and not kept."""
        if self._closed:
            raise BackendError("the CUDA backend on cuda:%d was closed (its weights and plans "
                               "are freed); load the model again to run it" % self.ordinal)
        plan = self._plans.get(cap) if keep else None
        if plan is None:
            with self._device:
                plan = Plan(self, cap)
            if keep:
                self._plans[cap] = plan
        return plan

    def warm(self, cap: int) -> None:
        """Build the plan of `cap` slots and capture its graph now, with a one-row batch."""
        batch = Batch.pack([[0] * 16], [[1]], [0])
        with self._device, self.stream:
            self.plan(cap).run(batch, self.graphs)
            if self.parallel:  # the graph the checkpoint's batches replay
                self.plan(cap).run(Batch.pack([[0] * 16], [[1]], [0], positions=[range(16)],
                                              option_ids=[[0] + [1] * 15]), self.graphs)

    def _is_oom(self, error: BaseException) -> bool:
        if isinstance(error, self.cupy.cuda.memory.OutOfMemoryError):
            return True
        return getattr(error, "status", None) == CUDA_ERROR_MEMORY_ALLOCATION

    # --- running -------------------------------------------------------------------------------

    def run(self, batch: Batch) -> Outputs:
        with self._device, self.stream:
            return self._run(batch)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with self._device:
            self.stream.synchronize()  # nothing in flight may read what is freed below
            self._plans.clear()
            self.weights.free()
            self.cupy.get_default_memory_pool().free_all_blocks()
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()

    def _run(self, batch: Batch) -> Outputs:
        cap = pick_cap(aligned_tokens(batch))
        if cap > plan_caps()[-1]:
            return self._run_alone(batch, cap)
        if self._oom_cap is not None and cap >= self._oom_cap and batch.rows > 1:
            return run_halves(batch, self._run)
        try:
            plan = self.plan(cap)
            if batch.embed:
                plan.embed_mode()  # its buffers too, so running out of memory splits the batch
        except Exception as e:
            if not self._is_oom(e):
                raise
            self._plans.pop(cap, None)
            self.cupy.get_default_memory_pool().free_all_blocks()
            self._oom_cap = cap if self._oom_cap is None else min(cap, self._oom_cap)
            if batch.rows == 1:
                raise self._too_long(batch, cap, e) from e
            return run_halves(batch, self._run)
        return plan.run(batch, self.graphs)

    def _run_alone(self, batch: Batch, cap: int) -> Outputs:
        """A batch past the largest plan (one row whose request raised `max_len`): its plan,
        whose RoPE tables reach its every slot, runs eagerly and is freed when the call returns,
        so one long request never keeps a plan larger than the usual ones."""
        try:
            out = self.plan(cap, keep=False).run(batch, False)
            return Outputs(logits=out.logits.copy(), act=out.act.copy(),
                           pooled=None if out.pooled is None else np.array(out.pooled))
        except Exception as e:
            if not self._is_oom(e):
                raise
            raise self._too_long(batch, cap, e) from e
        finally:  # the plan is garbage once `out` is: hand its blocks back
            self.cupy.get_default_memory_pool().free_all_blocks()
            self.cupy.get_default_pinned_memory_pool().free_all_blocks()

    def _too_long(self, batch: Batch, cap: int, error: BaseException) -> Unsupported:
        return Unsupported("cuda:%d (%s) runs out of memory for a single row of %d tokens (a "
                           "%d-slot plan): %s" % (self.ordinal, self.gpu_name, batch.tokens,
                                                  cap, error))

    # --- facts ---------------------------------------------------------------------------------

    def memory(self) -> Memory:
        plans = tuple(self._plans.values())  # one step under the GIL: a new plan cannot break it
        return Memory(weights=self.weights.nbytes, plans=sum(p.nbytes for p in plans))

    def identity(self) -> Dict[str, str]:
        """What this backend's bits depend on besides kime and the checkpoint: the GPU model, its
        driver and libraries (`device.stack`), cuBLAS, and the numerics chosen at open."""
        out = {"gpu": self.gpu_name, "arch": self.kernels, "precision": str(self.precision),
               "cublas": self.gemm.version(), "graphs": str(self.graphs),
               "attention": "mma" if self.compiled.use_mma else "simple",
               "gemm_rows": str(self.gemm_rows)}
        out.update(stack(self.cupy))
        return out

    def describe(self) -> str:
        numerics = ("FP16 weights and activations, FP32 accumulation" if self.half
                    else "FP32, TF32 off")
        attention = "tensor-core attention" if self.compiled.use_mma else "FP32-math attention"
        failed = sorted({e for p in tuple(self._plans.values())
                         for e in (p.graph_error, p.parallel_graph_error) if e})
        if not self.graphs:
            graphs = "no CUDA graphs"
        elif failed:
            graphs = "CUDA graphs failed, running eagerly: %s" % failed[0]
        else:
            graphs = "CUDA graphs"
        return "cuda:%d (%s, sm_%d%d; %s; %s; %s)" % (
            (self.ordinal, self.gpu_name) + self.capability + (numerics, attention, graphs))
