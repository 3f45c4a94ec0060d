"""Bounded LRU caches with hit and miss counters, safe to share between threads.

The engine keeps two: the question heads it has laid out (the tokenization of a question's
instructions and options, which repeat across requests), and the raw outputs of rows it has
run. Because a row's logits are the same bits whatever batch it runs in, a cached output is
exactly what a new forward pass would give.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Dict, Generic, Hashable, Optional, TypeVar

V = TypeVar("V")

ANSWER_CACHE = 4096
"""Rows whose outputs an engine keeps unless told otherwise (`answer_cache=`, `kime serve
--answer-cache`): one default for `Kime`, its executor, `kime.load`/`Agent` and the server."""


class LRU(Generic[V]):
    """At most `capacity` entries; the least recently used goes first. Capacity 0 disables it."""

    def __init__(self, capacity: int):
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError("a cache size must be a non-negative integer, got %r" % (capacity,))
        self.capacity = capacity
        self.hits = 0
        self.misses = 0
        self._items: "OrderedDict[Hashable, V]" = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Optional[V]:
        if not self.capacity:
            return None
        with self._lock:
            value = self._items.get(key)
            if value is None:
                self.misses += 1
                return None
            self._items.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key: Hashable, value: V) -> None:
        if not self.capacity:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.hits = self.misses = 0

    def __len__(self) -> int:
        return len(self._items)

    def stats(self) -> Dict[str, float]:
        total = self.hits + self.misses
        return {"size": len(self._items), "capacity": self.capacity, "hits": self.hits,
                "misses": self.misses, "hit_ratio": self.hits / total if total else 0.0}
