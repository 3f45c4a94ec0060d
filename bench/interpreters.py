"""W1 on several interpreters side by side: what the stable ABI costs at the scale of a real call.

    python -m bench.interpreters --python "3.11 native=/tmp/v311n/bin/python" \\
        --python "3.11 abi3=/tmp/v311a/bin/python" --python "3.13 abi3=/tmp/v313a/bin/python"

Each `--python LABEL=PATH` is an interpreter with kime installed (a wheel: the version-specific
one built with KIME_LIMITED_API=0, or the cp311-abi3 one). Every interpreter gets a worker process
that loads the same checkpoint (`--shape`, default base; a random one, cached as `python -m bench`
caches it) with `kime.load(..., precision, threads)` and times `agent.predict(state, questions)`
on W1 (bench/workloads.py: a 96-token state, one choice of 4). Calls are interleaved, one worker
after another, the order rotated each round, with `--gap` seconds of quiet before each call so no
worker's threads are still spinning. Every worker's first answer must equal the first worker's.
Prints the machine, each interpreter's Python and extension suffix, the median and p90 of
`--rounds` calls, each median's ratio to the first interpreter's, and `paired`: the median over
rounds of its call over the first interpreter's call of the same round (the ratio that holds
still while a shared machine's speed moves between the rounds, as bench.table's column).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any, Dict, List

from .machine import machine_info
from .stats import paired_ratio, percentile
from .workloads import build_workloads, cached_checkpoint

# Runs in each interpreter under test, from a folder outside the checkout, so `import kime` is the
# installed wheel. One JSON line in, one out: {"op": "run"} -> {"seconds", "result"?}.
_WORKER = r"""
import gc, json, sys, time, warnings
warnings.simplefilter("ignore")
import kime
from kime._cpu import _forward
path, precision, threads, workload = sys.argv[1:5]
w = json.load(open(workload))
agent = kime.load(path, device="cpu", precision=precision, threads=int(threads), answer_cache=0)
for _ in range(3):
    agent.predict(w["states"][0], w["questions"])
print(json.dumps({"python": sys.version.split()[0], "kime": kime.__version__,
                  "extension": _forward.__file__.rsplit("/", 1)[-1]}), flush=True)
for line in sys.stdin:
    msg = json.loads(line)
    if msg["op"] == "quit":
        break
    gc.collect()
    t0 = time.perf_counter()
    res = agent.predict(w["states"][0], w["questions"])
    took = time.perf_counter() - t0
    print(json.dumps({"seconds": took, "result": res if msg.get("result") else None}), flush=True)
"""


def main(argv: List[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--python", action="append", required=True, metavar="LABEL=PATH",
                   help="an interpreter with kime installed; give two or more")
    p.add_argument("--shape", default="base")
    p.add_argument("--precision", default="fp32", choices=["fp32", "int8", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=21)
    p.add_argument("--gap", type=float, default=0.5, help="quiet seconds before each call")
    p.add_argument("--cache-dir", default=None)
    args = p.parse_args(argv)
    pythons = []
    for item in args.python:
        label, sep, path = item.partition("=")
        if not sep or not os.path.isfile(path):
            p.error("--python %r: give LABEL=PATH to an interpreter" % item)
        pythons.append((label, path))

    import kime

    path = cached_checkpoint(args.shape, args.cache_dir, log=lambda s: print(s, file=sys.stderr))
    engine = kime.Kime(path, device="cpu", threads=1)
    (w1,) = build_workloads(path, engine, ["W1"])
    del engine
    tmp = tempfile.mkdtemp(prefix="kime-interp-")
    workload = os.path.join(tmp, "w1.json")
    with open(workload, "w") as f:
        json.dump(w1.payload(), f)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KIME_ISA")}
    workers = []
    for label, exe in pythons:
        proc = subprocess.Popen([exe, "-c", _WORKER, path, args.precision, str(args.threads),
                                 workload], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                text=True, cwd=tmp, env=env)
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline() or "{}")
        if not hello:
            raise SystemExit("interpreters: %s (%s) did not start" % (label, exe))
        workers.append({"label": label, "proc": proc, "hello": hello, "seconds": []})

    def call(worker: Dict[str, Any], result: bool = False) -> Dict[str, Any]:
        proc = worker["proc"]
        proc.stdin.write(json.dumps({"op": "run", "result": result}) + "\n")
        proc.stdin.flush()
        return dict(json.loads(proc.stdout.readline()))

    first = [call(wk, result=True)["result"] for wk in workers]
    disagree = [wk["label"] for wk, r in zip(workers, first) if r != first[0]]
    for r in range(args.rounds):
        order = workers[r % len(workers):] + workers[:r % len(workers)]
        for wk in order:
            time.sleep(args.gap)
            wk["seconds"].append(call(wk)["seconds"])
    for wk in workers:
        wk["proc"].stdin.write(json.dumps({"op": "quit"}) + "\n")
        wk["proc"].stdin.close()
        wk["proc"].wait(30)

    info = machine_info()
    print("interpreters: W1 (%s), %s, %s, %d threads, %d rounds, %.1f s quiet before each call"
          % (w1.rows_text(), args.shape, args.precision, args.threads, args.rounds, args.gap))
    print("machine: %s, %d cores, %s" % (info["cpu"], info["cores"], info["os"]))
    base = None
    print("%-14s %-8s %-42s %9s %9s %7s %7s" % ("interpreter", "python", "extension", "p50 ms",
                                                "p90 ms", "ratio", "paired"))
    for wk in workers:
        p50 = percentile(wk["seconds"], 50) * 1e3
        p90 = percentile(wk["seconds"], 90) * 1e3
        base = base or p50
        paired = paired_ratio(wk["seconds"], workers[0]["seconds"])
        print("%-14s %-8s %-42s %9.2f %9.2f %7.3f %7s" % (
            wk["label"], wk["hello"]["python"], wk["hello"]["extension"], p50, p90, p50 / base,
            "%.3f" % paired if paired is not None else "-"))
    print("answers: " + ("identical on every interpreter" if not disagree
                         else "DIFFER on " + ", ".join(disagree)))
    return 1 if disagree else 0


if __name__ == "__main__":
    sys.exit(main())
