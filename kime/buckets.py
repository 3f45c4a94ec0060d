"""Buckets: the total-token sizes a backend builds a plan for.

A batch is rows packed end to end, so the only shape a plan depends on is its total token
count. Plans are built for powers of two from `BUCKETS[0]`; a batch takes the smallest bucket
that holds it, and the executor fills batches up to the largest bucket (`kime.split`). A
single row longer than that (a request that raised `max_len`) gets a bucket of its own.
"""
from __future__ import annotations

from typing import Sequence

BUCKETS = (256, 512, 1024, 2048, 4096)
"""4096 tokens holds eight 512-token rows, about 170 MB of activations on ModernBERT-base:
larger buckets gain little on two cores and cost peak memory."""
PRELOAD = 3
"""`preload=True` builds this many of the smallest buckets at load."""


def pick_bucket(tokens: int, buckets: Sequence[int] = BUCKETS) -> int:
    """The smallest bucket that holds `tokens`, or the next power of two above the largest."""
    for b in buckets:
        if tokens <= b:
            return b
    size = buckets[-1]
    while size < tokens:
        size *= 2
    return size

