"""CPU backends, on the contract of `kime.backend.Backend`.

`CpuBackend` runs the compiled forward pass (`_forward`, over the C kernels in `csrc/`): weights
packed once for the CPU's ISA and cached on disk, one plan per bucket with its arena allocated
once, the threads of kime's pool (`csrc/pool.c`) opened from process-wide master threads
(`masters.py`), and NumPy's BLAS held to one thread while a forward
pass runs so the two thread pools never fight over the cores. `ReferenceBackend` is the NumPy
oracle (`reference.py`), selected with `KIME_CPU_BACKEND=reference`.

Both take their sizes from the checkpoint's model graph (`kime.graph`). After `close()` the
weights and plans are dropped and a run raises `BackendError`, never touches freed memory.
"""
from __future__ import annotations

import dataclasses
import os
import threading
import types
from typing import TYPE_CHECKING, Any, Dict, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from ..backend import Device, Memory, Precision
from ..batch import Batch, Outputs
from ..buckets import BUCKETS, PRELOAD, pick_bucket
from ..checkpoint import Checkpoint
from ..errors import BackendError, Unsupported
from .masters import run_forward
from .weights import CpuSpec, rope_arrays

if TYPE_CHECKING:
    from .reference import ReferenceModel

CPU = Device("cpu")


def bf16_missing() -> Optional[str]:
    """Why `precision="bf16"` cannot run here, in words, or None when it can: the CPU lacks
    AVX512_BF16 (FEAT_BF16 on aarch64), KIME_ISA caps kime below it, or kime was built without
    the kernels."""
    from . import _bgemm

    why = _bgemm.missing()
    if why is None:
        return None
    if _bgemm.kernels() == "bfmmla":  # aarch64: FEAT_BF16's matrix multiply-accumulate
        if why == "isa":
            return ("this CPU has FEAT_BF16, but KIME_ISA=%s caps kime's kernels below bf16"
                    % os.environ.get("KIME_ISA", ""))
        return ("this CPU lacks FEAT_BF16 (Arm's bfloat16 matrix multiply-accumulate, bfmmla: "
                "Neoverse V1, N2 and V2, Graviton 3 and 4)")
    if why == "isa":
        return ("this CPU has AVX512_BF16, but KIME_ISA=%s caps kime's kernels below AVX-512"
                % os.environ.get("KIME_ISA", ""))
    if why == "build":
        return ("this kime was built by a compiler without AVX512_BF16 kernels (GCC 10 and "
                "clang 9 and later have them)")
    return ("this CPU lacks AVX512_BF16 (AVX-512 bfloat16 dot products: AMD Zen 4 and later, "
            "Intel Cooper Lake and Sapphire Rapids and later)")


def _bf16_kernels() -> str:
    from . import _bgemm

    return str(_bgemm.kernels())


def check_bf16() -> None:
    """Refuse `precision="bf16"` where its kernels cannot run, naming what is missing."""
    why = bf16_missing()
    if why is not None:
        raise Unsupported("precision='bf16' cannot run here: %s; use 'f32' or 'int8'" % why)


def kernels_report() -> Dict[str, object]:
    """What this build's CPU kernels run on this machine, for `kime doctor` (through
    `kime.factory.backend_report`, so nothing outside `_cpu` imports the compiled modules): the
    ISA, the FP32 micro-kernel, the aarch64 features (getauxval; [] elsewhere), the INT8 kernel
    set and the KIME_QGEMM cap asked for, why BF16 cannot run (None: it can) and its kernels,
    what computes attention's BF16 products (int8 and bf16 run them: `vdpbf16ps`, or the FMAs
    that give its bits), and the thread pool's spin in microseconds (None: the build runs one
    thread, which only a build without POSIX threads does). Raises what a broken build raises
    on import; the caller reports it."""
    from . import _attention, _bgemm, _forward, _gemm, _qgemm

    missing = bf16_missing()
    return {"isa": _forward.isa_name(_forward.isa_detect()), "fp32_kernels": _gemm.kernel_name(),
            "cpu_features": _gemm.cpu_features(), "int8_kernels": _qgemm.impl_name(),
            "kime_qgemm_env": os.environ.get("KIME_QGEMM"), "bf16_missing": missing,
            "bf16_kernels": _bgemm.kernels() if missing is None else None,
            "bf16_attention": _attention.bf16_kernels(),
            "pool_spin_us": _forward.pool_spin_us() if _forward.pool_threaded() else None}


