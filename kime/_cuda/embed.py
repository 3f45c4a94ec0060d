"""A CUDA plan's embedding mode: the encoder alone, then each row's mean of its last hidden state.

An embedding batch (`Batch.embed`) runs in the plan a decision batch of as many slots would, on
the same arena, metadata buffer and slot layout (layout.py). Its launches are the plan's encoder
up to the final norm, without the question-type embedding (a zero type table takes its place, so
the final-norm kernel is the decision path's own) or the first head norm, then `mean_pool`: one
output row per `ALIGN` slots, the most rows a plan can hold, rows past the batch repeating row 0.
The mode's buffers, launches and CUDA graph are built on the plan's first embedding batch, so a
plan that never embeds pays nothing for it, and the decision path's launches and graph are the
ones it had before.
"""
from __future__ import annotations

from typing import Any, List, Optional

import numpy as np

from ..batch import Batch, Outputs
from .kernels import capture
from .layout import ALIGN

class EmbedMode:
    """One plan's embedding launches, their output buffers (device and pinned host) and graph."""

    def __init__(self, plan: Any):
        # `plan` is backend.Plan, which builds this mode; typed Any so embed.py does not import
        # the backend that imports it (no circle).
        o = plan.owner
        cp, d = o.cupy, o.graph.hidden
        self.plan = plan
        self.rows = plan.cap // ALIGN  # a row takes at least ALIGN slots
        types = int(o.weights[o.graph.type_emb].shape[0])
        self.zero_type = cp.zeros((types, d), dtype=np.float32)
        self.pooled = cp.zeros((self.rows, d), dtype=np.float32)
        pinned = cp.cuda.alloc_pinned_memory(4 * self.rows * d)
        self.pooled_host = np.frombuffer(pinned, np.float32, self.rows * d).reshape(self.rows, d)
        plan.pinned.append(pinned)
        plan.device_arrays += [self.zero_type, self.pooled]
        self.ops: List[Any] = []
        plan.lower_encoder(self.ops, zero_type=self.zero_type)
        self.ops.append(o.compiled.mean_pool(plan.x, plan.fields["rfirst"], plan.fields["hi"],
                                             self.rows, plan.cap, d, self.pooled))
        self.graph: Any = None
        self.graph_error: Optional[str] = None

    def run(self, batch: Batch, graphs: bool) -> Outputs:
        """Run an embedding batch as `Plan.run` runs a decision batch (eagerly, or the first
        batch eagerly and then its captured graph); returns views of the pinned pooled rows,
        valid until the plan's next run."""
        plan = self.plan
        _, rows = plan.fill(batch)
        cp, stream = plan.owner.cupy, plan.owner.stream
        runtime = cp.cuda.runtime
        if graphs and self.graph is not None:
            self.graph.launch(stream)
        else:
            for op in self.ops:
                op()
            if graphs and self.graph_error is None:
                self.graph, self.graph_error = capture(stream, self.ops)
        d = self.pooled_host.shape[1]
        runtime.memcpyAsync(self.pooled_host.ctypes.data, self.pooled.data.ptr, 4 * rows * d,
                            runtime.memcpyDeviceToHost, stream.ptr)
        stream.synchronize()
        pooled = self.pooled_host[:rows]
        # An empty row takes no slots, so its slot is the next row's: Laya's mean of nothing is 0.
        pooled[np.diff(batch.cu) == 0] = 0.0
        return Outputs(logits=plan.logits_host[:0], act=plan.act_host[:0], pooled=pooled)
