"""kime's INT8 GEMM (csrc/qgemm.c) against kime's FP32 GEMM (csrc/gemm.c) on ModernBERT shapes.

    python -m bench.qgemm --threads 2 --repeat 30
    python -m bench.qgemm --impl avx2 avxvnni vnni512 amx
    python -m bench.qgemm --impl neon sdot smmla          (aarch64)

For each linear layer of ModernBERT-base and -large at M = 512 tokens, times kime_qgemm (dynamic
per-row activation quantization inside the A packing, INT32 accumulation, fused dequantization
and epilogue: GEGLU for Wi) and kime_gemm (FP32, same epilogue) on the same data, interleaved,
both with --threads threads. Prints effective GFLOP/s (2 M N K / time) at the median and p95
time, and the ratio FP32 median time / INT8 median time (target: 3).

With the peer interpreter (bench/peers.py: laya's, with onnxruntime), every shape also runs as
one ONNX MatMul under ONNX Runtime in that side process, FP32 and `quantize_dynamic` INT8 (QInt8
weights, dynamic uint8 input: MLAS's u8s8 kernel, what ORT's INT8 peer in `bench.table` runs),
on weights from the same generator, with the same threads, timed inside the peer and interleaved
with kime's calls. Its MatMul has no epilogue (kime's Wi adds GEGLU) and quantizes its input in
its own node. With a peer every call waits --gap seconds first (0.02 by default), so that one
engine's spinning threads have stopped before the other's call, then one untimed call (each
engine's pool wakes for that one; the first 2-thread GEMM after a 0.5 s sleep took 0.4-0.6 ms
more than the next ones on a 2-vCPU Zen 3). To compare the two kernels on a small shared VM,
whose two-core speed moves between minutes, use --threads 1: neither engine has pool threads.
`ort/kime` is ORT INT8's median time over kime INT8's (the first --impl's), per shape and as a
geometric mean. `--peers none` leaves ONNX Runtime out.

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

from . import peers as peerlib

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
    ap.add_argument("--model", choices=["base", "large", "all"], default="all",
                    help="which model's layers (default both)")
    ap.add_argument("--peers", choices=["auto", "none"], default="auto",
                    help="auto: ONNX Runtime's MatMul beside kime when the peer interpreter has it")
    ap.add_argument("--peer-python", default=None,
                    help="interpreter with onnxruntime (default: see bench/peers.py)")
    ap.add_argument("--gap", type=float, default=None,
                    help="idle seconds before each timed call (default 0.02 with a peer, else 0)")
    ap.add_argument("--cache-dir", default=os.path.expanduser("~/.cache/kime/bench/qgemm"),
                    help="where the peer writes its ONNX MatMuls")
    args = ap.parse_args()
    peer = None
    if args.peers == "auto":
        python, why = peerlib.find_peer_python(args.peer_python)
        if python is None:
            print("peers: none (%s)" % why)
        else:
            peer = peerlib.PeerProcess(python)
            v = peer.call("hello")["versions"]
            if not v.get("onnxruntime"):
                print("peers: none (no onnxruntime in %s)" % python)
                peer.close()
                peer = None
            else:
                print("peer: onnxruntime %s in %s, %d threads" % (v["onnxruntime"], python,
                                                                 args.threads))
    if args.gap is None:
        args.gap = 0.02 if peer is not None else 0.0
    try:
        run(args, peer)
    finally:
        if peer is not None:
            peer.close()


def run(args: argparse.Namespace, peer: "peerlib.PeerProcess | None") -> None:

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
             "fp32 GF/s", " ".join("%7s" % name[:7] for _, name in impls))
          + (" | %15s | %15s | ort/kime" % ("ORT int8 GF/s", "ORT fp32 GF/s") if peer else ""))
    ratios: list[list[float]] = [[] for _ in impls]
    ort_ratios: list[float] = []
    for seed, (model, layer, K, N, geglu) in enumerate(SHAPES):
        if args.model not in ("all", model):
            continue
        W = np.random.default_rng(seed).standard_normal((N, K), dtype=np.float32)
        qpacked = []
        for want, _ in impls:
            forced(want)
            qpacked.append(_qgemm.pack(W, isa=isa, geglu=geglu))
        fpacked = _gemm.pack(W, isa=isa, geglu=geglu)
        epilogue = "geglu" if geglu else "store"
        for M in args.tokens:
            A = np.random.default_rng([seed, M]).standard_normal((M, K), dtype=np.float32)
            qout = np.empty((M, N // 2 if geglu else N), np.float32)
            fout = np.empty_like(qout)
            q_t: list[list[float]] = [[] for _ in impls]
            f_t = []
            o_t: dict[str, list[float]] = {"int8": [], "f32": []}
            name = "%s-%s-%d" % (model, layer.replace(" ", "_"), M)
            if peer is not None:
                peer.call("matmul", name=name, K=K, N=N, M=M, seed=seed, dir=args.cache_dir,
                          threads=args.threads)
            for i in range(args.repeat + 2):
                for (want, _), packed, times in zip(impls, qpacked, q_t):
                    forced(want)
                    if args.gap:
                        time.sleep(args.gap)
                        _qgemm.gemm(A, packed, N, K, epilogue=epilogue, out=qout,
                                    threads=args.threads, isa=isa)  # wakes the pool
                    t = time.perf_counter()
                    _qgemm.gemm(A, packed, N, K, epilogue=epilogue, out=qout,
                                threads=args.threads, isa=isa)
                    if i >= 2:
                        times.append(time.perf_counter() - t)
                if args.gap:
                    time.sleep(args.gap)
                    _gemm.gemm(A, fpacked, N, K, epilogue=epilogue, out=fout,
                               threads=args.threads, isa=isa)
                t = time.perf_counter()
                _gemm.gemm(A, fpacked, N, K, epilogue=epilogue, out=fout,
                           threads=args.threads, isa=isa)
                if i >= 2:
                    f_t.append(time.perf_counter() - t)
                if peer is not None:
                    for precision, times in o_t.items():
                        time.sleep(args.gap)
                        s = peer.call("matmul_run", name=name, precision=precision,
                                      warm=bool(args.gap))["seconds"]
                        if i >= 2:
                            times.append(s)
            flop = 2.0 * M * K * N / 1e9
            fm = statistics.median(f_t)
            cols = ""
            for times, ratio in zip(q_t, ratios):
                qm = statistics.median(times)
                ratio.append(fm / qm)
                cols += "%7.1f (%5.1f) | " % (flop / qm, flop / p95(times))
            line = ("%-6s %-8s %5d %5d %5d | %s%7.1f (%5.1f) | %s"
                    % (model, layer, M, K, N, cols, flop / fm, flop / p95(f_t),
                       " ".join("%7.2f" % r[-1] for r in ratios)))
            if peer is not None:
                om, fo = statistics.median(o_t["int8"]), statistics.median(o_t["f32"])
                ort_ratios.append(om / statistics.median(q_t[0]))
                line += " | %7.1f (%5.1f) | %7.1f (%5.1f) | %7.2f" % (
                    flop / om, flop / p95(o_t["int8"]), flop / fo, flop / p95(o_t["f32"]),
                    ort_ratios[-1])
            print(line)
    print("geometric mean ratio (fp32 time / int8 time): %s"
          % ", ".join("%s %.2f" % (name, statistics.geometric_mean(r))
                      for (_, name), r in zip(impls, ratios)))
    if ort_ratios:
        print("geometric mean ort/kime (ORT INT8 median time / kime INT8 median time): %.2f"
              % statistics.geometric_mean(ort_ratios))


if __name__ == "__main__":
    main()
