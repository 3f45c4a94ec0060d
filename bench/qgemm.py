"""kime's INT8 GEMM (csrc/qgemm.c) against kime's FP32 GEMM (csrc/gemm.c) on ModernBERT shapes.

    python -m bench.qgemm --threads 2 --repeat 30
    python -m bench.qgemm --impl avx2 avxvnni vnni512 amx
    python -m bench.qgemm --impl neon sdot smmla          (aarch64)

For each linear layer of ModernBERT-base and -large at M = 512 tokens, times kime_qgemm (dynamic
per-row activation quantization inside the A packing, INT32 accumulation, fused dequantization
and epilogue: GEGLU for Wi) and kime_gemm (FP32, same epilogue) on the same data, interleaved,
both with --threads threads. Prints effective GFLOP/s (2 M N K / time) at the median and p95
time, and the ratio FP32 median time / INT8 median time (target: 3).

--impl times several INT8 kernel sets side by side (each forced through KIME_QGEMM, packed and
run under it, interleaved with the others): a column each, and each one's ratio. "avxvnni" on a
CPU without AVX-VNNI but with AVX512-VL + VNNI runs its EVEX twin, the same 256-bit kernel.

Both kernels run on the calling thread's team of kime's thread pool (csrc/pool.c), so unlike
bench.gemm (which interleaves OpenBLAS) no other library's threads wait for the cores: leave the
pool's idle spin (KIME_SPIN_US, 200 us) at its default.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

from kime._cpu import _gemm, _qgemm

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


# KIME_QGEMM's names on this machine's architecture
IMPLS = (["portable", "neon", "sdot", "smmla"]
         if platform.machine().lower() in ("aarch64", "arm64")
         else ["portable", "avx2", "avxvnni", "vnni512", "amx"])


def forced(impl: str | None) -> None:
    """Force the INT8 kernel set (None: the default pick) for the next pack and GEMM calls."""
    if impl is None:
        os.environ.pop("KIME_QGEMM", None)
    else:
        os.environ["KIME_QGEMM"] = impl


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--tokens", type=int, nargs="+", default=[512])
    ap.add_argument("--isa", type=int, default=-1,
                    help="0 portable, 1 avx2, 2 avx512 (aarch64: 1 neon ... 4 bf16)")
    ap.add_argument("--impl", nargs="+", default=[None], choices=IMPLS,
                    help="INT8 kernel sets to compare (default: the one this CPU picks)")
    args = ap.parse_args()

    isa = _gemm.isa_detect() if args.isa < 0 else args.isa
    impls = []
    for want in args.impl:
        forced(want)
        impls.append((want, _qgemm.impl_name(isa)))
    print("fp32: %s, int8: %s kernels, %d threads"
          % (_gemm.isa_name(isa), ", ".join(name for _, name in impls), args.threads))
    print("GF/s at the median (p95) time; ratio: fp32 median time / int8 median time")
    print("%-6s %-8s %5s %5s %5s | %s%15s | %s"
          % ("model", "layer", "M", "K", "N",
             "".join("%15s | " % (name[:7] + " GF/s") for _, name in impls),
             "fp32 GF/s", " ".join("%7s" % name[:7] for _, name in impls)))
    rng = np.random.default_rng(0)
    ratios: list[list[float]] = [[] for _ in impls]
    for model, layer, K, N, geglu in SHAPES:
        W = rng.standard_normal((N, K), dtype=np.float32)
        qpacked = []
        for want, _ in impls:
            forced(want)
            qpacked.append(_qgemm.pack(W, isa=isa, geglu=geglu))
        fpacked = _gemm.pack(W, isa=isa, geglu=geglu)
        epilogue = "geglu" if geglu else "store"
        for M in args.tokens:
            A = rng.standard_normal((M, K), dtype=np.float32)
            qout = np.empty((M, N // 2 if geglu else N), np.float32)
            fout = np.empty_like(qout)
            q_t: list[list[float]] = [[] for _ in impls]
            f_t = []
            for i in range(args.repeat + 2):
                for (want, _), packed, times in zip(impls, qpacked, q_t):
                    forced(want)
                    t = time.perf_counter()
                    _qgemm.gemm(A, packed, N, K, epilogue=epilogue, out=qout,
                                threads=args.threads, isa=isa)
                    if i >= 2:
                        times.append(time.perf_counter() - t)
                t = time.perf_counter()
                _gemm.gemm(A, fpacked, N, K, epilogue=epilogue, out=fout,
                           threads=args.threads, isa=isa)
                if i >= 2:
                    f_t.append(time.perf_counter() - t)
            flop = 2.0 * M * K * N / 1e9
            fm = statistics.median(f_t)
            cols = ""
            for times, ratio in zip(q_t, ratios):
                qm = statistics.median(times)
                ratio.append(fm / qm)
                cols += "%7.1f (%5.1f) | " % (flop / qm, flop / p95(times))
            print("%-6s %-8s %5d %5d %5d | %s%7.1f (%5.1f) | %s"
                  % (model, layer, M, K, N, cols, flop / fm, flop / p95(f_t),
                     " ".join("%7.2f" % r[-1] for r in ratios)))
    print("geometric mean ratio (fp32 time / int8 time): %s"
          % ", ".join("%s %.2f" % (name, statistics.geometric_mean(r))
                      for (_, name), r in zip(impls, ratios)))


if __name__ == "__main__":
    main()
