"""`python -m bench.long`: `predict_long` on a long state, kime beside Laya's torch `Agent`, in
one run on one machine.

The state is a support-ticket text of exactly `--tokens` tokens (3000 by default) on a random
checkpoint of `--shape` (`base`, the published English shape: max_len 512, head_max_len 192),
asked the 5 questions of workload W2. Both sides scan it with Laya's defaults (window 312 tokens,
stride 156), so both score the same windows; kime's answer cache is off, so every call runs the
model. Laya runs in the peer interpreter (`bench.peers`: `--peer-python`,
`$KIME_BENCH_PEER_PYTHON`, or the oracle environment), in a side process, so torch never enters
kime's; without one, kime runs alone and the report says why.

Prints the CPU, the scan's shape (windows, rows), each side's median, p95 and worst call, the
ratio of medians, and how far the two answers are apart. `--json PATH` also writes the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional

from .peers import UNSET_ENV, clean_env, find_peer_python, run_script, timing_line

# Laya's side: reads one JSON request on stdin, answers one JSON object on stdout.
PEER = r"""
import json, sys, time, warnings
req = json.load(sys.stdin)
import torch
import laya
from laya.agent import Agent
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    t0 = time.perf_counter()
    agent = Agent(req["path"], device="cpu")
    load_s = time.perf_counter() - t0
    seconds, result = [], None
    for i in range(req["warmup"] + req["repeat"]):
        t0 = time.perf_counter()
        result = agent.predict_long(req["state"], req["questions"])
        if i >= req["warmup"]:
            seconds.append(time.perf_counter() - t0)
json.dump({"seconds": seconds, "result": result, "load_s": load_s, "laya": laya.__version__,
           "torch": torch.__version__, "threads": torch.get_num_threads()}, sys.stdout)
"""


def _peer(python: str, req: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    return run_script(python, PEER, req, timeout)


def _line(name: str, s: Dict[str, Any]) -> str:
    return timing_line(name, s, width=14, digits=1)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.long", description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--tokens", type=int, default=3000, help="state tokens (default 3000)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per side")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    ap.add_argument("--threads", type=int, default=0, help="kime's threads (0: every core)")
    ap.add_argument("--peers", choices=("auto", "none"), default="auto")
    ap.add_argument("--peer-python", default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    import warnings

    import kime
    from .machine import machine_info
    from .stats import compare_results, summarize
    from .workloads import (cached_checkpoint, exact_tokens_text, questions_w2, source_text,
                            tokenizer_encoder)

    log = lambda s: print("[bench.long] " + s, file=sys.stderr, flush=True)  # noqa: E731
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    state = exact_tokens_text(tokenizer_encoder(path),
                              source_text(7, sentences=max(40, args.tokens // 8)), args.tokens)
    questions = questions_w2()
    info = machine_info()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(path, device="cpu", threads=args.threads, answer_cache=0)
    seconds: List[float] = []
    ours: Dict[str, Any] = {}
    for i in range(args.warmup + args.repeat):
        t0 = time.perf_counter()
        ours = agent.predict_long(state, questions)
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t0)
    windows = ours["usage"]["windows"]
    rows = windows * len(questions)
    out: Dict[str, Any] = {"machine": info, "shape": args.shape, "state_tokens": args.tokens,
                           "questions": len(questions), "windows": windows, "rows": rows,
                           "kime": summarize(seconds), "kime_version": kime.__version__}
    agent.close()

    peer_note = "not run (--peers none)"
    if args.peers == "auto":
        python, why = find_peer_python(args.peer_python)
        if python is None:
            peer_note = "not run: " + why
        else:
            log("running Laya's torch Agent with %s (%s)" % (python, why))
            peer = _peer(python, {"path": path, "state": state, "questions": questions,
                                  "warmup": args.warmup, "repeat": args.repeat},
                         timeout=3600)
            out["laya"] = summarize(peer["seconds"])
            out["laya_versions"] = {"laya": peer["laya"], "torch": peer["torch"],
                                    "torch_threads": peer["threads"]}
            out["agreement"] = compare_results(ours, peer["result"])
            out["agreement"]["windows"] = [windows, peer["result"]["usage"].get("windows")]
            peer_note = "laya %s, torch %s (%d threads)" % (peer["laya"], peer["torch"],
                                                            peer["threads"])

    print("predict_long: %d-token state, %d questions, shape %s -> %d windows, %d rows"
          % (args.tokens, len(questions), args.shape, windows, rows))
    print("CPU: %s, %d cores; kime %s (threads=%s, answer cache off); Laya: %s"
          % (info["cpu"], info["cores"], kime.__version__, args.threads or "all", peer_note))
    print(_line("kime", out["kime"]))
    if "laya" in out:
        print(_line("laya (torch)", out["laya"]))
        print("  kime is %.2fx Laya's speed (ratio of medians)"
              % (out["laya"]["p50"] / out["kime"]["p50"]))
        agree = out["agreement"]
        print("  answers: largest difference %.2g%s; labels that differ: %s; windows %s"
              % (agree["max_abs"], " (%s)" % agree["worst"] if agree["worst"] else "",
                 agree["mismatches"] or "none", agree["windows"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
        # These slow a current OpenBLAS and are read when NumPy loads it: start again without.
        env = clean_env({"KIME_BENCH_REEXEC": "1"})
        os.execve(sys.executable, [sys.executable, "-m", "bench.long"] + sys.argv[1:], env)
    sys.exit(main())
