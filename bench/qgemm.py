"""kime's INT8 GEMM (csrc/qgemm.c) against kime's FP32 GEMM (csrc/gemm.c) on ModernBERT shapes.

    python -m bench.qgemm --threads 2 --repeat 30

For each linear layer of ModernBERT-base and -large at M = 512 tokens, times kime_qgemm (dynamic
per-row activation quantization inside the A packing, INT32 accumulation, fused dequantization
and epilogue: GEGLU for Wi) and kime_gemm (FP32, same epilogue) on the same data, interleaved,
both with --threads threads. Prints effective GFLOP/s (2 M N K / time) at the median and p95
time, and the ratio FP32 median time / INT8 median time (target: 3).

Both kernels share one libgomp thread pool, so unlike bench.gemm (which interleaves OpenBLAS)
there is no need to shorten OpenMP's spin (GOMP_SPINCOUNT): leave it at its default. On a VM,
GOMP_SPINCOUNT=1000 lets the idle worker's vCPU halt between calls, and waking it can cost about
half a GEMM, so 2 threads then run no faster than 1 (both kernels alike).
"""
from __future__ import annotations

import argparse
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--tokens", type=int, nargs="+", default=[512])
    ap.add_argument("--isa", type=int, default=-1, help="0 portable, 1 avx2, 2 avx512")
    args = ap.parse_args()

    isa = _gemm.isa_detect() if args.isa < 0 else args.isa
    print("fp32: %s, int8: %s kernels, %d threads"
          % (_gemm.isa_name(isa), ["portable", "avx2", "avx512-vnni"][_qgemm.impl(isa)],
             args.threads))
    print("%-6s %-8s %5s %5s %5s | %15s | %15s | %5s"
          % ("model", "layer", "M", "K", "N", "int8 GF/s (p95)", "fp32 GF/s (p95)", "ratio"))
    rng = np.random.default_rng(0)
    ratios = []
    for model, layer, K, N, geglu in SHAPES:
        W = rng.standard_normal((N, K), dtype=np.float32)
        qpacked = _qgemm.pack(W, isa=isa, geglu=geglu)
        fpacked = _gemm.pack(W, isa=isa, geglu=geglu)
        epilogue = "geglu" if geglu else "store"
        for M in args.tokens:
            A = rng.standard_normal((M, K), dtype=np.float32)
            qout = np.empty((M, N // 2 if geglu else N), np.float32)
            fout = np.empty_like(qout)
            q_t, f_t = [], []
            for i in range(args.repeat + 2):
                t = time.perf_counter()
                _qgemm.gemm(A, qpacked, N, K, epilogue=epilogue, out=qout,
                            threads=args.threads, isa=isa)
                t1 = time.perf_counter()
                _gemm.gemm(A, fpacked, N, K, epilogue=epilogue, out=fout,
                           threads=args.threads, isa=isa)
                t2 = time.perf_counter()
                if i >= 2:
                    q_t.append(t1 - t)
                    f_t.append(t2 - t1)
            flop = 2.0 * M * K * N / 1e9
            qm, fm = statistics.median(q_t), statistics.median(f_t)
            ratios.append(fm / qm)
            print("%-6s %-8s %5d %5d %5d | %7.1f (%5.1f) | %7.1f (%5.1f) | %5.2f"
                  % (model, layer, M, K, N, flop / qm, flop / p95(q_t), flop / fm,
                     flop / p95(f_t), fm / qm))
    print("geometric mean ratio (fp32 time / int8 time): %.2f"
          % statistics.geometric_mean(ratios))


if __name__ == "__main__":
    main()
