"""The scheduler: a lone submission runs at once, queued ones merge up to the budget, an
oversized one runs alone, a cancelled one never reaches the device, and every caller of a
merged batch gets the answers it would get alone.

No test sleeps and hopes: a batch that others must queue behind is held on an event or on a
polled condition (the scheduler's depth), with a deadline, so the tests mean the same on a slow
or busy machine."""
from __future__ import annotations

import asyncio
import sys
import threading
import time
import warnings
from typing import Callable, List

import numpy as np
import pytest

import kime
from kime.batch import Batch
from kime.layout import Row
from kime.scheduler import Scheduler


def _row(n: int, tag: int) -> Row:
    return Row(ids=[tag] * n, markers=[0], state_tokens=0, state_tokens_used=0)


class GatedRunner:
    """Records each run's rows; the first run waits until released, so others queue behind it."""

    def __init__(self):
        self.runs = []
        self.gate = threading.Event()
        self.started = threading.Event()

    def __call__(self, rows, qtypes, cache):
        self.runs.append([r.ids[0] for r in rows])
        self.started.set()
        self.gate.wait(5)
        return [(np.array([float(r.ids[0])], np.float32), np.zeros(2, np.float32)) for r in rows], 1


def test_idle_runs_at_once_then_queued_work_merges_within_the_budget():
    runner = GatedRunner()
    s = Scheduler(runner, budget=100)
    first = s.submit([_row(10, 1)], [0])
    assert runner.started.wait(5)  # ran at once, alone, with nothing else queued
    later = [s.submit([_row(30, tag)], [0]) for tag in (2, 3, 4)]  # 90 tokens: fit together
    big = s.submit([_row(150, 5)], [0])  # over the budget: alone
    after = s.submit([_row(5, 6)], [0])
    assert s.depth() == 5
    runner.gate.set()
    for f in [first, *later, big, after]:
        f.result(5)
    assert runner.runs == [[1], [2, 3, 4], [5], [6]]
    # Each caller got its own rows' outputs back.
    assert [float(f.result()[0][0][0][0]) for f in later] == [2.0, 3.0, 4.0]
    assert s.merged == 2 and s.runs == 4
    s.close()


@pytest.mark.parametrize("max_merge, want", [(1, [[1], [2], [3], [4], [5]]),
                                             (2, [[1], [2, 3], [4, 5]]),
                                             (0, [[1], [2, 3, 4, 5]])])
def test_max_merge_bounds_the_submissions_per_run(max_merge, want):
    runner = GatedRunner()
    s = Scheduler(runner, budget=1000, max_merge=max_merge)
    futures = [s.submit([_row(10, 1)], [0])]
    assert runner.started.wait(5)
    futures += [s.submit([_row(10, tag)], [0]) for tag in (2, 3, 4, 5)]
    runner.gate.set()
    for f in futures:
        f.result(5)
    assert runner.runs == want and s.runs == len(want)
    s.close()


def test_cancelled_submission_never_reaches_the_device():
    runner = GatedRunner()
    s = Scheduler(runner, budget=100)
    s.submit([_row(10, 1)], [0])
    assert runner.started.wait(5)
    gone = s.submit([_row(10, 2)], [0])
    kept = s.submit([_row(10, 3)], [0])
    assert gone.cancel()
    runner.gate.set()
    kept.result(5)
    assert runner.runs == [[1], [3]] and s.dropped == 1
    s.close()


def test_runner_errors_reach_every_caller_of_the_batch():
    def broken(rows, qtypes, cache):
        raise RuntimeError("device fell over")

    s = Scheduler(broken, budget=100)
    with pytest.raises(RuntimeError, match="fell over"):
        s.submit([_row(3, 1)], [0]).result(5)
    s.close()


QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?",
                      "criteria": ["billing", "tech", "sales"]},
             "spam": {"type": "noul", "instructions": "Is it spam?"}}


def shared_or_queued(engine: kime.Kime, queued: int) -> Callable[[Batch], bool]:
    """A hold that ends once callers have merged: the held batch already carries more than one
    caller's rows, or `queued` submissions wait behind it (they then share the next batch)."""
    rows_per_call = len(QUESTIONS)
    return lambda batch: batch.rows > rows_per_call or engine.scheduler.depth() >= queued


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    """Poll `condition` until it holds or `timeout` seconds pass; whether it held."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


@pytest.fixture()
def held_engine(tiny_path, monkeypatch):
    """A CPU engine and its list of holds: while the list is not empty, the backend's next batch
    first waits until the list's first condition holds for it, so callers queue behind that
    batch however fast the machine is. The public backend's `run` is wrapped; nothing private."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        engine = kime.Kime(str(tiny_path), device="cpu", threads=1)
    run = engine.backend.run
    holds: List[Callable[[Batch], bool]] = []

    def held_run(batch: Batch):
        if holds:
            hold = holds.pop(0)
            assert wait_until(lambda: hold(batch)), "no callers shared or queued behind the batch"
        return run(batch)

    monkeypatch.setattr(engine.backend, "run", held_run)
    yield engine, holds
    engine.close()


