"""What the CUDA self-check costs the CPU at a GPU load: its FP32 CPU backend and forward passes.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.gpu_check --shape base,large

An engine that opens on a GPU first runs a probe through the CUDA backend and through the CPU
backend in FP32 and compares them (`kime.gpu_check`). The GPU's part is a few small batches; the
CPU's is what a GPU machine notices. For each random checkpoint of `--shape` (the bench's cache,
`bench.workloads.cached_checkpoint`) this times, `--repeat` times, the CPU side exactly as the
check runs it: the backend opened (`kime.factory.probe_cpu`: FP32 weights packed in memory, no
disk cache) and the probe's forward passes (its decision batch and its embedding batch,
`kime.gpu_check.probe_rows`), and prints each part's median and the probe's token count. The
check runs on a first load only: its verdict is kept, so a restart pays none of this.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import warnings
from typing import Dict, List, Optional

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # they pin OpenBLAS to slower kernels
    os.environ.pop(_var, None)

from .machine import machine_info  # noqa: E402
from .workloads import cached_checkpoint  # noqa: E402


def measure(path: str, threads: int = 0, repeat: int = 3) -> Dict[str, object]:
    """The CPU side of the self-check on the checkpoint at `path`, `repeat` times: the median
    seconds to open the backend, to run the probe's forward passes, and both; the probe's
    decision and embedding tokens."""
    from kime.checkpoint import load_checkpoint
    from kime.factory import probe_cpu
    from kime.gpu_check import cpu_answers, pack_rows, probe_rows

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ck = load_checkpoint(path)
    rows, embed = probe_rows(ck)
    groups = [(pack_rows(rows, False), rows), (pack_rows(embed, True), embed)]
    opened: List[float] = []
    forward: List[float] = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        cpu = probe_cpu(ck, threads)
        t1 = time.perf_counter()
        cpu_answers(groups, cpu)
        t2 = time.perf_counter()
        cpu.close()
        opened.append(t1 - t0)
        forward.append(t2 - t1)
    return {"open_s": statistics.median(opened), "forward_s": statistics.median(forward),
            "total_s": statistics.median(a + b for a, b in zip(opened, forward)),
            "tokens": groups[0][0].tokens, "embed_tokens": groups[1][0].tokens,
            "backend": cpu.describe()}


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base,large", help="comma-separated shapes (base,large)")
    ap.add_argument("--threads", type=int, default=0, help="CPU threads (0: every CPU usable)")
    ap.add_argument("--repeat", type=int, default=3, help="runs per shape; medians reported")
    ap.add_argument("--cache", default=None, help="the bench's checkpoint cache directory")
    args = ap.parse_args(argv)
    info = machine_info()
    print("%s, %s CPUs" % (info.get("cpu"), info.get("cores")), file=sys.stderr)
    print("shape  tokens (+embed)  open (pack FP32)  forward  total   backend")
    for shape in [s.strip() for s in args.shape.split(",") if s.strip()]:
        path = cached_checkpoint(shape, args.cache, log=lambda s: print(s, file=sys.stderr))
        got = measure(path, args.threads, args.repeat)
        print("%-6s %6d (+%d)  %14.2f s  %6.2f s  %5.2f s  %s" % (
            shape, got["tokens"], got["embed_tokens"], got["open_s"], got["forward_s"],
            got["total_s"], got["backend"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
