"""kime's thread pool (csrc/pool.c): tasks that threads claim, a bounded spin, teams per thread.

Every kernel test already checks that results do not depend on the thread count. These check
the pool's own promises: the bits hold when threads lose their cores (more threads than CPUs,
and beside a process that spins), a forked child starts a team of its own, a thread that exits
takes its workers with it, a worker waits out a step's last task awake, and idle workers stop
spinning after the bounded wait.
"""
from __future__ import annotations

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
                                reason="this build runs one thread (KIME_NO_OPENMP=1)")

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


def _idle_cpu_seconds(idle: float) -> float:
    x = np.random.default_rng(3).standard_normal((256, 64), dtype=np.float32)
    w = np.ones(64, np.float32)
    out = np.empty_like(x)
    _forward.layer_norm(x, w, None, 1e-5, out, threads=2)  # wakes the forward pass's workers
    t0 = time.process_time()
    time.sleep(idle)
    return time.process_time() - t0


def test_idle_workers_sleep_after_the_bounded_spin():
    """After a call, the workers spin for KIME_SPIN_US and then sleep: an idle half second
    costs almost no CPU; with a spin of 0.4 s the same idle time costs the worker's spin."""
    default = _forward.pool_spin_us()
    try:
        _forward.set_pool_spin_us(200)
        assert _idle_cpu_seconds(0.5) < 0.05
        _forward.set_pool_spin_us(400_000)
        assert _idle_cpu_seconds(0.5) > 0.1
    finally:
        _forward.set_pool_spin_us(default)
    assert _forward.pool_spin_us() == default


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


def _voluntary_switches(tids: set) -> int:
    """Voluntary context switches (a thread going to sleep) of these threads of this process."""
    total = 0
    for tid in tids:
        try:
            with open("/proc/self/task/%s/status" % tid) as f:
                for line in f:
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
        except OSError:  # a thread that ended meanwhile
            pass
    return total


def test_every_task_runs_on_a_thread_of_the_team():
    """Each task writes who ran it over a -1: a task left out, or run by a thread outside the
    team, fails; a length mismatch is refused."""
    busy = np.zeros(64, np.int32)
    tids = np.full(64, -1, np.int32)
    _forward.pool_probe(busy, tids, 3)
    assert set(tids.tolist()) <= {0, 1, 2}
    with pytest.raises(ValueError):
        _forward.pool_probe(busy, tids[:3], 2)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs two cores")
def test_a_worker_waits_out_a_long_task_without_sleeping():
    """A worker that runs out of tasks while another thread's long task still runs waits for
    the step's end awake: the next step comes as soon as that task ends, and a sleep there
    costs a wake-up per step. Its bounded spin (8 ms here) only starts once the step is done,
    so 25 steps whose first task takes 30 ms put it to sleep a handful of times at most, not
    once a step (the long spin and task leave room for the caller losing its core between
    steps on a loaded machine). The steps run on a thread of their own, so its team's worker
    is new and its sleeps are counted apart from every other thread's."""
    default = _forward.pool_spin_us()
    busy = np.array([30000, 0], np.int32)
    tids = np.empty(2, np.int32)
    seen: dict = {}

    def steps() -> None:
        threads = set(os.listdir("/proc/self/task"))
        _forward.pool_probe(busy, tids, 2)  # this thread's team starts, its worker awake
        worker = set(os.listdir("/proc/self/task")) - threads - {str(threading.get_native_id())}
        before = _voluntary_switches(worker)
        ran_short = 0
        for _ in range(25):
            _forward.pool_probe(busy, tids, 2)
            ran_short += int(tids[1] != tids[0])
        seen.update(workers=len(worker), ran_short=ran_short,
                    slept=_voluntary_switches(worker) - before)

    try:
        _forward.set_pool_spin_us(8000)
        t = threading.Thread(target=steps)
        t.start()
        t.join()
    finally:
        _forward.set_pool_spin_us(default)
    assert seen["workers"] >= 1
    assert seen["ran_short"] >= 12  # the tasks mostly ran on two threads: the worker saw tails
    assert seen["slept"] <= 8, "the worker slept %d times in 25 steps" % seen["slept"]
