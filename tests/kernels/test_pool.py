"""kime's thread pool (csrc/pool.c): tasks that threads claim, a bounded spin, teams per thread.

Every kernel test already checks that results do not depend on the thread count. These check
the pool's own promises: the bits hold when threads lose their cores (more threads than CPUs,
and beside a process that spins), a forked child starts a team of its own, a thread that exits
takes its workers with it, a worker waits out a step's last task awake, and idle workers stop
spinning after the bounded wait. They assert what the pool decides (who ran a task, whether a
worker sleeps or runs), never how long anything takes or how much CPU it costs, which a loaded
machine changes: `python -m bench.pool` measures those.
"""
from __future__ import annotations

import concurrent.futures
import os
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest

from kime._cpu import _forward, _gemm

pytestmark = pytest.mark.skipif(not _forward.pool_threaded(),
                                reason="a build without POSIX threads runs one thread")

# one shape per way a GEMM is cut: panels (a short request) and chunks of rows (a batch)
SHAPES = [(50, 96, 200), (700, 64, 96)]


def _case(rng: np.random.Generator, M: int, K: int, N: int, geglu: bool = False):
    W = rng.standard_normal((N, K), dtype=np.float32)
    A = rng.standard_normal((M, K), dtype=np.float32)
    bias = rng.standard_normal(N, dtype=np.float32)
    return A, _gemm.pack(W, geglu=geglu), bias


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


