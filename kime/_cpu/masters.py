"""The threads that run compiled forward passes: a few per process, shared by every CPU backend.

Why. kime's thread pool (csrc/pool.c) gives each thread that calls a threaded kernel (a
*master*) a team of workers of its own, kept until that thread exits, as libgomp did before it.
Were every engine's scheduler thread a master, a second engine in the process (a Router's
checkpoints, `bench --precision f32,int8`, a caller's own thread calling in) would hold more
spinning workers than there are CPUs, and each forward pass would fight the other teams' spins
for the cores. Under libgomp that cost W1 on base 81 -> 105 ms (INT8) and 241 -> 266 ms (FP32)
on a 2-core Zen 4, with no other load.

What. A forward pass with `threads > 1` runs on one of `max(1, cpus // threads)` process-wide
master threads, so the masters and their workers never outnumber the CPUs; callers beyond that
wait their turn, as they would for the cores anyway. A forward pass with `threads == 1` opens no
parallel region and runs on the caller's thread. The handoff costs tens of microseconds per
batch. A fork starts the child with no masters (the parent's threads do not exist there).
"""
from __future__ import annotations

import concurrent.futures
import os
import threading
from typing import Callable, Dict, TypeVar

from ..backend import cpu_count

T = TypeVar("T")

_lock = threading.Lock()
_pools: Dict[int, concurrent.futures.ThreadPoolExecutor] = {}
_pid = os.getpid()


def masters_for(threads: int) -> int:
    """How many forward passes of `threads` threads may run at once: the CPUs they fill."""
    return max(1, cpu_count() // max(1, threads))


def _pool(threads: int) -> concurrent.futures.ThreadPoolExecutor:
    global _pid
    with _lock:
        if os.getpid() != _pid:  # a forked child: the parent's masters are not here
            _pools.clear()
            _pid = os.getpid()
        pool = _pools.get(threads)
        if pool is None:
            pool = _pools[threads] = concurrent.futures.ThreadPoolExecutor(
                max_workers=masters_for(threads), thread_name_prefix="kime-master%d" % threads)
        return pool


def run_forward(threads: int, fn: Callable[..., T], *args: object) -> T:
    """`fn(*args)` on a master thread for `threads`-thread forward passes (inline for one
    thread); its result or its exception. The call returns only once `fn` has finished, even
    when the waiting caller is interrupted, because `fn` writes buffers the caller owns."""
    if threads <= 1:
        return fn(*args)
    future = _pool(threads).submit(fn, *args)
    try:
        return future.result()
    except BaseException:
        concurrent.futures.wait([future])
        raise

