"""Text -> token ids and marker positions, with Laya's budget and cut rules (`build_head`,
`build_sequence` in `laya/common.py`).

A row is `[CLS] head [SEP] [MASK] opt_0 [MASK] opt_1 ... [SEP] state [SEP]`. The head half depends
only on the question and the budget, so it is built once per question and call; the state is
tokenized once per request and sliced per question. That is also why a question whose markers
do not fit is an error for the whole call, whatever the state.

A checkpoint trained with `option_layout="parallel"` reads the same ids with Laya's parallel
layout (`parallel_layout`): each token also gets a position id and an option id, which the encoder
uses for RoPE and to keep options from seeing each other.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple, TypedDict

from .cache import LRU
from .errors import InvalidArgument, Problem, TooLong, problem
from .render import Question, State, head_text, render_options, serialize_state
from .tokenizer import Tokenizer

OPTION_TOKENS = 48
"""Tokens an option keeps before any crowding cut (Laya's `max_length=48`)."""
MIN_OPTION_ROOM = 16
MIN_OPTION_TOKENS = 4
MIN_HEAD_TOKENS = 8


class CollapsedOptions(TypedDict):
    """Laya's `usage.options` entry for a question whose options were cut until some of them
    share one token span (the model can no longer tell those apart)."""

    total: int
    distinct: int
    tokens_per_option: Optional[int]


@dataclass(frozen=True)
class Head:
    """The question half of a row: ids up to and including the [SEP] after the options."""

    ids: List[int]
    markers: List[int]
    options: int
    options_distinct: int
    tokens_per_option: Optional[int]

    def collapsed(self) -> Optional[CollapsedOptions]:
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
    positions: Optional[List[int]] = None  # parallel layout only: each token's position id
    option_ids: Optional[List[int]] = None  # parallel layout only: 0 shared, s + 1 in slot s

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
        per_option = max(MIN_OPTION_TOKENS,
                         (head_max_len - MIN_OPTION_ROOM) // max(1, len(option_ids)))
        option_ids = [o[:per_option] for o in option_ids]
        room = head_max_len - sum(len(o) for o in option_ids)
    ids = [tok.cls_id] + head_ids[:max(MIN_HEAD_TOKENS, room)] + [tok.sep_id]
    markers: List[int] = []
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


def parallel_layout(markers: Sequence[int], head_len: int,
                    length: int) -> Tuple[List[int], List[int]]:
    """Laya's parallel option layout of a row of `length` tokens whose head (`head_len` tokens,
    ending in the [SEP] after the options) has option markers `markers`: (position ids, option
    ids), one per token.

    Every option slot, from its [MASK] to the next marker (the last one to the head's closing
    [SEP]), starts at the position just after the instruction's [SEP], so where an option is
    listed does not move its positions; the closing [SEP] and the state go on after the longest
    slot. A slot's tokens get option id s + 1, everything else 0. No markers: the plain layout.
    """
    if not markers:
        return list(range(length)), [0] * length
    start = markers[0]
    ends = list(markers[1:]) + [head_len - 1]
    positions: List[int] = list(range(start))
    option_ids: List[int] = [0] * start
    longest = 0
    for s, (a, b) in enumerate(zip(markers, ends)):
        positions.extend(range(start, start + b - a))
        option_ids.extend([s + 1] * (b - a))
        longest = max(longest, b - a)
    after = start + longest
    positions.extend(range(after, after + length - len(positions)))
    option_ids.extend([0] * (length - len(option_ids)))
    return positions, option_ids


def build_row(head: Head, state_ids: Sequence[int], max_len: int, keep_end: bool,
              sep_id: int, parallel: bool = False) -> Row:
    """Append as much of the state as fits, keeping its start (or its end for a conversation);
    `parallel` adds the row's parallel layout."""
    room = max(0, max_len - len(head.ids) - 1)
    n = len(state_ids)
    # Not state_ids[-room:]: with no room that would keep the whole state instead of none of it.
    used = state_ids[max(0, n - room):] if keep_end else state_ids[:room]
    full = head.ids + list(used) + [sep_id]
    ids = full[:max_len]
    markers = [m for m in head.markers if m < max_len]
    if not parallel:
        return Row(ids=ids, markers=markers, state_tokens=n, state_tokens_used=len(used))
    # Laid out on the uncut row, as Laya does: a marker cut by max_len must not widen the span
    # of the last one that survives.
    positions, option_ids = parallel_layout(head.markers, len(head.ids), len(full))
    return Row(ids=ids, markers=markers, state_tokens=n, state_tokens_used=len(used),
               positions=positions[:max_len], option_ids=option_ids[:max_len])


@dataclass
class Job:
    """One request, laid out: its questions, and one row and one head per question."""

    questions: List[Question]
    rows: List[Row]
    heads: List[Head]


class Layouter:
    """A checkpoint's tokenizer and budgets, with a bounded cache of question heads.

    `parallel` lays rows out in Laya's parallel option layout (the checkpoint's `option_layout`).
    A head depends only on the question's rendering and `head_max_len`, so the same question
    asked again (a server's fixed question set) is laid out once; `capacity=0` switches the
    cache off. Thread-safe: the LRU locks, and a head is immutable.
    """

    def __init__(self, tok: Tokenizer, max_len: int, head_max_len: int, capacity: int = 1024,
                 parallel: bool = False):
        self.tok = tok
        self.max_len = max_len
        self.head_max_len = head_max_len
        self.parallel = parallel  # the checkpoint's option_layout is "parallel"
        self.cache: LRU[Head] = LRU(capacity)

    def head(self, q: Question, head_max_len: int, cache: bool = True) -> Head:
        """A question's head, from the cache when its rendering was laid out before."""
        if not cache or not self.cache.capacity:
            return build_head(self.tok, q, head_max_len)
        key = (q.qtype, q.instructions, tuple(render_options(q)), q.order, head_max_len)
        head = self.cache.get(key)
        if head is None:
            head = build_head(self.tok, q, head_max_len)
            self.cache.put(key, head)
        return head

    def heads(self, questions: Sequence[Question], head_max_len: int, max_len: int,
              loc: Sequence[object] = (), cache: bool = True) -> List[Head]:
        """Each question's head; raises `TooLong` naming every question whose markers do not fit
        (Laya refuses those too, whatever the state)."""
        heads = [self.head(q, head_max_len, cache) for q in questions]
        problems: List[Problem] = []
        for q, head in zip(questions, heads):
            fit = fitting_markers(head, max_len)
            if fit != head.options:
                problems.append(problem(
                    list(loc) + ["questions", q.id],
                    "question %r: only %d of its %d option markers fit in max_len=%d with "
                    "head_max_len=%d spent on the question; lower head_max_len, raise max_len, or "
                    "use fewer options" % (q.id, fit, head.options, max_len, head_max_len),
                    "value_error.too_long", head.options))
        if problems:
            raise TooLong(problems)
        return heads

    def state_ids(self, state: State, loc: Sequence[object] = ("state",)) -> List[int]:
        """The state's ids, tokenized once for all its questions (mask text blanked)."""
        try:
            text = serialize_state(state)
        except (TypeError, ValueError) as e:
            raise InvalidArgument([problem(list(loc), "state must be JSON-serializable: %s" % e,
                                           "type_error.json", state)]) from e
        except RecursionError:
            raise InvalidArgument([problem(list(loc), "state is nested too deeply to serialise as "
                                           "JSON; flatten it", "value_error.depth",
                                           "<nested too deeply to show>")]) from None
        return self.tok.encode(text.replace(self.tok.mask_text, " "))

    def budgets(self, max_len: Optional[int], head_max_len: Optional[int]) -> Tuple[int, int]:
        """A request's (max_len, head_max_len): its own, else the checkpoint's."""
        return (self.max_len if max_len is None else max_len,
                self.head_max_len if head_max_len is None else head_max_len)

    def job(self, state: State, questions: List[Question], heads: List[Head], max_len: int,
            loc: Sequence[object] = ()) -> Job:
        """One state against heads already built: a row per question. A conversation (a list
        state) keeps its end when cut, anything else its start."""
        if not questions:
            return Job([], [], [])
        state_ids = self.state_ids(state, list(loc) + ["state"])
        keep_end = isinstance(state, list)
        rows = [build_row(h, state_ids, max_len, keep_end, self.tok.sep_id, self.parallel)
                for h in heads]
        return Job(list(questions), rows, heads)
