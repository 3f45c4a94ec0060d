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
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np

from ..backend import Device, Memory, Precision
from ..batch import Batch, Outputs
from ..buckets import BUCKETS, PRELOAD
from ..checkpoint import Checkpoint
from ..errors import BackendError, BadOption, Unsupported
from .device import open_cupy, stack
from .gemm import Gemm
from .kernels import Kernels
from .layout import aligned_tokens, pick_cap, plan_caps, run_halves
from .plan import Plan

CUDA_ERROR_MEMORY_ALLOCATION = 2


def toolkit(ordinal: int) -> Tuple[Any, Any]:
    """CuPy and its cuBLAS module, once GPU `ordinal` is known to run (device.open_cupy)."""
    cupy = open_cupy(ordinal)
    from cupy_backends.cuda.libs import cublas

    return cupy, cublas


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
