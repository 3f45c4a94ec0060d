"""One thread per engine that merges the rows of every caller into shared backend batches.

Callers (threads, `decide_async`, later the HTTP server) lay their requests out on their own
threads and hand the rows here. When the device is idle a submission runs at once, alone: there
is no waiting window. While a batch runs, new submissions queue, and the next batch takes every
queued submission that fits the token budget; a submission larger than the budget runs alone
instead of blocking the queue. A submission whose caller went away (its future was cancelled)
before its turn is dropped without a forward pass. Rows' outputs do not depend on their batch,
so every caller gets exactly the answers it would get alone.
"""
from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Callable, List, Optional, Sequence, Tuple

from .executor import RowOutput
from .layout import Row

RowOutputs = List[RowOutput]
Runner = Callable[[Sequence[Row], Sequence[int], bool], Tuple[RowOutputs, int]]


@dataclass
class Work:
    rows: Sequence[Row]
    qtypes: Sequence[int]
    cache: bool
    future: "Future[Tuple[RowOutputs, int]]" = field(default_factory=Future)

    @property
    def tokens(self) -> int:
        return sum(len(r.ids) for r in self.rows)


class _Lane:
    """One scheduler thread and the queue only it reads. `close` ends a lane with a stop signal
    and a later `submit` opens a new one, so work is never queued behind a lane's stop."""

    __slots__ = ("queue", "held", "thread")

    def __init__(self) -> None:
        self.queue: "queue.Queue[Optional[Work]]" = queue.Queue()
        self.held: Optional[Work] = None  # a submission that did not fit: it leads the next batch
        self.thread: Optional[threading.Thread] = None


class Scheduler:
    """Runs `runner(rows, qtypes, cache)` (the executor's `run`) on its own thread over merged
    submissions.

    `close` finishes what is queued and stops the thread; a later `submit` starts a new one (a
    Router lets an engine's thread go when it evicts the engine, and a caller still holding it
    may call again). A submission and a close that race are ordered by one lock: the
    submission either lands before the stop signal and runs, or opens the next thread."""

    def __init__(self, runner: Runner, budget: int, max_merge: int = 0):
        self._runner = runner
        self.budget = budget
        self.max_merge = max_merge  # submissions one run may take; 0: as many as fit the budget
        self._lane: Optional[_Lane] = None
        self._lock = threading.Lock()  # orders submit against close: never a put behind a stop
        self.runs = 0  # forward runs: each takes one or more merged submissions
        self.batches = 0  # backend batches those runs took
        self.merged = 0  # submissions that shared a run with an earlier one
        self.rows = 0  # rows handed to the runner
        self.dropped = 0  # cancelled before their turn

    def submit(self, rows: Sequence[Row], qtypes: Sequence[int],
               cache: bool = True) -> "Future[Tuple[RowOutputs, int]]":
        """Queue rows; the future gives (outputs per row, backend batches of the merged run)."""
        work = Work(rows, qtypes, cache)
        with self._lock:
            lane = self._lane
            if lane is None:
                lane = self._lane = _Lane()
                lane.thread = threading.Thread(target=self._loop, args=(lane,),
                                               name="kime-scheduler", daemon=True)
                lane.thread.start()
            lane.queue.put(work)
        return work.future

    def depth(self) -> int:
        """Submissions waiting for the device."""
        lane = self._lane
        if lane is None:
            return 0
        return lane.queue.qsize() + (1 if lane.held else 0)

    def close(self) -> None:
        """Finish what is queued, then stop the thread (a later `submit` starts another)."""
        with self._lock:
            lane, self._lane = self._lane, None
            if lane is None:
                return
            lane.queue.put(None)
        if lane.thread is not None and lane.thread is not threading.current_thread():
            lane.thread.join()

    def _take(self, lane: _Lane, first: Work) -> Tuple[List[Work], bool]:
        """`first` plus every queued submission that fits beside it; and whether to stop after."""
        taken, tokens = [first], first.tokens
        while tokens < self.budget and (self.max_merge <= 0 or len(taken) < self.max_merge):
            try:
                nxt = lane.queue.get_nowait()
            except queue.Empty:
                break
            if nxt is None:
                return taken, True
            if tokens + nxt.tokens > self.budget or nxt.cache != first.cache:
                lane.held = nxt  # keeps its place: it leads the next batch
                break
            taken.append(nxt)
            tokens += nxt.tokens
        return taken, False

    def _loop(self, lane: _Lane) -> None:
        while True:
            if lane.held is not None:
                first: Optional[Work] = lane.held
                lane.held = None
            else:
                first = lane.queue.get()
            if first is None:
                return
            batch, stop = self._take(lane, first)
            live = [w for w in batch if w.future.set_running_or_notify_cancel()]
            self.dropped += len(batch) - len(live)
            if live:
                self._run(live)
            if stop:
                return

    def _run(self, works: List[Work]) -> None:
        rows = [r for w in works for r in w.rows]
        qtypes = [q for w in works for q in w.qtypes]
        try:
            outputs, batches = self._runner(rows, qtypes, works[0].cache)
        except BaseException as e:  # every caller of the merged batch hears about it
            for w in works:
                w.future.set_exception(e)
            return
        self.runs += 1
        self.rows += len(rows)
        self.batches += batches
        self.merged += len(works) - 1
        at = 0
        for w in works:
            w.future.set_result((outputs[at:at + len(w.rows)], batches))
            at += len(w.rows)
