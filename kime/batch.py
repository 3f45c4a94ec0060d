"""The packed batch a backend runs, and the outputs it fills.

Rows of different lengths are packed end to end with no padding: row r is
`ids[cu[r]:cu[r+1]]`, its option markers (positions inside the row) are
`markers[mcu[r]:mcu[r+1]]`, and its question type is `qtype[r]`. The only shape that matters to
a backend is the total token count, which is what buckets are sized by.

An embedding batch (`embed=True`) runs the encoder alone: its rows have no markers, and the
backend answers each with the mean of the row's last hidden state (`Outputs.pooled`). It runs in
the same plan (bucket, arena) as a decision batch of as many tokens; the decision head does not
run, so it costs the encoder alone.

A parallel-layout batch (a checkpoint with `option_layout="parallel"`, Laya's `parallel_layout`)
also carries each token's position id and option id: every option slot of a row starts at the
same position, and the encoder stops a token of one option from attending to another option's
tokens (its local layers measure their window in position ids). A sequential batch has neither,
and a token's position is its index in its row. A batch never mixes the two.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence

import numpy as np


@dataclass
class Batch:
    ids: np.ndarray  # int32 [tokens]
    cu: np.ndarray  # int32 [rows + 1]
    markers: np.ndarray  # int32 [markers]
    mcu: np.ndarray  # int32 [rows + 1]
    qtype: np.ndarray  # int32 [rows]
    embed: bool = False  # the encoder alone, answered by each row's pooled hidden state
    positions: Optional[np.ndarray] = None  # int32 [tokens]: position ids (parallel layout only)
    option_ids: Optional[np.ndarray] = None  # int32 [tokens]: 0 shared, s + 1 in option slot s

    @property
    def parallel(self) -> bool:
        """Whether the batch is in the parallel option layout (positions and option ids set)."""
        return self.positions is not None

    @property
    def rows(self) -> int:
        return int(self.qtype.shape[0])

    @property
    def tokens(self) -> int:
        return int(self.cu[-1])

    @classmethod
    def pack(cls, rows: Sequence[Sequence[int]], markers: Sequence[Sequence[int]],
             qtypes: Sequence[int], embed: bool = False,
             positions: Optional[Sequence[Sequence[int]]] = None,
             option_ids: Optional[Sequence[Sequence[int]]] = None) -> "Batch":
        """Pack rows; a row's markers must lie inside it. `positions` and `option_ids` (one list
        per row, as long as the row) are given together for a parallel-layout batch, else
        neither."""
        if (positions is None) != (option_ids is None):
            raise ValueError("positions and option_ids go together: give both or neither")
        lengths = [len(r) for r in rows]
        counts = [len(m) for m in markers]
        cu = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(lengths, out=cu[1:])
        mcu = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(counts, out=mcu[1:])
        flat_ids: List[int] = [t for r in rows for t in r]
        flat_markers: List[int] = [m for ms in markers for m in ms]
        pos = opt = None
        if positions is not None and option_ids is not None:
            if ([len(p) for p in positions] != lengths
                    or [len(o) for o in option_ids] != lengths):
                raise ValueError("a row's positions and option ids must be as long as the row")
            pos = np.asarray([p for ps in positions for p in ps], dtype=np.int32)
            opt = np.asarray([o for os_ in option_ids for o in os_], dtype=np.int32)
        return cls(ids=np.asarray(flat_ids, dtype=np.int32), cu=cu,
                   markers=np.asarray(flat_markers, dtype=np.int32), mcu=mcu,
                   qtype=np.asarray(qtypes, dtype=np.int32), embed=embed,
                   positions=pos, option_ids=opt)

    @classmethod
    def pack_embed(cls, rows: Sequence[Sequence[int]]) -> "Batch":
        """An embedding batch of rows: no markers, question type 0 (unused)."""
        return cls.pack(rows, [()] * len(rows), [0] * len(rows), embed=True)


@dataclass
class Outputs:
    """Raw option logits, one per marker in batch order, and the act head's probabilities; for
    an embedding batch, no logits or act rows, and each row's pooled hidden state instead."""

    logits: np.ndarray  # float32 [markers]
    act: np.ndarray  # float32 [rows, n_act]
    pooled: Optional[np.ndarray] = None  # float32 [rows, d]: embedding batches only
