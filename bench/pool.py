"""What kime's thread pool (csrc/pool.c) costs while it waits: the CPU an idle worker burns and
how often a worker sleeps at a step's tail.

    python -m bench.pool --spin 50,200,1000 --idle 0.5 --steps 25

These are speeds, so they live here and not in tests/kernels/test_pool.py, which asserts only
what the pool decides (a loaded machine changes CPU time and sleep counts, not decisions).

- **Idle CPU**: one call of a two-thread LayerNorm wakes a worker; then the caller sleeps
  `--idle` seconds. The process's CPU time over that sleep is the worker's spin (KIME_SPIN_US,
  here each `--spin` value), then almost nothing: a pool that spun on would cost the whole idle
  time.
- **Tail sleeps**: `--steps` steps whose caller's task runs `--tail-ms` while the worker's is
  empty, on a fresh thread with a spin of `--tail-spin-us`. The worker waits out each step's
  tail awake, so it should sleep a handful of times at most (a wake-up per step is what waiting
  asleep would cost); the voluntary context switches of its thread count the sleeps.
"""
from __future__ import annotations

import argparse
import os
import threading
import time
from typing import Dict, List, Set

import numpy as np

from kime._cpu import _forward


def idle_cpu_seconds(spin_us: int, idle_s: float) -> float:
    """The process's CPU seconds over `idle_s` seconds of the caller's sleep after one call."""
    x = np.random.default_rng(3).standard_normal((256, 64), dtype=np.float32)
    w = np.ones(64, np.float32)
    out = np.empty_like(x)
    _forward.set_pool_spin_us(spin_us)
    _forward.layer_norm(x, w, None, 1e-5, out, threads=2)  # wakes the forward pass's workers
    start = time.process_time()
    time.sleep(idle_s)
    return time.process_time() - start


def voluntary_switches(tids: Set[str]) -> int:
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


def tail_sleeps(steps: int, tail_ms: float, spin_us: int) -> Dict[str, int]:
    """Sleeps of a new team's worker over `steps` steps with a long task on the caller."""
    busy = np.array([int(tail_ms * 1000), 0], np.int32)
    tids = np.empty(2, np.int32)
    seen: Dict[str, int] = {}

    def run() -> None:
        threads = set(os.listdir("/proc/self/task"))
        _forward.pool_probe(busy, tids, 2)  # this thread's team starts, its worker awake
        worker = set(os.listdir("/proc/self/task")) - threads - {str(threading.get_native_id())}
        before = voluntary_switches(worker)
        ran_short = 0
        for _ in range(steps):
            _forward.pool_probe(busy, tids, 2)
            ran_short += int(tids[1] != tids[0])
        seen.update(workers=len(worker), ran_short=ran_short,
                    slept=voluntary_switches(worker) - before)

    _forward.set_pool_spin_us(spin_us)
    t = threading.Thread(target=run)
    t.start()
    t.join()
    return seen


def main(argv: List[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spin", default="50,200,1000", help="comma-separated spins (us) for idle CPU")
    ap.add_argument("--idle", type=float, default=0.5, help="idle seconds after a call")
    ap.add_argument("--steps", type=int, default=25, help="steps for the tail sleeps")
    ap.add_argument("--tail-ms", type=float, default=30.0, help="the caller's task per step (ms)")
    ap.add_argument("--tail-spin-us", type=int, default=8000,
                    help="the worker's spin for the tail sleeps (us)")
    args = ap.parse_args(argv)
    if not _forward.pool_threaded():
        print("this build runs one thread: no pool to measure")
        return 0
    default = _forward.pool_spin_us()
    try:
        print("idle CPU after one call (%.2f s idle, process CPU seconds):" % args.idle)
        for spin in (int(s) for s in args.spin.split(",")):
            print("  spin %7d us: %.4f s" % (spin, idle_cpu_seconds(spin, args.idle)))
        seen = tail_sleeps(args.steps, args.tail_ms, args.tail_spin_us)
        print("tail sleeps: %d in %d steps of %.0f ms (spin %d us); the worker ran the short "
              "task in %d" % (seen["slept"], args.steps, args.tail_ms, args.tail_spin_us,
                              seen["ran_short"]))
    finally:
        _forward.set_pool_spin_us(default)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
