"""kime's BF16 GEMM (csrc/bgemm.c) against kime's FP32 GEMM (csrc/gemm.c) on ModernBERT shapes.

    python -m bench.bgemm --threads 2 --repeat 30
    python -m bench.bgemm --tokens 180 512

For each linear layer of ModernBERT-base and -large at each --tokens M (default 180, a W1 row,
and 512), times kime_bgemm (A rounded to bfloat16 inside its packing, vdpbf16ps with FP32
sums, the epilogue fused: GEGLU for Wi) and kime_gemm (FP32, same epilogue) on the same data,
interleaved, both with --threads threads. Prints GFLOP/s (2 M N K / time) at the median and p95
time, and the ratio FP32 median time / BF16 median time (about 2 where the kernels are bound by
their multiply-adds: vdpbf16ps does twice an FMA's work per instruction).

Both kernels run on the calling thread's team of kime's thread pool (csrc/pool.c), so as in
bench.qgemm its idle spin (KIME_SPIN_US) stays at its default. Needs AVX512_BF16; elsewhere it
says what is missing and exits 1.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from kime._cpu import _bgemm, _gemm

from .qgemm import SHAPES, p95


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--tokens", type=int, nargs="+", default=[180, 512])
    args = ap.parse_args()

    missing = _bgemm.missing()
    if missing is not None:
        print("the BF16 GEMM does not run here (missing: %s)" % missing, file=sys.stderr)
        return 1
    isa = _gemm.isa_detect()
    print("fp32: %s, bf16: %s kernels, %d threads" % (_gemm.isa_name(isa), _bgemm.kernels(),
                                                      args.threads))
    print("GF/s at the median (p95) time; ratio: fp32 median time / bf16 median time")
    print("%-6s %-8s %5s %5s %5s | %15s | %15s | %5s"
          % ("model", "layer", "M", "K", "N", "bf16 GF/s", "fp32 GF/s", "ratio"))
    rng = np.random.default_rng(0)
    ratios = []
    for model, layer, K, N, geglu in SHAPES:
        W = rng.standard_normal((N, K), dtype=np.float32)
        bpacked = _bgemm.pack(W, geglu=geglu)
        fpacked = _gemm.pack(W, isa=isa, geglu=geglu)
        epilogue = "geglu" if geglu else "store"
        for M in args.tokens:
            A = rng.standard_normal((M, K), dtype=np.float32)
            bout = np.empty((M, N // 2 if geglu else N), np.float32)
            fout = np.empty_like(bout)
            b_t, f_t = [], []
            for i in range(args.repeat + 2):  # two warm-ups each, then interleaved
                t = time.perf_counter()
                _bgemm.gemm(A, bpacked, N, K, epilogue=epilogue, out=bout, threads=args.threads)
                t1 = time.perf_counter()
                _gemm.gemm(A, fpacked, N, K, epilogue=epilogue, out=fout, threads=args.threads,
                           isa=isa)
                t2 = time.perf_counter()
                if i >= 2:
                    b_t.append(t1 - t)
                    f_t.append(t2 - t1)
            flop = 2.0 * M * K * N / 1e9
            bm, fm = statistics.median(b_t), statistics.median(f_t)
            ratios.append(fm / bm)
            print("%-6s %-8s %5d %5d %5d | %7.1f (%5.1f) | %7.1f (%5.1f) | %5.2f"
                  % (model, layer, M, K, N, flop / bm, flop / p95(b_t), flop / fm,
                     flop / p95(f_t), fm / bm))
    print("geometric mean ratio (fp32 time / bf16 time): %.2f" % statistics.geometric_mean(ratios))
    return 0


if __name__ == "__main__":
    sys.exit(main())