def test_threads_merge_and_each_gets_its_answers_alone(held_engine):
    engine, holds = held_engine
    states = ["ticket %d: " % i + "charged twice " * (i % 7 + 1) for i in range(24)]
    alone = [engine.decide({"state": s, "questions": QUESTIONS}, cache=False) for s in states]
    results = [None] * len(states)

    def call(i):
        results[i] = engine.decide({"state": states[i], "questions": QUESTIONS}, cache=False)

    before = engine.scheduler.merged
    holds.append(shared_or_queued(engine, queued=2))
    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(states))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not holds and all(r is not None for r in results)
    assert engine.scheduler.merged > before  # callers shared batches
    for got, want in zip(results, alone):
        for qid in QUESTIONS:
            assert got[qid].logits.tobytes() == want[qid].logits.tobytes()


def test_async_callers_merge_and_a_cancelled_task_is_dropped(held_engine):
    engine, holds = held_engine
    before = engine.scheduler.merged
    holds.append(shared_or_queued(engine, queued=3))  # three: one may be the cancelled caller

    async def main():
        reqs = [{"state": "async %d" % i, "questions": QUESTIONS} for i in range(8)]
        tasks = [asyncio.create_task(engine.decide_async(r, cache=False)) for r in reqs]
        victim = asyncio.create_task(engine.decide_async(
            {"state": "nobody waits for me " * 5, "questions": QUESTIONS}, cache=False))
        await asyncio.sleep(0)
        victim.cancel()
        done = await asyncio.gather(*tasks)
        with pytest.raises(asyncio.CancelledError):
            await victim
        return reqs, done

    reqs, done = asyncio.run(main())
    assert not holds and engine.scheduler.merged > before
    for req, got in zip(reqs, done):
        want = engine.decide(req, cache=False)
        for qid in QUESTIONS:
            np.testing.assert_array_equal(got[qid].logits, want[qid].logits)


def joining(thread: threading.Thread) -> bool:
    """Whether `thread` is blocked in `Thread.join` (read off its stack, not guessed by a
    sleep)."""
    frame = sys._current_frames().get(thread.ident or -1)
    while frame is not None:
        if frame.f_code.co_name == "join" and frame.f_code.co_filename == threading.__file__:
            return True
        frame = frame.f_back
    return False


def test_a_submit_racing_close_is_answered_not_left_behind_the_stop():
    """Issue 53: a submission that landed while `close` was stopping the thread was queued
    behind the stop signal, and its future never completed (`Kime.decide` blocked for good)."""
    runner = GatedRunner()
    s = Scheduler(runner, budget=4096)
    first = s.submit([_row(3, 1)], [0])
    assert runner.started.wait(5)  # the thread is busy: close must wait for it
    closing = threading.Thread(target=s.close)
    closing.start()
    assert wait_until(lambda: joining(closing))  # close has sent its stop and waits
    late = s.submit([_row(3, 2)], [0])  # lands while close waits for the running batch
    runner.gate.set()
    closing.join(5)
    assert not closing.is_alive()
    first.result(5)
    assert float(late.result(5)[0][0][0][0]) == 2.0
    s.close()


def test_submits_and_closes_from_many_threads_all_complete():
    """Every future completes, whatever order closes and submissions land in."""
    def runner(rows, qtypes, cache):
        time.sleep(0.0005)  # a run in flight, so a close often waits while others submit
        return [(np.array([float(r.ids[0])], np.float32), np.zeros(2, np.float32))
                for r in rows], 1

    s = Scheduler(runner, budget=64)
    futures: List = []
    lock = threading.Lock()

    def submitter(tag: int) -> None:
        for _ in range(200):
            f = s.submit([_row(2, tag)], [0])
            with lock:
                futures.append((tag, f))

    def closer() -> None:
        for _ in range(200):
            s.close()

    threads = [threading.Thread(target=submitter, args=(t,)) for t in range(4)]
    threads.append(threading.Thread(target=closer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(futures) == 800
    for tag, f in futures:
        assert float(f.result(5)[0][0][0][0]) == float(tag)
    s.close()