def test_bits_hold_when_threads_lose_their_cores():
    """Five threads on this machine's cores, beside a process that spins: many calls, each
    the one-thread bits, for both ways of cutting a GEMM and every epilogue."""
    rng = np.random.default_rng(0)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for M, K, N in SHAPES:
            for epi in ("store", "accum", "gelu", "geglu"):
                A, packed, bias = _case(rng, M, K, N, geglu=epi == "geglu")
                start = rng.standard_normal((M, N // 2 if epi == "geglu" else N),
                                            dtype=np.float32)
                want = _gemm.gemm(A, packed, N, K, bias, epilogue=epi, out=start.copy(),
                                  threads=1)
                for threads in (2, 3, 5):
                    for _ in range(8):
                        got = _gemm.gemm(A, packed, N, K, bias, epilogue=epi, out=start.copy(),
                                         threads=threads)
                        assert got.tobytes() == want.tobytes(), (M, K, N, epi, threads)
    finally:
        spinner.kill()
        spinner.wait()


def test_a_forked_child_starts_its_own_team():
    """The parent's workers do not exist in a fork: the child's threaded calls must neither hang
    nor differ."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    rng = np.random.default_rng(1)
    A, packed, bias = _case(rng, *SHAPES[0])
    want = _gemm.gemm(A, packed, SHAPES[0][2], SHAPES[0][1], bias, threads=1)
    parent = _gemm.gemm(A, packed, SHAPES[0][2], SHAPES[0][1], bias, threads=2)  # a team here
    assert parent.tobytes() == want.tobytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork beside threads: on purpose
        pid = os.fork()
    if pid == 0:  # the child: exit 0 only when its threaded result has the bits
        code = 1
        try:
            got = _gemm.gemm(A, packed, SHAPES[0][2], SHAPES[0][1], bias, threads=2)
            code = 0 if got.tobytes() == want.tobytes() else 3
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail("the forked child's threaded GEMM hung")


def test_an_exiting_thread_takes_its_workers():
    """Each thread that calls in gets a team; when the thread ends, its workers end too."""
    rng = np.random.default_rng(2)
    A, packed, bias = _case(rng, *SHAPES[0])
    M, K, N = SHAPES[0]
    want = _gemm.gemm(A, packed, N, K, bias, threads=1)
    before = _threads()
    results = []

    def call() -> None:
        results.append(_gemm.gemm(A, packed, N, K, bias, threads=3).tobytes())

    for _ in range(6):
        t = threading.Thread(target=call)
        t.start()
        t.join()
    assert results == [want.tobytes()] * 6
    deadline = time.monotonic() + 10
    while _threads() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _threads() <= before


def test_spin_comes_from_the_environment():
    code = "from kime._cpu import _forward; print(_forward.pool_spin_us())"
    env = dict(os.environ, KIME_SPIN_US="37")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    assert int(out.stdout) == 37
    env["KIME_SPIN_US"] = "-5"  # a negative spin means no spin, never a negative wait
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    assert int(out.stdout) == 0


def test_every_task_runs_on_a_thread_of_the_team():
    """Each task writes who ran it over a -1: a task left out, or run by a thread outside the
    team, fails; a length mismatch is refused."""
    busy = np.zeros(64, np.int32)
    tids = np.full(64, -1, np.int32)
    _forward.pool_probe(busy, tids, 3)
    assert set(tids.tolist()) <= {0, 1, 2}
    with pytest.raises(ValueError):
        _forward.pool_probe(busy, tids[:3], 2)


class _Team:
    """A thread of its own that calls the pool, so its team's one worker is new and known by its
    tid; the thread lives (and keeps its team) until `close`."""

    def __init__(self) -> None:
        self.calls = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        before = set(os.listdir("/proc/self/task"))
        caller = self.calls.submit(threading.get_native_id).result()
        self.run([0, 0])  # the team starts
        self.worker = set(os.listdir("/proc/self/task")) - before - {str(caller)}
        assert len(self.worker) == 1, self.worker

    def start(self, busy_us: list) -> "tuple[concurrent.futures.Future, np.ndarray]":
        """One step of len(busy_us) tasks on two threads, started; each task writes who ran it
        over a -1 when it ends."""
        busy = np.array(busy_us, np.int32)
        tids = np.full(len(busy_us), -1, np.int32)
        return self.calls.submit(_forward.pool_probe, busy, tids, 2), tids

    def run(self, busy_us: list) -> np.ndarray:
        call, tids = self.start(busy_us)
        call.result()
        return tids

    def state(self) -> str:
        """The worker's scheduler state: S while it sleeps on the pool's condition variable, R
        while it runs or waits for a core."""
        (tid,) = self.worker
        with open("/proc/self/task/%s/stat" % tid) as f:
            return f.read().rsplit(")", 1)[1].split()[0]

    def close(self) -> None:
        self.calls.shutdown()


def test_an_idle_worker_sleeps_after_its_bounded_spin():
    """After a step, a worker spins KIME_SPIN_US and then sleeps. With a 1 ms spin it is seen
    asleep (a worker that spun on would time the test out). With a 300 ms spin it is seen awake
    after the call has returned: a worker that ignored the spin would be asleep at every look
    (the looks are sure only while less than 300 ms have passed since the step began, so later
    ones do not count; a loaded machine that delays every look repeats the step)."""
    default = _forward.pool_spin_us()
    team = _Team()
    try:
        _forward.set_pool_spin_us(1000)
        team.run([0, 0])
        while team.state() != "S":
            time.sleep(0.001)
        _forward.set_pool_spin_us(300_000)
        awake = looks = 0
        for _ in range(20):
            began = time.monotonic()
            team.run([0, 0])
            while time.monotonic() - began < 0.25:
                state = team.state()
                if time.monotonic() - began < 0.3:  # the look was inside the spin
                    looks += 1
                    awake += state == "R"
            if awake:
                break
        if not looks:
            pytest.skip("no look at the worker within 300 ms of a step (a loaded machine)")
        assert awake, "the worker slept through its 300 ms spin (%d looks)" % looks
    finally:
        _forward.set_pool_spin_us(default)
        team.close()
    assert _forward.pool_spin_us() == default


def test_a_worker_waits_out_a_long_task_awake():
    """A worker out of tasks while the caller's long task still runs waits for the step's end
    awake, whatever its spin, since the next step comes as soon as that task ends (a sleep there
    costs a wake-up per step). With no spin at all, so that a worker leaving the step early would
    sleep at once, the worker is never seen asleep between the end of its own short task and the
    end of the caller's 200 ms one. Each look counts only when the long task is seen still
    running after it, so how busy the machine is changes how many looks there are, not what they
    see."""
    default = _forward.pool_spin_us()
    team = _Team()
    looks: list = []
    try:
        _forward.set_pool_spin_us(0)
        for _ in range(20):
            call, tids = team.start([200_000, 0])
            while not call.done():
                if tids[1] == 1:  # the worker ran the short task: the caller holds the long one
                    state = team.state()
                    if tids[0] == -1:
                        looks.append(state)
                else:
                    time.sleep(0.0002)
            call.result()
            if len(looks) >= 50:
                break
    finally:
        _forward.set_pool_spin_us(default)
        team.close()
    if not looks:
        pytest.skip("the worker never ran the short task while the long one ran (a loaded machine)")
    assert "S" not in looks, "the worker slept %d times in %d looks at a step's tail" % (
        looks.count("S"), len(looks))
