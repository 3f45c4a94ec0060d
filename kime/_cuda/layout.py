"""How a packed `Batch` is laid into a plan's fixed-shape slots (host side, NumPy only).

A CUDA graph fixes every kernel's grid and every GEMM's shape, so a plan has `cap` token slots
whatever the batch. The batch's rows are laid in order, each starting at a multiple of
`ALIGN` (16) tokens; a row's tail up to the next multiple is gap tokens, and the slots after the
last row are padding rows of 16 tokens. Gap and padding tokens are copies of row 0's first token
(a [CLS]), so every slot computes something finite, and the attention mask keeps them out of the
real rows: each token carries the bounds `lo`, `hi` of its own row (a gap token is a row of one).

Aligning rows to 16 is what makes a row's bits independent of where it sits: the attention kernels
walk keys in 16-aligned chunks counted from the row's start, and a warp's 16 queries always belong
to one row. Padding rows are 16 tokens, not whole copies of row 0, because a copy of a long row
would cost its full attention for nothing.

Everything a batch changes lives in one int32 buffer, uploaded with one copy per batch:
`ids`, `lo`, `hi`, `qtok` (question type per token), `mtok` (slot of each option marker; slots past
the batch's markers repeat marker 0), `rfirst` (first slot of each row) and `mcu` (marker offsets
per row; rows past the batch have none, so the act head skips them).
"""
from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np

from ..batch import Batch
from ..buckets import BUCKETS, pick_bucket

ALIGN = 16
SLACK = 64
"""Token rows allocated past `cap` in activation buffers: the attention kernel stages key chunks
that may run up to 16 rows past a row's aligned end."""

FIELDS = ("ids", "lo", "hi", "qtok", "mtok", "rfirst", "mcu")


def span(n: int) -> int:
    """Slots a row of `n` tokens takes: `n` rounded up to a multiple of `ALIGN`."""
    return -(-n // ALIGN) * ALIGN


def aligned_tokens(batch: Batch) -> int:
    """Slots the batch's rows take once each starts at a multiple of `ALIGN`."""
    lengths = np.diff(batch.cu)
    return int(((lengths + ALIGN - 1) // ALIGN).sum()) * ALIGN


def plan_caps(buckets: Sequence[int] = BUCKETS) -> Tuple[int, ...]:
    """Slot counts plans are built for: each bucket plus an eighth, room for the alignment of
    rows of ordinary length (a 4096-token batch of 512-token rows takes exactly 4096)."""
    return tuple(b + b // 8 for b in buckets)


def pick_cap(slots: int, caps: Sequence[int] = plan_caps()) -> int:
    """The smallest plan that holds `slots`, or the largest doubled until it does."""
    return pick_bucket(slots, caps)


def buffer_ints(cap: int) -> int:
    """int32 entries of a plan's metadata buffer."""
    return 7 * cap + 1


def offsets(cap: int) -> Dict[str, int]:
    """Where each field starts in the metadata buffer, in int32 entries."""
    return {name: i * cap for i, name in enumerate(FIELDS)}


class Layout:
    """Views of one plan's metadata buffer (pinned host memory in a plan, any int32 array in
    tests), and `fill` to lay a batch into them without allocating."""

    def __init__(self, cap: int, buffer: np.ndarray):
        if cap % ALIGN:
            raise ValueError("a plan's slot count must be a multiple of %d, got %d" % (ALIGN, cap))
        if buffer.dtype != np.int32 or buffer.size < buffer_ints(cap):
            raise ValueError("the metadata buffer must hold %d int32 entries" % buffer_ints(cap))
        self.cap = cap
        self.buffer = buffer
        at = offsets(cap)
        self.ids, self.lo, self.hi, self.qtok, self.mtok, self.rfirst = (
            buffer[at[name]:at[name] + cap] for name in FIELDS[:-1])
        self.mcu = buffer[at["mcu"]:at["mcu"] + cap + 1]
        self._iota = np.arange(cap + 1, dtype=np.int32)
        self._group = self._iota[:cap] & ~np.int32(ALIGN - 1)

    def fill(self, batch: Batch) -> Tuple[int, int]:
        """Lay `batch` into the slots; returns (markers, rows). Raises ValueError when it does
        not fit (the backend picks the plan with `aligned_tokens`)."""
        rows, markers, cap = batch.rows, int(batch.mcu[-1]), self.cap
        if rows == 0 or aligned_tokens(batch) > cap:
            raise ValueError("a batch of %d rows taking %d slots does not fit a %d-slot plan"
                             % (rows, aligned_tokens(batch) if rows else 0, cap))
        first = batch.ids[0]
        q0 = batch.qtype[0]
        at = 0
        for r in range(rows):
            a, b = int(batch.cu[r]), int(batch.cu[r + 1])
            end, stop = at + b - a, at + span(b - a)
            self.ids[at:end] = batch.ids[a:b]
            self.lo[at:end] = at
            self.hi[at:end] = end
            self.qtok[at:end] = batch.qtype[r]
            # The gap after the row: one-token rows of their own.
            self.ids[end:stop] = first
            self.lo[end:stop] = self._iota[end:stop]
            self.hi[end:stop] = self._iota[end + 1:stop + 1]
            self.qtok[end:stop] = q0
            ma, mb = int(batch.mcu[r]), int(batch.mcu[r + 1])
            np.add(batch.markers[ma:mb], at, out=self.mtok[ma:mb])
            self.rfirst[r] = at
            at = stop
        # Padding: rows of ALIGN tokens up to cap.
        self.ids[at:] = first
        self.lo[at:] = self._group[at:]
        np.add(self._group[at:], ALIGN, out=self.hi[at:])
        self.qtok[at:] = q0
        self.mtok[markers:] = self.mtok[0]
        self.rfirst[rows:] = 0
        self.mcu[:rows + 1] = batch.mcu
        self.mcu[rows + 1:] = markers
        return markers, rows
