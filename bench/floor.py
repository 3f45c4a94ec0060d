"""W1 against its GEMM floor: how close one short request comes to the time its GEMMs alone need.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.floor --shape base
    python -m bench.floor --shape large --precision f32,int8 --repeat 40

For each precision, times kime's W1 (`predict` on one ~180-token row, the bench's workload) and,
alone, every GEMM its forward pass runs, at the forward's M, K, N and epilogue (the decision
head's last layer at its kept rows; the scorer and the act head in FP32 as the forward runs
them), each the best of --repeat calls on warm weights: the micro-bench's best rate. The floor
is the sum of those best times over the forward's GEMMs; W1 / floor is the issue's measure (1.2
or less is the aim). What lies between the two is everything else: attention, norms, RoPE, the
weights coming from DRAM rather than cache, the threads' barriers, tokenizing and Python.

Attention is timed the same way, each of the forward's calls alone at its window and in the
precision the forward runs its products in (FP32 for f32, BF16 for int8 and bf16: the precision
contract, docs/precision.md), and `+attention` adds those best times to the floor: W1 / both is
what is left once the two kernels that do the arithmetic have their best time, and the last lines
give attention's rate per precision, to read against the GEMMs'.

GEMMs run on the engine's own master thread (`kime._cpu.masters`), so they use the forward
pass's team of kime's thread pool and the bench does not start a second team beside it.

The run is --repeat rounds, and each round times every precision's W1 once and then every GEMM
and attention call (three back to back, the last kept), so W1 and its kernels see the same
minutes of a shared machine, whose speed can move by 1.5x between two of them. Besides the
medians and best times above, `paired` is the median over rounds of W1 / both within a round:
the measure that holds still while the machine does not.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from collections import Counter
from typing import Callable, Dict, List, Optional, Tuple

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # they pin OpenBLAS to slower kernels
    os.environ.pop(_var, None)

import numpy as np  # noqa: E402

from .machine import machine_info  # noqa: E402
from .workloads import build_workloads, cached_checkpoint  # noqa: E402

# (M, K, N, epilogue, precision of the kernel)
Gemm = Tuple[int, int, int, str, str]


def forward_gemms(spec, n: int, markers: int, precision: str) -> Counter:
    """The GEMMs of a one-row forward pass of n tokens and `markers` options (forward.c)."""
    d, inter, p = spec.d, spec.inter, precision
    calls: Counter = Counter()
    for _ in range(spec.layers):
        calls[(n, d, 3 * d, "store", p)] += 1
        calls[(n, d, d, "accum", p)] += 1
        calls[(n, d, 2 * inter, "geglu", p)] += 1
        calls[(n, inter, d, "accum", p)] += 1
    kept = 1 + markers  # the last head layer: the first token and the markers
    for j in range(spec.head_layers):
        m = kept if j == spec.head_layers - 1 else n
        calls[(n, d, 3 * d, "store", p)] += 1
        calls[(m, d, d, "accum", p)] += 1
        calls[(m, d, 4 * d, "relu", p)] += 1
        calls[(m, 4 * d, d, "accum", p)] += 1
    calls[(markers, d, d, "gelu", "f32")] += 1  # the scorer
    calls[(1, d + 4, 256, "gelu", "f32")] += 1  # the act head
    calls[(1, 256, spec.n_act, "store", "f32")] += 1
    return calls


# (tokens, heads, head dim, half window (-1 for a global layer), products' precision)
Attn = Tuple[int, int, int, int, str]


def forward_attention(spec, n: int) -> Counter:
    """The attention calls of a one-row forward pass of n tokens (forward.c): every encoder
    layer, local or global, and every head layer but the last, which attends only from its
    kept queries (left out: a few rows against the row, under 1% of one layer's), each in the
    precision the spec runs attention's products in."""
    hd = spec.d // spec.heads
    p = "bf16" if spec.attn_bf16 else "f32"
    calls: Counter = Counter()
    for is_global in spec.global_layers:
        calls[(n, spec.heads, hd, -1 if is_global else spec.half_window, p)] += 1
    for _ in range(spec.head_layers - 1):
        calls[(n, spec.head_heads, spec.d // spec.head_heads, -1, p)] += 1
    return calls


def attention_flop(key: Attn) -> float:
    """The FLOPs of the scores and the weighted values over the (query, key) pairs a call's
    window admits (not those the kernel's blocks compute): 4 * head dim per pair and head."""
    n, heads, hd, w, _ = key
    pairs = n * n if w < 0 else sum(min(n - 1, i + w) - max(0, i - w) + 1 for i in range(n))
    return 4.0 * hd * heads * pairs


def attention_runner(key: Attn, threads: int, rng: np.random.Generator) -> Callable[[], object]:
    """A call of kime's attention kernel, in the key's precision, on random q, k and v."""
    from kime._cpu import _attention

    n, heads, hd, w, precision = key
    qkv = rng.standard_normal((n, 3 * heads * hd), dtype=np.float32)
    cu = np.array([0, n], np.int32)
    out = np.empty((n, heads * hd), np.float32)
    return lambda: _attention.attention(qkv, cu, heads, hd, w, out, threads,
                                        precision=precision)


def gemm_runner(precision: str, K: int, N: int, epilogue: str, M: int, threads: int,
                rng: np.random.Generator) -> Callable[[], object]:
    """A call of kime's `precision` GEMM on random data of the forward's shapes."""
    from kime._cpu import _bgemm, _gemm, _qgemm

    isa = _gemm.isa_detect()
    W = (rng.standard_normal((N, K)) / np.sqrt(K)).astype(np.float32)
    A = rng.standard_normal((M, K), dtype=np.float32)
    geglu = epilogue == "geglu"
    out = np.empty((M, N // 2 if geglu else N), np.float32)
    if precision == "int8":
        qisa = _qgemm.pin(isa)
        packed = _qgemm.pack(W, isa=qisa, geglu=geglu)
        return lambda: _qgemm.gemm(A, packed, N, K, epilogue=epilogue, out=out, threads=threads,
                                   isa=qisa)
    if precision == "bf16":
        packed = _bgemm.pack(W, geglu=geglu)
        return lambda: _bgemm.gemm(A, packed, N, K, epilogue=epilogue, out=out, threads=threads)
    packed = _gemm.pack(W, isa=isa, geglu=geglu)
    return lambda: _gemm.gemm(A, packed, N, K, epilogue=epilogue, out=out, threads=threads,
                              isa=isa)


def call_time(fn: Callable[[], object]) -> float:
    """One call's time after two warm calls back to back (as a forward pass calls its kernels:
    between two handoffs the pool's workers could fall asleep, and waking them is not the
    kernel's time). Run it on the engine's master thread (`kime._cpu.masters.run_forward`)."""
    fn()
    fn()
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--precision", default="f32,int8,bf16",
                    help="comma-separated; bf16 is skipped where the CPU lacks it")
    ap.add_argument("--threads", type=int, default=0, help="0 = every core (default)")
    ap.add_argument("--repeat", type=int, default=20, help="timed runs of W1 and of each GEMM")
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args(argv)

    import kime
    from kime.backend import cpu_count
    from kime._cpu.backend import bf16_missing

    threads = args.threads or cpu_count()
    path = cached_checkpoint(args.shape, args.cache_dir,
                             log=lambda s: print("[floor] " + s, file=sys.stderr))
    print("cpu: %s, %d threads; shape %s" % (machine_info()["cpu"], threads, args.shape))
    print("%-5s | %9s | %9s | %8s | %12s | %11s | %9s | %8s | %s" % (
        "prec", "W1 p50", "floor", "W1/floor", "GEMM GFLOP/s", "+attention", "W1/both",
        "paired", "W1 row"))
    # Every precision loaded, then timed in rounds with the kernels alone (below).
    agents: Dict[str, object] = {}
    for precision in [p.strip() for p in args.precision.split(",") if p.strip()]:
        if precision == "bf16" and bf16_missing():
            print("%-5s | skipped: %s" % (precision, bf16_missing()))
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            agents[precision] = kime.load(path, device="cpu", precision=precision,
                                          threads=threads, answer_cache=0)
    if not agents:
        return 1
    first = next(iter(agents.values()))
    w1 = build_workloads(path, first.engine, ["W1"])[0]  # type: ignore[attr-defined]
    row = first.engine.rows_for(  # type: ignore[attr-defined]
        {"state": w1.states[0], "questions": w1.questions})[0]
    n, k = len(row.ids), len(row.markers)
    specs = {p: a.engine.backend.spec for p, a in agents.items()}  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    calls = {p: forward_gemms(spec, n, k, p) for p, spec in specs.items()}
    attn = {p: forward_attention(spec, n) for p, spec in specs.items()}
    fns: Dict[object, Callable[[], object]] = {
        key: gemm_runner(key[4], key[1], key[2], key[3], key[0], threads, rng)
        for c in calls.values() for key in c}
    fns.update({key: attention_runner(key, threads, rng) for c in attn.values() for key in c})
    from kime._cpu.masters import run_forward

    # Rounds: every precision's W1, then every kernel call in turn. Two warm-up rounds.
    times: Dict[str, List[float]] = {p: [] for p in agents}
    paired: Dict[str, List[float]] = {p: [] for p in agents}
    best = {key: float("inf") for key in fns}
    for i in range(args.repeat + 2):
        w1_round = {}
        for precision, agent in agents.items():
            t = time.perf_counter()
            agent.predict(w1.states[0], w1.questions)  # type: ignore[attr-defined]
            w1_round[precision] = time.perf_counter() - t
        took = {key: run_forward(threads, call_time, fn) for key, fn in fns.items()}
        if i < 2:
            continue
        for key, t in took.items():
            best[key] = min(best[key], t)
        for precision, w1_s in w1_round.items():
            times[precision].append(w1_s)
            both = sum(count * took[key] for c in (calls[precision], attn[precision])
                       for key, count in c.items())
            paired[precision].append(w1_s / both)
    for agent in agents.values():
        agent.close()  # type: ignore[attr-defined]
    for precision in specs:
        w1_s = statistics.median(times[precision])
        floor = sum(count * best[key] for key, count in calls[precision].items())
        flop = sum(count * 2.0 * M * K * N for (M, K, N, _, _), count in calls[precision].items())
        attn_s = sum(count * best[key] for key, count in attn[precision].items())
        print("%-5s | %7.2f ms | %7.2f ms | %7.2fx | %12.1f | %8.2f ms | %8.2fx | %7.2fx | %d "
              "tokens, %d options" % (precision, w1_s * 1e3, floor * 1e3, w1_s / floor,
                                      flop / floor / 1e9, (floor + attn_s) * 1e3,
                                      w1_s / (floor + attn_s), statistics.median(paired[precision]),
                                      n, k))
    for products in sorted({key[4] for c in attn.values() for key in c}):
        # the calls of one precision that runs these products (int8 and bf16 share them)
        keys = next(c for c in attn.values() if next(iter(c))[4] == products)
        attn_s = sum(count * best[key] for key, count in keys.items())
        attn_flop = sum(count * attention_flop(key) for key, count in keys.items())
        print("attention alone, %s products: %d calls (%d global, %d local, half window %d), "
              "%.2f ms, %.1f GFLOP/s over the pairs the windows admit"
              % (products.upper(), sum(keys.values()), sum(c for key, c in keys.items()
                                                           if key[3] < 0),
                 sum(c for key, c in keys.items() if key[3] >= 0),
                 next(iter(specs.values())).half_window, attn_s * 1e3,
                 attn_flop / attn_s / 1e9))
    return 0


if __name__ == "__main__":
    sys.exit(main())
