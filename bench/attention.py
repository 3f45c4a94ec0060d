"""Time kime's attention kernel against the NumPy reference's, ModernBERT-base heads (12 x 64).

    python -m bench.attention --threads 1,2 --repeat 20
    python -m bench.attention --threads 1 --cpu-clock      # on a shared, busy machine

Shapes: one 512-token row and 16 rows of 300 tokens, each with full attention and with the local
window (half_window 64). The reference gets q, k, v already split per row (its layout), so only
its `attention` call is timed; NumPy's BLAS is held to the same thread count as the kernel. Prints
the median and p95 milliseconds per call after one warm-up, and the reference/kime ratio.
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable, List

import numpy as np
from threadpoolctl import threadpool_limits

from kime._cpu import _attention, reference

H, HD = 12, 64


def timed(fn: Callable[[], object], repeat: int, clock: Callable[[], float]) -> List[float]:
    fn()
    times = []
    for _ in range(repeat):
        t = clock()
        fn()
        times.append(clock() - t)
    return sorted(times)


def summary(times: List[float]) -> str:
    p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
    return "median %7.2f ms  p95 %7.2f ms" % (statistics.median(times) * 1e3, p95 * 1e3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--cpu-clock", action="store_true",
                    help="time the calling thread's CPU time, which other processes do not "
                         "inflate; with one thread both sides run wholly in that thread")
    args = ap.parse_args()
    thread_counts = [int(t) for t in args.threads.split(",")]
    if args.cpu_clock and thread_counts != [1]:
        ap.error("--cpu-clock needs --threads 1")
    clock = time.thread_time if args.cpu_clock else time.perf_counter
    print("kime attention path: %s" % _attention.isa())
    rng = np.random.default_rng(0)
    for lens in ([512], [300] * 16):
        cu = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
        qkv = rng.standard_normal((int(cu[-1]), 3 * H * HD)).astype(np.float32)
        out = np.empty((qkv.shape[0], H * HD), dtype=np.float32)
        rows = [qkv[a:b].reshape(b - a, 3, H, HD).transpose(1, 2, 0, 3)
                for a, b in zip(cu[:-1], cu[1:])]
        for half_window in (-1, 64):
            window = None if half_window < 0 else half_window
            for threads in thread_counts:
                mine = timed(
                    lambda: _attention.attention(qkv, cu, H, HD, half_window, out, threads),
                    args.repeat, clock)
                with threadpool_limits(limits=threads, user_api="blas"):
                    ref = timed(lambda: [reference.attention(q, k, v, window) for q, k, v in rows],
                                max(3, args.repeat // 4), clock)
                print("%2d x %3d tokens, %-6s threads=%d | kime %s | reference %s | x%.1f" % (
                    len(lens), lens[0], "global" if window is None else "hw=%d" % window, threads,
                    summary(mine), summary(ref), statistics.median(ref) / statistics.median(mine)))


if __name__ == "__main__":
    main()
