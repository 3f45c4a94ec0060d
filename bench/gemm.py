"""kime's packed FP32 GEMM against numpy.matmul on ModernBERT encoder shapes, side by side.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.gemm --threads 2 --repeat 20

(those two pin a current OpenBLAS to slower kernels; the bench also drops them itself when it is
first to load NumPy). For each linear layer of ModernBERT-base and -large at M = 512 and 2048
tokens, times kime_gemm (with the epilogue the forward pass uses: GEGLU for Wi, so kime also does
the gelu * gate that numpy skips) and `np.matmul(A, W.T, out=C)` on the same data, interleaved,
both with --threads threads. Prints GFLOP/s at the median and at the p95 time, and numpy's
median time / kime's.

Interleaving needs each library's idle threads asleep: after a call, OpenBLAS's workers spin for
about 2^28 cycles, on the cores kime's next call needs (kime's pool spins 200 us, KIME_SPIN_US).
So the bench sets OPENBLAS_THREAD_TIMEOUT=4 before either loads.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

PRELOAD_ENV = {"OPENBLAS_THREAD_TIMEOUT": "4"}
DROP_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
LOADED_FIRST = "numpy" in sys.modules  # then OpenBLAS already read its environment
if not LOADED_FIRST:
    for var in DROP_ENV:
        os.environ.pop(var, None)
    for var, value in PRELOAD_ENV.items():
        os.environ.setdefault(var, value)

import numpy as np  # noqa: E402  (after the environment is set)
import threadpoolctl  # type: ignore[import-untyped]  # noqa: E402

from kime._cpu import _gemm  # noqa: E402

# (model, layer, K, N, geglu): N counts W's rows, so a GEGLU layer writes N/2 columns
SHAPES = [
    ("base", "Wqkv", 768, 2304, False),
    ("base", "attn Wo", 768, 768, False),
    ("base", "Wi", 768, 2304, True),
    ("base", "mlp Wo", 1152, 768, False),
    ("large", "Wqkv", 1024, 3072, False),
    ("large", "attn Wo", 1024, 1024, False),
    ("large", "Wi", 1024, 5248, True),
    ("large", "mlp Wo", 2624, 1024, False),
]


def p95(times: list[float]) -> float:
    times = sorted(times)
    return times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--tokens", type=int, nargs="+", default=[512, 2048])
    args = ap.parse_args()

    isa = _gemm.isa_detect()
    blas = [i for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    print("kime: %s, %d threads" % (_gemm.isa_name(isa), args.threads))
    for info in blas:
        print("numpy BLAS: %s %s, kernel %s, %s" % (info.get("internal_api"),
              info.get("version"), info.get("architecture"), info.get("filepath")))
    if LOADED_FIRST:
        print("warning: NumPy was loaded before the bench could set its environment")
    for var in DROP_ENV:
        if var in os.environ:
            print("warning: %s=%s is set (see the docstring)" % (var, os.environ[var]))
    print("%-6s %-8s %5s %5s %5s | %15s | %15s | %5s"
          % ("model", "layer", "M", "K", "N", "kime GF/s (p95)", "numpy GF/s (p95)", "ratio"))
    rng = np.random.default_rng(0)
    ratios = []
    with threadpoolctl.threadpool_limits(args.threads, user_api="blas"):
        for model, layer, K, N, geglu in SHAPES:
            W = rng.standard_normal((N, K), dtype=np.float32)
            packed = _gemm.pack(W, isa=isa, geglu=geglu)
            for M in args.tokens:
                A = rng.standard_normal((M, K), dtype=np.float32)
                ours = np.empty((M, N // 2 if geglu else N), np.float32)
                theirs = np.empty((M, N), np.float32)
                epilogue = "geglu" if geglu else "store"
                kime_t, numpy_t = [], []
                for i in range(args.repeat + 2):  # two warm-ups each, then interleaved
                    t = time.perf_counter()
                    _gemm.gemm(A, packed, N, K, epilogue=epilogue, out=ours,
                               threads=args.threads, isa=isa)
                    t1 = time.perf_counter()
                    np.matmul(A, W.T, out=theirs)
                    t2 = time.perf_counter()
                    if i >= 2:
                        kime_t.append(t1 - t)
                        numpy_t.append(t2 - t1)
                flop = 2.0 * M * K * N / 1e9
                km, nm = statistics.median(kime_t), statistics.median(numpy_t)
                ratios.append(nm / km)
                print("%-6s %-8s %5d %5d %5d | %7.1f (%5.1f) | %7.1f (%6.1f) | %5.2f"
                      % (model, layer, M, K, N, flop / km, flop / p95(kime_t), flop / nm,
                         flop / p95(numpy_t), nm / km))
    print("geometric mean ratio (numpy time / kime time): %.2f"
          % statistics.geometric_mean(ratios))


if __name__ == "__main__":
    main()
