"""Laya's embedders for the shortlist: `embed_fn_from_agent` and `cached_embed_fn`, with Laya
0.4.15's signatures, defaults and refusals (`laya.shortlist`), on kime's engine.

`embed_fn_from_agent` is `Kime.embed` on the agent's engine: the mean over a text's tokens of the
encoder's last hidden state, the decision head not run. Laya pads each `batch_size` chunk and
masks the padding out of the mean; kime runs the rows unpadded in shared batches, so a text's
vector does not depend on the chunk it falls in, and `batch_size` is checked but changes nothing.

`cached_embed_fn` wraps any embedder with Laya's per-string LRU cache: the lock guards the cache
alone, never the embedding call, so threads share one wrapper.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

from ..engine import Kime

EmbedFn = Callable[[Sequence[Optional[str]]], Any]


class CachedEmbedFn:
    """What `cached_embed_fn` returns: callable on a list of strings, with Laya's
    `cache_info()` and `cache_clear()`."""

    def __init__(self, embed_fn: EmbedFn, maxsize: int):
        self._embed_fn = embed_fn
        self._maxsize = maxsize
        self._rows: "OrderedDict[str, np.ndarray]" = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def __call__(self, texts: Sequence[Optional[str]]) -> np.ndarray:
        keys = ["" if text is None else str(text) for text in texts]
        if not keys:
            return np.zeros((0, 0), dtype=np.float32)
        found: Dict[str, np.ndarray] = {}
        with self._lock:
            for key in keys:
                row = self._rows.get(key)
                if row is not None:
                    self._rows.move_to_end(key)
                    found[key] = row
            hits = sum(1 for key in keys if key in found)
            self._hits += hits
            self._misses += len(keys) - hits
            missing = [key for key in dict.fromkeys(keys) if key not in found]
        if missing:
            fresh = _as_rows(self._embed_fn(list(missing)), len(missing))
            with self._lock:
                if self._rows:
                    # Rows of two widths would not stack into one matrix: a changed embedder
                    # is refused rather than mixed (under the lock: a concurrent eviction or
                    # clear changes what this reads).
                    want = next(iter(self._rows.values())).shape[0]
                    if fresh.shape[1] != want:
                        raise ValueError("embed_fn returned dim %d, but the cache holds dim %d; "
                                         "call cache_clear() if the model behind embed_fn "
                                         "changed" % (fresh.shape[1], want))
                for key, row in zip(missing, fresh):
                    self._rows[key] = row
                    self._rows.move_to_end(key)
                    while len(self._rows) > self._maxsize:
                        self._rows.popitem(last=False)
                    found[key] = row
        return np.stack([found[key] for key in keys])

    def cache_info(self) -> Dict[str, int]:
        """`size`, `maxsize`, `hits` and `misses`, as Laya counts them (per string looked up)."""
        with self._lock:
            return {"size": len(self._rows), "maxsize": self._maxsize, "hits": self._hits,
                    "misses": self._misses}

    def cache_clear(self) -> None:
        """Drop every cached row and reset the counts."""
        with self._lock:
            self._rows.clear()
            self._hits = 0
            self._misses = 0


def _as_rows(raw: Any, n: int) -> np.ndarray:
    """An embedder's output as float32 [n, dim] with non-finite values as 0, or Laya's refusal.
    A tensor-like (`detach`) is read through NumPy, without importing torch."""
    if hasattr(raw, "detach"):
        raw = raw.detach().float().cpu().numpy()
    fresh = np.asarray(raw, dtype=np.float32)
    if fresh.ndim != 2 or fresh.shape[0] != n or fresh.shape[1] < 1:
        raise ValueError("embed_fn must return an array of shape (%d, dim), got %s"
                         % (n, tuple(fresh.shape)))
    return np.nan_to_num(fresh, copy=True, nan=0.0, posinf=0.0, neginf=0.0)


def _check_positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError("%s must be a positive integer, got %r" % (name, value))
    return value


def _engine_of(agent: Any) -> Kime:
    """The engine an Agent answers with. Laya reads `agent.tok` and `agent.model.encoder`, which
    only an Agent has: anything else (a Router) fails on the attribute, as it does in Laya."""
    engine = getattr(agent, "engine", None)
    if not isinstance(engine, Kime):
        raise AttributeError("'%s' object has no attribute 'tok'" % type(agent).__name__)
    return engine


def embed_fn_from_agent(agent: Any, max_length: int = 512,
                        batch_size: int = 32) -> Callable[[Sequence[Optional[str]]], np.ndarray]:
    """An embedder over the checkpoint encoder already loaded on `agent` (a `kime.load` Agent):
    texts -> float32 [len(texts), hidden], each the mean-pooled last hidden state of the encoder,
    padding excluded, as Laya's. It does not run the decision head and loads nothing.

    `max_length` bounds a text's tokens, its specials included; `batch_size` is checked as
    Laya checks it, but kime's rows run unpadded in shared batches whatever their chunk, so it
    changes neither the vectors nor how they are batched."""
    length = _check_positive("max_length", max_length)
    _check_positive("batch_size", batch_size)
    engine = _engine_of(agent)

    def embed_fn(texts: Sequence[Optional[str]]) -> np.ndarray:
        rows: List[Optional[str]] = ["" if text is None else str(text) for text in texts]
        return engine.embed(rows, max_length=length)

    return embed_fn


def cached_embed_fn(embed_fn: EmbedFn, maxsize: int = 4096) -> CachedEmbedFn:
    """`embed_fn` with an LRU cache of at most `maxsize` strings, as Laya's: exact-string
    lookups, the misses of one call deduplicated and embedded in one `embed_fn` call, rows kept
    as float32 with NaN and infinities as 0.0 (a repaired row is cached), nothing cached when
    `embed_fn` raises or returns a bad shape. `cache_info()` gives `size`, `maxsize`, `hits` and
    `misses`; `cache_clear()` empties it (do so when the model behind `embed_fn` changes)."""
    if not callable(embed_fn):
        raise TypeError("embed_fn must be callable")
    return CachedEmbedFn(embed_fn, _check_positive("maxsize", maxsize))


__all__ = ["CachedEmbedFn", "cached_embed_fn", "embed_fn_from_agent"]
