"""Rows -> batches under a token budget.

Rows are packed end to end with no padding, so a batch costs its total token count and nothing
is wasted on the shorter rows of a batch: the only rule is the budget (the backend's largest
bucket). Order is kept, so outputs map back to rows by position; a row longer than the budget
(a request that raised `max_len`) runs in a batch of its own.
"""
from __future__ import annotations

from typing import List, Sequence


def split(lengths: Sequence[int], budget: int) -> List[range]:
    """Consecutive rows grouped into batches of at most `budget` tokens (a longer row alone)."""
    out: List[range] = []
    start = 0
    while start < len(lengths):
        end, tokens = start, 0
        while end < len(lengths) and (end == start or tokens + lengths[end] <= budget):
            tokens += lengths[end]
            end += 1
        out.append(range(start, end))
        start = end
    return out
