"""The packed batch a backend runs, and the outputs it fills.

Rows of different lengths are packed end to end with no padding: row r is
`ids[cu[r]:cu[r+1]]`, its option markers (positions inside the row) are
`markers[mcu[r]:mcu[r+1]]`, and its question type is `qtype[r]`. The only shape that matters to
a backend is the total token count, which is what buckets are sized by.

An embedding batch (`embed=True`) runs the encoder alone: its rows have no markers, and the
backend answers each with the mean of the row's last hidden state (`Outputs.pooled`). It runs in
the same plan (bucket, arena) as a decision batch of as many tokens; the decision head does not
run, so it costs the encoder alone.
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

    @property
    def rows(self) -> int:
        return int(self.qtype.shape[0])

    @property
    def tokens(self) -> int:
        return int(self.cu[-1])

    @classmethod
    def pack(cls, rows: Sequence[Sequence[int]], markers: Sequence[Sequence[int]],
             qtypes: Sequence[int], embed: bool = False) -> "Batch":
        """Pack rows; a row's markers must lie inside it."""
        lengths = [len(r) for r in rows]
        counts = [len(m) for m in markers]
        cu = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(lengths, out=cu[1:])
        mcu = np.zeros(len(rows) + 1, dtype=np.int32)
        np.cumsum(counts, out=mcu[1:])
        flat_ids: List[int] = [t for r in rows for t in r]
        flat_markers: List[int] = [m for ms in markers for m in ms]
        return cls(ids=np.asarray(flat_ids, dtype=np.int32), cu=cu,
                   markers=np.asarray(flat_markers, dtype=np.int32), mcu=mcu,
                   qtype=np.asarray(qtypes, dtype=np.int32), embed=embed)

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
