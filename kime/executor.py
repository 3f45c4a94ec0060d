"""The executor: rows already laid out -> their raw outputs, through one backend.

It owns everything between a list of rows and the backend: the answer cache (rows run before
are not run again), the split into batches that fit the backend's largest bucket, packing, the
run under the backend's lock, and copying the outputs out of the backend's reused buffers. It
knows nothing of questions or Laya: a row is token ids, marker positions and a question type.

Every row gets exactly one output or the call raises `BackendError`: an output can never shift
onto another row.

A row of question type `EMBED` asks for its embedding instead of a decision: such rows are
packed into embedding batches of their own (the encoder alone, in the same plans and under the
same token budget) and answered with the mean of their last hidden state. They merge with
decision rows in one call (the scheduler's shared runs) but never share a backend batch with them,
so a decision row's bits do not depend on them.
"""
from __future__ import annotations

import hashlib
import threading
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from .backend import Backend, Memory
from .batch import Batch
from .cache import ANSWER_CACHE, LRU
from .errors import BackendError
from .layout import Row
from .split import split


EMBED = -1
"""The question type of a row that asks for its embedding (its markers are ignored)."""

_NO_LOGITS = np.zeros(0, dtype=np.float32)
_NO_LOGITS.flags.writeable = False


class RowOutput(NamedTuple):
    """One row's raw outputs: the option logits at its markers, and the act probabilities. An
    `EMBED` row has no logits, and `act` holds its pooled hidden state [d]."""

    logits: np.ndarray  # float32 [markers of the row]
    act: np.ndarray  # float32 [n_act]


class Executor:
    """Runs laid-out rows on a backend. Safe to call from many threads: runs are serialised on
    one lock, because a backend reuses its buffers."""

    def __init__(self, backend: Backend, answer_cache: int = ANSWER_CACHE):
        self.backend = backend
        self.cache: LRU[RowOutput] = LRU(answer_cache)
        self.max_batch_tokens = int(backend.max_batch_tokens)
        self._lock = threading.Lock()
        self._closed = False

    def run(self, rows: Sequence[Row], qtypes: Sequence[int],
            cache: bool = True) -> Tuple[List[RowOutput], int]:
        """Each row's outputs, in order, and the number of backend batches it took. Rows found
        in the answer cache are not run; `cache=False` neither reads nor fills it."""
        if len(rows) != len(qtypes):
            raise ValueError("%d rows but %d question types" % (len(rows), len(qtypes)))
        results: List[Optional[RowOutput]] = [None] * len(rows)
        keys: List[bytes] = []
        todo: List[int] = list(range(len(rows)))
        if cache and self.cache.capacity:
            keys = [row_key(r, qt) for r, qt in zip(rows, qtypes)]
            todo = []
            for i, key in enumerate(keys):
                hit = self.cache.get(key)
                if hit is None:
                    todo.append(i)
                else:
                    results[i] = RowOutput(hit.logits.copy(), hit.act.copy())
        embeds: List[int] = []
        if EMBED in qtypes:
            embeds = [i for i in todo if qtypes[i] == EMBED]
            todo = [i for i in todo if qtypes[i] != EMBED]
        batches = split([len(rows[i].ids) for i in todo], self.max_batch_tokens)
        for part in batches:
            index = [todo[j] for j in part]
            batch = _pack([rows[i] for i in index], [qtypes[i] for i in index])
            logits, act = self._run(batch)
            for r, i in enumerate(index):
                out = RowOutput(logits[batch.mcu[r]:batch.mcu[r + 1]], act[r])
                results[i] = out
                if keys:
                    self.cache.put(keys[i], RowOutput(_frozen(out.logits), _frozen(out.act)))
        pooling = split([len(rows[i].ids) for i in embeds], self.max_batch_tokens)
        for part in pooling:
            index = [embeds[j] for j in part]
            pooled = self._embed(Batch.pack_embed([rows[i].ids for i in index]))
            for r, i in enumerate(index):
                out = RowOutput(_NO_LOGITS, pooled[r])
                results[i] = out
                if keys:
                    self.cache.put(keys[i], RowOutput(_NO_LOGITS, _frozen(out.act)))
        answered = [r for r in results if r is not None]
        if len(answered) < len(results):
            missing = [i for i, r in enumerate(results) if r is None]
            raise BackendError("rows %s were left unanswered by %s" % (missing[:8],
                                                                       self.backend.describe()))
        return answered, len(batches) + len(pooling)

    def _run(self, batch: Batch) -> Tuple[np.ndarray, np.ndarray]:
        """One batch under the lock; copies, because the next run overwrites the buffers."""
        with self._lock:
            if self._closed:
                raise BackendError("the model was closed; load it again to run it")
            out = self.backend.run(batch)
            logits, act = out.logits.copy(), out.act.copy()
        markers = int(batch.mcu[-1])
        if logits.shape[0] != markers or act.shape[0] != batch.rows:
            raise BackendError("%s returned %d logits and %d act rows for a batch of %d markers "
                               "and %d rows" % (self.backend.describe(), logits.shape[0],
                                                act.shape[0], markers, batch.rows))
        return logits, act

    def _embed(self, batch: Batch) -> np.ndarray:
        """One embedding batch under the lock: each row's pooled hidden state, copied."""
        with self._lock:
            if self._closed:
                raise BackendError("the model was closed; load it again to run it")
            found = self.backend.run(batch).pooled
            pooled: Optional[np.ndarray] = None if found is None else np.array(found)
        if pooled is None or pooled.ndim != 2 or pooled.shape[0] != batch.rows:
            raise BackendError("%s returned %s pooled rows for an embedding batch of %d rows"
                               % (self.backend.describe(),
                                  "no" if pooled is None else pooled.shape[0], batch.rows))
        return pooled

    def memory(self) -> Memory:
        return self.backend.memory()

    def close(self) -> None:
        """Free the backend's weights and plans, after any run in progress. Later runs raise."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self.backend.close()
        self.cache.clear()


def _pack(rows: Sequence[Row], qtypes: Sequence[int]) -> Batch:
    """A decision batch of rows; in the parallel layout when its rows are (a checkpoint's rows
    all are, or none is)."""
    ids = [r.ids for r in rows]
    markers = [r.markers for r in rows]
    laid = [r.positions is not None and r.option_ids is not None for r in rows]
    if not any(laid):
        return Batch.pack(ids, markers, qtypes)
    if not all(laid):
        raise BackendError("a batch mixes rows in the parallel and the sequential layout")
    return Batch.pack(ids, markers, qtypes, positions=[r.positions or [] for r in rows],
                      option_ids=[r.option_ids or [] for r in rows])


def row_key(row: Row, qtype: int) -> bytes:
    """What determines a row's outputs: its ids, its markers, its question type and, in the
    parallel layout, its position and option ids."""
    h = hashlib.blake2b(digest_size=20)
    h.update(np.asarray(row.ids, dtype=np.int32).tobytes())
    h.update(b"|")
    h.update(np.asarray(row.markers, dtype=np.int32).tobytes())
    h.update(bytes([qtype & 0xFF]))  # EMBED (-1) hashes as 255, a type no question has
    if row.positions is not None and qtype != EMBED:
        h.update(b"|p")
        h.update(np.asarray(row.positions, dtype=np.int32).tobytes())
        h.update(np.asarray(row.option_ids, dtype=np.int32).tobytes())
    return h.digest()


def _frozen(a: np.ndarray) -> np.ndarray:
    a = a.copy()
    a.flags.writeable = False
    return a