def _closed(what: str) -> BackendError:
    return BackendError("the %s was closed (its weights and plans are freed); load the model "
                        "again to run it" % what)


class Plan:
    """One bucket: the arena and the batch and output buffers, allocated once. An embedding
    batch runs in the same arena; its pooled buffer is allocated on the bucket's first one."""

    def __init__(self, model: Any, spec: CpuSpec, isa: int, threads: int, tokens: int):
        from . import _forward

        self.tokens = tokens
        self.model = model
        self.arena = _forward.Arena(spec.as_dict(), isa, threads, tokens)
        self.ids = np.zeros(tokens, dtype=np.int32)
        self.cu = np.zeros(tokens + 1, dtype=np.int32)
        self.markers = np.zeros(tokens, dtype=np.int32)
        self.mcu = np.zeros(tokens + 1, dtype=np.int32)
        self.qtype = np.zeros(tokens, dtype=np.int32)
        self.logits = np.zeros(tokens, dtype=np.float32)
        self.act = np.zeros((tokens, spec.n_act), dtype=np.float32)
        self.d = spec.d
        self.pooled: Optional[np.ndarray] = None  # [tokens, d], on the first embedding batch
        # [tokens] position and option ids, on the first parallel-layout batch
        self.positions: Optional[np.ndarray] = None
        self.option_ids: Optional[np.ndarray] = None

    @property
    def nbytes(self) -> int:
        lazy = sum(a.nbytes for a in (self.pooled, self.positions, self.option_ids)
                   if a is not None)
        return int(self.arena.nbytes) + lazy + sum(a.nbytes for a in (
            self.ids, self.cu, self.markers, self.mcu, self.qtype, self.logits, self.act))

    def run(self, batch: Batch) -> Outputs:
        """Copy the batch in, run, and return views of the outputs (valid until the next run)."""
        if batch.embed:
            return self.embed(batch)
        n, rows, k = batch.tokens, batch.rows, int(batch.mcu[-1])
        self.ids[:n] = batch.ids
        self.cu[:rows + 1] = batch.cu
        self.markers[:k] = batch.markers
        self.mcu[:rows + 1] = batch.mcu
        self.qtype[:rows] = batch.qtype
        if batch.positions is None or batch.option_ids is None:
            self.model.run(self.arena, self.ids, self.cu, rows, self.markers, self.mcu,
                           self.qtype, self.logits, self.act)
        else:
            if self.positions is None or self.option_ids is None:
                self.positions = np.zeros(self.tokens, dtype=np.int32)
                self.option_ids = np.zeros(self.tokens, dtype=np.int32)
            self.positions[:n] = batch.positions
            self.option_ids[:n] = batch.option_ids
            self.model.run(self.arena, self.ids, self.cu, rows, self.markers, self.mcu,
                           self.qtype, self.logits, self.act, self.positions, self.option_ids)
        return Outputs(logits=self.logits[:k], act=self.act[:rows])

    def embed(self, batch: Batch) -> Outputs:
        """The encoder alone over an embedding batch: each row's pooled hidden state. Embeddings
        always take the sequential layout (Laya's embedders pass no position ids)."""
        n, rows = batch.tokens, batch.rows
        if self.pooled is None:
            self.pooled = np.zeros((self.tokens, self.d), dtype=np.float32)
        self.ids[:n] = batch.ids
        self.cu[:rows + 1] = batch.cu
        self.model.embed(self.arena, self.ids, self.cu, rows, self.pooled)
        return Outputs(logits=self.logits[:0], act=self.act[:0], pooled=self.pooled[:rows])


