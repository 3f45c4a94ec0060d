"""CPU backends.

`CpuBackend` runs the compiled forward pass (`_forward`, over the C kernels in `csrc/`): weights
packed once for the CPU's ISA and cached on disk, one plan per bucket with its arena allocated
once, OpenMP threads owned by the engine, and NumPy's BLAS held to one thread while a forward
pass runs so the two thread pools never fight over the cores. `ReferenceBackend` is the NumPy
oracle (`reference.py`), selected with `KIME_CPU_BACKEND=reference`.
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ..backend import Memory
from ..batch import Batch, Outputs
from ..buckets import BUCKETS, PRELOAD, pick_bucket
from ..checkpoint import Checkpoint


class Plan:
    """One bucket: the arena and the batch and output buffers, allocated once."""

    def __init__(self, model, spec: Dict[str, object], isa: int, threads: int, tokens: int):
        from . import _forward

        self.tokens = tokens
        self.model = model
        self.arena = _forward.Arena(spec, isa, threads, tokens)
        self.ids = np.zeros(tokens, dtype=np.int32)
        self.cu = np.zeros(tokens + 1, dtype=np.int32)
        self.markers = np.zeros(tokens, dtype=np.int32)
        self.mcu = np.zeros(tokens + 1, dtype=np.int32)
        self.qtype = np.zeros(tokens, dtype=np.int32)
        self.logits = np.zeros(tokens, dtype=np.float32)
        self.act = np.zeros((tokens, model.n_act), dtype=np.float32)

    @property
    def nbytes(self) -> int:
        return int(self.arena.nbytes) + sum(a.nbytes for a in (
            self.ids, self.cu, self.markers, self.mcu, self.qtype, self.logits, self.act))

    def run(self, batch: Batch) -> Outputs:
        """Copy the batch in, run, and return views of the outputs (valid until the next run)."""
        n, rows, k = batch.tokens, batch.rows, int(batch.mcu[-1])
        self.ids[:n] = batch.ids
        self.cu[:rows + 1] = batch.cu
        self.markers[:k] = batch.markers
        self.mcu[:rows + 1] = batch.mcu
        self.qtype[:rows] = batch.qtype
        self.model.run(self.arena, self.ids, self.cu, rows, self.markers, self.mcu, self.qtype,
                       self.logits, self.act)
        return Outputs(logits=self.logits[:k], act=self.act[:rows])


class CpuBackend:
    name = "cpu"

    def __init__(self, ck: Checkpoint, threads: int, preload: bool = False,
                 use_cache: bool = True, int8: bool = False):
        from threadpoolctl import ThreadpoolController

        from . import _forward, _gemm, _qgemm
        from .weights import load_packed, spec_of

        self.threads = threads
        self.int8 = int8
        self.precision = "int8" if int8 else "f32"
        self.isa = _forward.isa_detect()
        self.isa_name = _forward.isa_name(self.isa)
        self.spec = spec_of(ck, int8=int8)
        qisa: Optional[int] = None
        if int8:
            # The INT8 kernel set is chosen once, here: the packed weights, the scratch and every
            # call then agree even if KIME_QGEMM changes while the model is loaded.
            qisa = self.spec["qisa"] = _qgemm.pin(self.isa)
            self.qgemm_impl = _qgemm.impl_name(qisa)
        self._arrays, self.weights_from = load_packed(
            ck, self.isa, self.isa_name, _gemm.pack, use_cache=use_cache,
            qpack=_qgemm.pack if int8 else None, qisa=qisa)
        self._model = _forward.Model(self._arrays, self.spec, self.isa, threads)
        self._plans: Dict[int, Plan] = {}
        self._blas = ThreadpoolController()
        self.max_batch_tokens = BUCKETS[-1]
        if preload:
            for tokens in BUCKETS[:PRELOAD]:
                self.prepare(tokens)

    def prepare(self, tokens: int) -> Plan:
        """The plan for the bucket holding `tokens`, built on first use."""
        bucket = pick_bucket(tokens)
        plan = self._plans.get(bucket)
        if plan is None:
            plan = self._plans[bucket] = Plan(self._model, self.spec, self.isa, self.threads, bucket)
        return plan

    def run(self, batch: Batch) -> Outputs:
        plan = self.prepare(batch.tokens)
        with self._blas.limit(limits=1, user_api="blas"):
            return plan.run(batch)

    def memory(self) -> Memory:
        return Memory(weights=sum(int(a.nbytes) for a in self._arrays.values()),
                      plans=sum(p.nbytes for p in self._plans.values()))

    def describe(self) -> str:
        if self.int8:
            return "cpu (%s INT8 GEMMs, FP32 attention and heads, %d threads)" % (
                self.qgemm_impl, self.threads)
        return "cpu (%s FP32 kernels, %d threads)" % (self.isa_name, self.threads)


class ReferenceBackend:
    name = "cpu-reference"
    max_batch_tokens: Optional[int] = None

    def __init__(self, ck: Checkpoint, threads: int):
        from .reference import ReferenceModel

        self.threads = threads
        self._model = ReferenceModel(ck)
        self._weight_bytes = ck.weight_bytes()

    def run(self, batch: Batch) -> Outputs:
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=self.threads, user_api="blas"):
            return self._model.run(batch)

    def memory(self) -> Memory:
        # The reference allocates per call and keeps no plans.
        return Memory(weights=self._weight_bytes, plans=0)

    def describe(self) -> str:
        return "cpu (NumPy FP32 reference, %d threads)" % self.threads
