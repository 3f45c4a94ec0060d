"""`python -m bench.tournament`: `predict_tournament` on a wide choice, kime beside Laya's torch
`Agent`, in one run on one machine.

The state is a short support message; the question is one choice over `--labels` intents (120 by
default, a routing table wider than BANKING77's 77), on a random checkpoint of `--shape` (`base`:
max_len 512, head_max_len 192). Both sides call their own `predict_tournament(agent, state,
questions, group_size=G)` with Laya's default group of 16, so 120 labels play one round of 8 groups
(one shared forward pass) and a final of 8. kime's answer cache is off, so every call runs the
model. Laya runs in the peer interpreter (`bench.peers`), in a side process started after kime's
calls, so neither side's thread pool is awake during the other's; without one, kime runs alone
and the report says why.

Prints the CPU, each side's median, p95 and worst call, the ratio of medians, and how far the two
answers are apart (finalists included). `--json PATH` also writes the numbers.
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
from laya.shortlist import predict_tournament
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    agent = Agent(req["path"], device="cpu")
    seconds, result = [], None
    for i in range(req["warmup"] + req["repeat"]):
        t0 = time.perf_counter()
        result = predict_tournament(agent, req["state"], req["questions"],
                                    group_size=req["group"])
        if i >= req["warmup"]:
            seconds.append(time.perf_counter() - t0)
json.dump({"seconds": seconds, "result": result, "laya": laya.__version__,
           "torch": torch.__version__, "threads": torch.get_num_threads()}, sys.stdout)
"""

_VERBS = ("activate", "cancel", "change", "check", "dispute", "freeze", "order", "report",
          "request", "reset", "top_up", "transfer")
_OBJECTS = ("card", "pin", "account", "payment", "refund", "statement", "address", "limit",
            "subscription", "exchange_rate")


def labels(n: int) -> List[str]:
    """`n` distinct intent names such as `freeze_card`, in a fixed order (verb-major)."""
    names = ["%s_%s" % (verb, obj) for verb in _VERBS for obj in _OBJECTS]
    names += ["other_%03d" % i for i in range(max(0, n - len(names)))]
    return names[:n]


def questions(n: int) -> Dict[str, Dict[str, Any]]:
    return {"intent": {"type": "choice", "criteria": labels(n),
                       "instructions": "Which intent does the customer's message express?"}}


STATE = ("Hi, I lost my wallet on the train this morning and my debit card was in it. Can you "
         "stop anyone from using it and send me a new one to my home address? Thanks, Priya")


def _peer(python: str, req: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    return run_script(python, PEER, req, timeout)


def _line(name: str, s: Dict[str, Any]) -> str:
    return timing_line(name, s, width=14, digits=1)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.tournament",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--labels", type=int, default=120, help="choice labels (default 120)")
    ap.add_argument("--group", type=int, default=16, help="group_size (Laya's default 16)")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per side")
    ap.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    ap.add_argument("--threads", type=int, default=0, help="kime's threads (0: every core)")
    ap.add_argument("--precision", default="f32", help="kime's precision (default f32)")
    ap.add_argument("--peers", choices=("auto", "none"), default="auto")
    ap.add_argument("--peer-python", default=None)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--json", default=None, help="also write the numbers here")
    args = ap.parse_args(argv)

    import warnings

    import kime
    from .machine import machine_info
    from .stats import compare_results, summarize
    from .workloads import cached_checkpoint

    log = lambda s: print("[bench.tournament] " + s, file=sys.stderr, flush=True)  # noqa: E731
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    qs = questions(args.labels)
    info = machine_info()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(path, device="cpu", threads=args.threads, precision=args.precision,
                          answer_cache=0)
        seconds: List[float] = []
        ours: Dict[str, Any] = {}
        for i in range(args.warmup + args.repeat):
            t0 = time.perf_counter()
            ours = kime.predict_tournament(agent, STATE, qs, group_size=args.group)
            if i >= args.warmup:
                seconds.append(time.perf_counter() - t0)
    agent.close()
    meta = ours["tournament"]["intent"]
    out: Dict[str, Any] = {"machine": info, "shape": args.shape, "labels": args.labels,
                           "group": args.group, "precision": args.precision,
                           "rounds": meta["rounds"], "finalists": len(meta["labels"]),
                           "kime": summarize(seconds), "kime_version": kime.__version__}

    peer_note = "not run (--peers none)"
    if args.peers == "auto":
        python, why = find_peer_python(args.peer_python)
        if python is None:
            peer_note = "not run: " + why
        else:
            log("running Laya's torch Agent with %s (%s)" % (python, why))
            peer = _peer(python, {"path": path, "state": STATE, "questions": qs,
                                  "group": args.group, "warmup": args.warmup,
                                  "repeat": args.repeat}, timeout=3600)
            out["laya"] = summarize(peer["seconds"])
            out["laya_versions"] = {"laya": peer["laya"], "torch": peer["torch"],
                                    "torch_threads": peer["threads"]}
            out["agreement"] = compare_results(ours, peer["result"])
            peer_note = "laya %s, torch %s (%d threads)" % (peer["laya"], peer["torch"],
                                                            peer["threads"])

    print("predict_tournament: %d labels, group_size %d, shape %s -> %d round(s), %d finalists"
          % (args.labels, args.group, args.shape, meta["rounds"], len(meta["labels"])))
    print("CPU: %s, %d cores; kime %s (%s, threads=%s, answer cache off); Laya: %s"
          % (info["cpu"], info["cores"], kime.__version__, args.precision,
             args.threads or "all", peer_note))
    print(_line("kime", out["kime"]))
    if "laya" in out:
        print(_line("laya (torch)", out["laya"]))
        print("  kime is %.2fx Laya's speed (ratio of medians)"
              % (out["laya"]["p50"] / out["kime"]["p50"]))
        agree = out["agreement"]
        print("  answers: largest difference %.2g%s; labels that differ: %s"
              % (agree["max_abs"], " (%s)" % agree["worst"] if agree["worst"] else "",
                 agree["mismatches"] or "none"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
        # These slow a current OpenBLAS and are read when NumPy loads it: start again without.
        env = clean_env({"KIME_BENCH_REEXEC": "1"})
        os.execve(sys.executable, [sys.executable, "-m", "bench.tournament"] + sys.argv[1:], env)
    sys.exit(main())
