"""A checkpoint's tensors on the GPU, each converted once to the layout the kernels read.

Which storage a tensor gets follows its role in the model graph (`kime.graph.Role`): the GEMM
weights and the embedding table are in the activation type (FP16 straight from the checkpoint's
FP16 tensors, with no FP32 detour; or FP32). Norm weights, biases, the type embedding and the small
weights of the scorer's output row and the act head stay FP32: they are small and are applied in
FP32 by the kernels. The act head's first weight is stored transposed so a block's threads read it
coalesced. The temperatures are read on the host by the answer builder and never uploaded.
"""
from __future__ import annotations

import types
from typing import Any, Dict, Mapping, Optional

import numpy as np

from ..checkpoint import Checkpoint
from ..graph import Role

IN_ACTIVATION_TYPE = (Role.GEMM, Role.EMBEDDING)


class DeviceWeights:
    """name -> device array, for every tensor a kernel or GEMM reads."""

    def __init__(self, ck: Checkpoint, cupy: Any, half: bool):
        self.half = half
        act = np.float16 if half else np.float32
        transposed = ck.graph.act.hidden.weight
        self._arrays: Dict[str, Any] = {}
        for tensor in ck.graph.entries():
            if tensor.role is Role.HOST:
                continue
            raw = ck.weights.raw(tensor.name)  # as stored (FP16); read one tensor at a time
            dtype = act if tensor.role in IN_ACTIVATION_TYPE else np.float32
            if tensor.name == transposed:
                raw = raw.T
            self._arrays[tensor.name] = cupy.asarray(np.ascontiguousarray(raw, dtype=dtype))

    def __getitem__(self, name: str) -> Any:
        return self._arrays[name]

    def get(self, name: Optional[str]) -> Optional[Any]:
        """The tensor, or None for an optional one the model lacks (a bias the graph names None)."""
        return None if name is None else self._arrays[name]

    @property
    def arrays(self) -> Mapping[str, Any]:
        """Every uploaded tensor by name (read-only)."""
        return types.MappingProxyType(self._arrays)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._arrays.values())

    def free(self) -> None:
        """Drop every device array (CuPy returns the memory to its pool)."""
        self._arrays.clear()
