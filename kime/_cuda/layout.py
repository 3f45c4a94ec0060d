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

A parallel-layout batch (`Batch.parallel`) also fills three fields after those, uploaded in the
same copy (a sequential batch uploads only the fields above, `used_ints`): `pos` (each token's
position id; a gap or padding token's is its index in its own row), `opt` (its option id, 0
shared) and `shift` (per token, its row's reach: how far a position id may fall behind or run
ahead of its index, `max(j - pos[j]) + max(pos[j] - j)` over the row). The attention kernels widen
a local layer's key range by `shift` in the parallel variant: a key j within `half_window` of query
i in position ids lies within `half_window + shift` of it in slots. In Laya's layout nothing runs
ahead, and the reach is the length of every option slot but the last (at least the slots' total
less the longest, where the state sits).
"""
from __future__ import annotations

from typing import Callable, Dict, Sequence, Tuple

import numpy as np

from ..batch import Batch, Outputs
from ..buckets import BUCKETS, pick_bucket

ALIGN = 16
SLACK = 64
"""Token rows allocated past `cap` in activation buffers: the attention kernel stages key chunks
that may run up to 16 rows past a row's aligned end."""

FIELDS = ("ids", "lo", "hi", "qtok", "mtok", "rfirst", "mcu")
PARALLEL_FIELDS = ("pos", "opt", "shift")


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


def used_ints(cap: int, parallel: bool) -> int:
    """int32 entries a batch uploads: the sequential fields, and the parallel ones after them
    for a parallel-layout batch."""
    return (7 + 3 * parallel) * cap + 1


def buffer_ints(cap: int) -> int:
    """int32 entries of a plan's metadata buffer (room for a parallel-layout batch)."""
    return used_ints(cap, True)


def offsets(cap: int) -> Dict[str, int]:
    """Where each field starts in the metadata buffer, in int32 entries."""
    at = {name: i * cap for i, name in enumerate(FIELDS)}
    at.update((name, (7 + i) * cap + 1) for i, name in enumerate(PARALLEL_FIELDS))
    return at


def sub_batch(batch: Batch, start: int, stop: int) -> Batch:
    """Rows `start:stop` of a batch, as a batch of their own."""
    a, b = int(batch.cu[start]), int(batch.cu[stop])
    ma, mb = int(batch.mcu[start]), int(batch.mcu[stop])
    pos, opt = batch.positions, batch.option_ids
    return Batch(ids=batch.ids[a:b], cu=batch.cu[start:stop + 1] - a,
                 markers=batch.markers[ma:mb], mcu=batch.mcu[start:stop + 1] - ma,
                 qtype=batch.qtype[start:stop], embed=batch.embed,
                 positions=None if pos is None else pos[a:b],
                 option_ids=None if opt is None else opt[a:b])


def halve(batch: Batch) -> int:
    """The row that splits a batch into two of about equal tokens (at least one row each)."""
    half = batch.tokens / 2
    best = min(range(1, batch.rows), key=lambda r: abs(int(batch.cu[r]) - half))
    return best


def run_halves(batch: Batch, run: Callable[[Batch], Outputs]) -> Outputs:
    """A batch too large for the device memory left, run as two smaller ones (`run` may split
    each again)."""
    cut = halve(batch)
    first = run(sub_batch(batch, 0, cut))
    logits, act = first.logits.copy(), first.act.copy()  # the next run reuses the buffers
    pooled = None if first.pooled is None else first.pooled.copy()
    second = run(sub_batch(batch, cut, batch.rows))
    if pooled is not None and second.pooled is not None:
        return Outputs(logits=logits, act=act, pooled=np.concatenate([pooled, second.pooled]))
    return Outputs(logits=np.concatenate([logits, second.logits]),
                   act=np.concatenate([act, second.act]))


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
        self.pos, self.opt, self.shift = (buffer[at[name]:at[name] + cap]
                                          for name in PARALLEL_FIELDS)
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
        if batch.parallel:
            self._fill_parallel(batch)
        return markers, rows

    def _fill_parallel(self, batch: Batch) -> None:
        """The parallel fields of a batch already laid in (`fill`): each row's position and
        option ids and its reach; gap and padding slots count from their own row's start, in no
        option, with no reach."""
        pos, opt, cu = batch.positions, batch.option_ids, batch.cu
        if pos is None or opt is None or pos.shape != batch.ids.shape or (
                opt.shape != batch.ids.shape):
            raise ValueError("a parallel batch needs positions and option_ids, one per token")
        if pos.size and (int(pos.min()) < 0 or int(pos.max()) >= self.cap):
            raise ValueError("positions must lie in [0, %d) for a %d-slot plan, got %d..%d"
                             % (self.cap, self.cap, int(pos.min()), int(pos.max())))
        if opt.size and int(opt.min()) < 0:
            raise ValueError("option_ids must be 0 or more, got %d" % int(opt.min()))
        np.subtract(self._iota[:self.cap], self.lo, out=self.pos)
        self.opt[:] = 0
        self.shift[:] = 0
        for r in range(batch.rows):
            a, b = int(cu[r]), int(cu[r + 1])
            if a == b:
                continue
            at = int(self.rfirst[r])
            self.pos[at:at + b - a] = pos[a:b]
            self.opt[at:at + b - a] = opt[a:b]
            ahead = pos[a:b] - self._iota[:b - a]  # position id less index in the row
            self.shift[at:at + b - a] = max(0, -int(ahead.min())) + max(0, int(ahead.max()))