class CpuBackend:
    """The compiled CPU forward pass in `precision` F32 (the default), INT8 or BF16: INT8 or BF16
    GEMMs in the encoder and decision head, and attention's products in BF16
    (`attention_precision`); the softmax, norms, scorer and act head FP32. BF16 needs
    AVX512_BF16, or FEAT_BF16 on aarch64 (`check_bf16`). MIXED runs each layer's GEMMs in the
    precision `layers` names (the encoder's layers, then the decision head's: the gate's
    `kime.layer_choice`), and attention's products in BF16 in its layers below FP32.

    `use_cache=False` packs the weights in memory without reading or writing the on-disk cache.
    """

    def __init__(self, ck: Checkpoint, threads: int,
                 precision: Union[Precision, str] = Precision.F32, preload: bool = False,
                 use_cache: bool = True, layers: Sequence[str] = ()):
        # threadpoolctl ships no type information
        from threadpoolctl import ThreadpoolController  # type: ignore[import-untyped]

        from . import _bgemm, _forward, _gemm, _qgemm
        from .weights import load_packed

        self.device = CPU
        self.precision = Precision.parse(precision).on(CPU)  # refuses f16: no FP16 kernels
        mixed = self.precision is Precision.MIXED
        if mixed != bool(layers):
            raise ValueError("a precision per layer goes with precision='mixed', and only with it")
        self.layers: Tuple[str, ...] = tuple(layers)
        bf16 = self.precision is Precision.BF16
        if bf16 or "bf16" in self.layers:
            check_bf16()
        self.threads = threads
        self.max_batch_tokens = BUCKETS[-1]
        if ck.graph.act.hidden.n_out != _forward.ACT_HIDDEN:
            raise Unsupported("%s: an act head of %d hidden units; the compiled CPU forward pass "
                              "is built for %d" % (ck.path, ck.graph.act.hidden.n_out,
                                                   _forward.ACT_HIDDEN))
        self._isa = _forward.isa_detect()
        self._isa_name = _forward.isa_name(self._isa)
        # The INT8 kernel set is chosen once, here: the packed weights, the scratch and every
        # call then agree even if KIME_QGEMM changes while the model is loaded.
        int8 = self.precision is Precision.INT8 or "int8" in self.layers
        qisa = _qgemm.pin(self._isa) if int8 else None
        self.kernels = (_bgemm.kernels() if bf16 else self._isa_name if qisa is None
                        else _qgemm.impl_name(qisa))
        # Below FP32 the precision contract (docs/precision.md) lets a layer's attention products
        # run in BF16, whose bits are the same at every ISA level (kernels.h): every layer whose
        # GEMMs run below FP32 does, in a mix too.
        self.spec = CpuSpec.of(ck.graph, qisa, bf16, self.layers)
        self.attention_precision = "bf16" if self.spec.attn_bf16 else "f32"
        packed = load_packed(ck, self._isa, self._isa_name, _gemm.pack, use_cache=use_cache,
                             qpack=None if qisa is None else _qgemm.pack, qisa=qisa,
                             bpack=_bgemm.pack if bf16 or "bf16" in self.layers else None,
                             mix=self.layers)
        self.weights_from = packed.how
        self.weights_file: Optional[str] = packed.path
        self._arrays: Optional[Dict[str, np.ndarray]] = packed.arrays
        self._model: Any = _forward.Model(packed.arrays, self.spec.as_dict(), self._isa, threads)
        self._graph = ck.graph
        self._plans: Dict[int, Plan] = {}
        self._alone: Optional[Plan] = None  # a plan past the largest bucket, while it runs
        self._plans_lock = threading.Lock()  # `memory` reads the plans while a run adds one
        self._blas = ThreadpoolController()
        if preload:
            for tokens in BUCKETS[:PRELOAD]:
                self.prepare(tokens)

    @property
    def plans(self) -> Mapping[int, Plan]:
        """The plans built so far, by bucket (read-only)."""
        return types.MappingProxyType(self._plans)

    def prepare(self, tokens: int) -> None:
        self._plan(tokens)

    def _plan(self, tokens: int) -> Plan:
        if self._model is None:
            raise _closed("CPU backend")
        bucket = pick_bucket(tokens)
        plan = self._plans.get(bucket)
        if plan is None:
            plan = Plan(self._model, self.spec, self._isa, self.threads, bucket)
            with self._plans_lock:
                self._plans[bucket] = plan
        return plan

    def run(self, batch: Batch) -> Outputs:
        longest = int(np.diff(batch.cu).max(initial=0))
        if batch.tokens > self.max_batch_tokens or longest > self.spec.max_pos:
            return self._run_alone(batch, longest)
        plan = self._plan(batch.tokens)
        with self._blas.limit(limits=1, user_api="blas"):
            return run_forward(self.threads, plan.run, batch)

    def _run_alone(self, batch: Batch, longest: int) -> Outputs:
        """A batch past the largest bucket (one row whose request raised `max_len`: the
        executor splits every other batch to fit) or with a row past the RoPE tables. Its plan
        is sized to the batch and, for a row past the tables, reads tables that reach it
        (transformers computes RoPE at any position, so Laya answers there); both are dropped
        when the call returns, so one long request never leaves hundreds of megabytes behind.
        The outputs are views of small buffers of their own, not of the freed arena."""
        model = self._model
        if model is None or self._arrays is None:
            raise _closed("CPU backend")
        if longest > self.spec.max_pos:
            from . import _forward

            arrays = dict(self._arrays)
            arrays.update(rope_arrays(self._graph, longest, cached=False))
            spec = dataclasses.replace(self.spec, max_pos=longest)
            model = _forward.Model(arrays, spec.as_dict(), self._isa, self.threads)
        plan = Plan(model, self.spec, self._isa, self.threads, batch.tokens)
        with self._plans_lock:
            self._alone = plan
        try:
            with self._blas.limit(limits=1, user_api="blas"):
                return run_forward(self.threads, plan.run, batch)
        finally:
            with self._plans_lock:
                self._alone = None

    def memory(self) -> Memory:
        weights = 0 if self._arrays is None else sum(int(a.nbytes) for a in self._arrays.values())
        with self._plans_lock:
            plans = list(self._plans.values()) + ([self._alone] if self._alone else [])
        return Memory(weights=weights, plans=sum(p.nbytes for p in plans))

    def describe(self) -> str:
        """The device and what the forward pass computes in which precision."""
        if self.layers:
            kernels = {"int8": self.kernels, "bf16": _bf16_kernels(), "f32": self._isa_name}
            runs = ", ".join("%d %s %s" % (self.layers.count(p), kernels[p], p.upper())
                             for p in ("int8", "bf16", "f32") if p in self.layers)
            return ("cpu (mixed: %s layers; BF16 attention products below FP32, FP32 heads, "
                    "%d threads)" % (runs, self.threads))
        if self.precision in (Precision.INT8, Precision.BF16):
            return "cpu (%s %s GEMMs, %s attention products, FP32 softmax, norms and heads, " \
                   "%d threads)" % (self.kernels, self.precision.value.upper(),
                                    self.attention_precision.upper(), self.threads)
        return "cpu (%s FP32 kernels, %d threads)" % (self.kernels, self.threads)

    def close(self) -> None:
        # The plans point at the model, and the model at the (possibly mapped) arrays: drop all.
        with self._plans_lock:
            self._plans.clear()
        self._model = None
        self._arrays = None


