"""A checkpoint's tensors on the GPU, each converted once to the layout the kernels read.

GEMM weights and the embedding table are in the activation type (FP16 straight from the
checkpoint's FP16 tensors, with no FP32 detour; or FP32). Norm weights, biases, the type
embedding, the scorer's output row and the act head stay FP32: they are small and are applied in
FP32 by the kernels. The act head's first weight is stored transposed so a block's threads read it
coalesced.
"""
from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from ..checkpoint import Checkpoint

GEMM_SUFFIXES = ("attn.Wqkv.weight", "attn.Wo.weight", "mlp.Wi.weight", "mlp.Wo.weight",
                 "self_attn.in_proj_weight", "self_attn.out_proj.weight", "linear1.weight",
                 "linear2.weight", "scorer.1.weight", "tok_embeddings.weight")
SKIPPED = ("temperature",)  # read by the answer builder on the host, never by a kernel


class DeviceWeights:
    """name -> device array, for every tensor a kernel or GEMM reads."""

    def __init__(self, ck: Checkpoint, cupy: Any, half: bool):
        self.half = half
        act = np.float16 if half else np.float32
        self._arrays: Dict[str, Any] = {}
        for name in ck.weights:
            if name in SKIPPED:
                continue
            raw = ck.weights.raw(name)  # as stored (FP16); read one tensor at a time
            dtype = act if name.endswith(GEMM_SUFFIXES) else np.float32
            if name == "act_head.0.weight":
                raw = raw.T
            self._arrays[name] = cupy.asarray(np.ascontiguousarray(raw, dtype=dtype))

    def __getitem__(self, name: str) -> Any:
        return self._arrays[name]

    def get(self, name: str) -> Optional[Any]:
        """The tensor, or None for an optional one the checkpoint lacks (a bias)."""
        return self._arrays.get(name)

    @property
    def nbytes(self) -> int:
        return sum(int(a.nbytes) for a in self._arrays.values())
