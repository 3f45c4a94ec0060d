"""CPU backends. For now the NumPy reference: FP32, row by row, with NumPy's BLAS held to the
engine's thread count so two engines in one process do not oversubscribe the cores."""
from __future__ import annotations

from ..backend import Memory
from ..batch import Batch, Outputs
from ..checkpoint import Checkpoint
from .reference import ReferenceModel


class ReferenceBackend:
    name = "cpu-reference"

    def __init__(self, ck: Checkpoint, threads: int):
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
