"""Text -> token ids and marker positions, with Laya's budget and cut rules (`build_head`,
`build_sequence` in `laya/common.py`).

A row is `[CLS] head [SEP] [MASK] opt_0 [MASK] opt_1 ... [SEP] state [SEP]`. The head half depends
only on the question and the budget, so it is built once per question and call; the state is
tokenized once per request and sliced per question. That is also why a question whose markers
do not fit is an error for the whole call, whatever the state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from .render import Question, head_text, render_options
from .tokenizer import Tokenizer

OPTION_TOKENS = 48
"""Tokens an option keeps before any crowding cut (Laya's `max_length=48`)."""
MIN_OPTION_ROOM = 16
MIN_OPTION_TOKENS = 4
MIN_HEAD_TOKENS = 8


@dataclass(frozen=True)
class Head:
    """The question half of a row: ids up to and including the [SEP] after the options."""

    ids: List[int]
    markers: List[int]
    options: int
    options_distinct: int
    tokens_per_option: Optional[int]

    def collapsed(self) -> Optional[Dict[str, Optional[int]]]:
        """Laya's `usage.options` entry when options lost their own token span, else None."""
        if self.options_distinct < self.options:
            return {"total": self.options, "distinct": self.options_distinct,
                    "tokens_per_option": self.tokens_per_option}
        return None


@dataclass(frozen=True)
class Row:
    """One question's token sequence against one state."""

    ids: List[int]
    markers: List[int]
    state_tokens: int
    state_tokens_used: int

    @property
    def state_tokens_dropped(self) -> int:
        return self.state_tokens - self.state_tokens_used


def build_head(tok: Tokenizer, q: Question, head_max_len: int) -> Head:
    """Lay out the instructions and options, cutting crowded options and long instructions."""
    mask = tok.mask_text
    options = render_options(q)
    order = q.order if q.order is not None else range(len(options))
    head_ids = tok.encode(head_text(q, mask))
    encoded = tok.encode_many([" " + options[i].replace(mask, " ") for i in order])
    option_ids = [[tok.mask_id] + ids[:OPTION_TOKENS] for ids in encoded]
    room = head_max_len - sum(len(o) for o in option_ids)
    per_option = None
    if room < MIN_OPTION_ROOM:
        per_option = max(MIN_OPTION_TOKENS, (head_max_len - MIN_OPTION_ROOM) // max(1, len(option_ids)))
        option_ids = [o[:per_option] for o in option_ids]
        room = head_max_len - sum(len(o) for o in option_ids)
    ids = [tok.cls_id] + head_ids[:max(MIN_HEAD_TOKENS, room)] + [tok.sep_id]
    markers = []
    for o in option_ids:
        markers.append(len(ids))
        ids.extend(o)
    ids.append(tok.sep_id)
    return Head(ids=ids, markers=markers, options=len(option_ids),
                options_distinct=len({tuple(o) for o in option_ids}),
                tokens_per_option=per_option)


def fitting_markers(head: Head, max_len: int) -> int:
    """How many of the head's markers land inside `max_len` (all of them, or it is an error)."""
    return sum(1 for m in head.markers if m < max_len)


def build_row(head: Head, state_ids: Sequence[int], max_len: int, keep_end: bool, sep_id: int) -> Row:
    """Append as much of the state as fits, keeping its start (or its end for a conversation)."""
    room = max(0, max_len - len(head.ids) - 1)
    n = len(state_ids)
    # Not state_ids[-room:]: with no room that would keep the whole state instead of none of it.
    used = state_ids[max(0, n - room):] if keep_end else state_ids[:room]
    ids = (head.ids + list(used) + [sep_id])[:max_len]
    markers = [m for m in head.markers if m < max_len]
    return Row(ids=ids, markers=markers, state_tokens=n, state_tokens_used=len(used))