class ReferenceBackend:
    """The NumPy oracle as a backend: FP32, one row at a time, allocating per call."""

    def __init__(self, ck: Checkpoint, threads: int):
        from .reference import ReferenceModel

        self.device = CPU
        self.precision = Precision.F32
        self.threads = threads
        self.max_batch_tokens = BUCKETS[-1]
        self.kernels = "numpy"
        self.weights_from = "checkpoint"
        self.weights_file: Optional[str] = None
        self._model: Optional[ReferenceModel] = ReferenceModel(ck)
        self._weight_bytes = ck.weight_bytes()

    @property
    def model(self) -> Optional["ReferenceModel"]:
        """The NumPy model it runs (None once closed): tools that study the numerics patch
        around it (tools/int8_sensitivity.py)."""
        return self._model

    def prepare(self, tokens: int) -> None:
        """Nothing to build: the reference allocates per call."""

    def run(self, batch: Batch) -> Outputs:
        from threadpoolctl import threadpool_limits

        if self._model is None:
            raise _closed("NumPy reference backend")
        with threadpool_limits(limits=self.threads, user_api="blas"):
            return self._model.run(batch)

    def memory(self) -> Memory:
        # The reference allocates per call and keeps no plans.
        return Memory(weights=0 if self._model is None else self._weight_bytes, plans=0)

    def describe(self) -> str:
        return "cpu (NumPy FP32 reference, %d threads)" % self.threads

    def close(self) -> None:
        self._model = None
