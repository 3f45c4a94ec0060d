"""`python -m bench.stability`: `OptionStabilityHook` on kime beside Laya's torch `Agent`, in one
run on one machine.

The hook multiplies a request's rows: with Laya's defaults (`variants="full"`, 3 shuffles,
letters) each choice question is asked up to 8 times, in the same forward pass as the rest. The
questions are workload W3's ten (choices of 6, 3 and 8 options, scores, nouls; `--questions w2`:
W2's five, one choice of 6), on a random checkpoint of `--shape` (`base`: max_len 512,
head_max_len 192). Two calls, each timed without the hook and with it, on both sides:

- `single`: `predict` of one support ticket of `--tokens` tokens;
- `batch`: `predict_batch` of `--states` tickets of different lengths (one shared call; the hook
  seeds them as 'batch'), where rows of different lengths are what unpadded batches save on.

kime's answer cache is off, so every call runs the model. Laya runs in the peer interpreter
(`bench.peers`), in a side process started after kime's calls, so neither side's thread pool is
awake during the other's; without one, kime runs alone and the report says why.

Prints the CPU, the rows each call becomes, each side's median, p95 and worst call, the ratio of
medians, what the hook costs each side (with / without), and how far the answers (the
`reliability` dicts included) are apart. `--json PATH` also writes the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from .peers import UNSET_ENV, clean_env, find_peer_python, run_script, timing_line

# Laya's side: reads one JSON request on stdin, answers one JSON object on stdout.
PEER = r"""
import json, sys, time, warnings
req = json.load(sys.stdin)
import torch
import laya
from laya.agent import Agent
from laya.hooks import OptionStabilityHook
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    agent = Agent(req["path"], device="cpu")
    hook = OptionStabilityHook(**req["hook"])
    calls = {
        "single": lambda hooks: agent.predict(req["states"][0], req["questions"], hooks=hooks),
        "batch": lambda hooks: agent.predict_batch(req["states"], req["questions"], hooks=hooks),
    }
    out = {}
    for name, call in calls.items():
        for hooked in (False, True):
            seconds, result = [], None
            for i in range(req["warmup"] + req["repeat"]):
                t0 = time.perf_counter()
                result = call([hook] if hooked else None)
                if i >= req["warmup"]:
                    seconds.append(time.perf_counter() - t0)
            out["%s%s" % (name, "+hook" if hooked else "")] = {"seconds": seconds,
                                                               "result": result}
json.dump({"runs": out, "laya": laya.__version__, "torch": torch.__version__,
           "threads": torch.get_num_threads()}, sys.stdout)
"""

HOOK: Dict[str, Any] = {"accept": 0.9, "escalate": 0.3}
"""The hook on both sides: Laya's defaults for everything but the (required) thresholds."""


def _peer(python: str, req: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    return run_script(python, PEER, req, timeout)


def _line(name: str, s: Dict[str, Any]) -> str:
    return timing_line(name, s, width=20, digits=1)


def _timed(call: Callable[[], Any], warmup: int, repeat: int) -> "tuple[List[float], Any]":
    seconds: List[float] = []
    result: Any = None
    for i in range(warmup + repeat):
        t0 = time.perf_counter()
        result = call()
        if i >= warmup:
            seconds.append(time.perf_counter() - t0)
    return seconds, result


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.stability",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--questions", choices=("w2", "w3"), default="w3",
                    help="W3's ten questions (3 choices) or W2's five (1 choice)")
    ap.add_argument("--tokens", type=int, default=120, help="the single ticket's tokens")
    ap.add_argument("--states", type=int, default=8, help="tickets in the batch call")
    ap.add_argument("--repeat", type=int, default=5, help="timed calls per side and call")
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
    from kime.hooks import OptionStabilityHook

    from .machine import machine_info
    from .stats import compare_results, summarize
    from .workloads import (cached_checkpoint, exact_tokens_text, questions_w2, questions_w3,
                            source_text, tokenizer_encoder)

    log = lambda s: print("[bench.stability] " + s, file=sys.stderr, flush=True)  # noqa: E731
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    encode = tokenizer_encoder(path)
    # the single ticket first, then tickets from 40 to 300 tokens: rows of many lengths
    lengths = [args.tokens] + [40 + (260 * i) // max(1, args.states - 2)
                               for i in range(args.states - 1)]
    states: List[Any] = [exact_tokens_text(encode, source_text(11 + i, sentences=60), n)
              for i, n in enumerate(lengths)]
    qs = questions_w3() if args.questions == "w3" else questions_w2()
    info = machine_info()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(path, device="cpu", threads=args.threads, precision=args.precision,
                          answer_cache=0)
        hook = OptionStabilityHook(**HOOK)
        calls: Dict[str, Callable[[Any], Any]] = {
            "single": lambda hooks: agent.predict(states[0], qs, hooks=hooks),
            "batch": lambda hooks: agent.predict_batch(states, qs, hooks=hooks),
        }
        runs: Dict[str, Dict[str, Any]] = {}
        for name, call in calls.items():
            for hooked in (False, True):
                before = agent.engine.scheduler.rows
                seconds, result = _timed(lambda: call([hook] if hooked else None), args.warmup,
                                         args.repeat)
                rows = (agent.engine.scheduler.rows - before) // (args.warmup + args.repeat)
                runs[name + ("+hook" if hooked else "")] = {
                    "kime": summarize(seconds), "rows": rows, "result": result}
    agent.close()
    print("OptionStabilityHook (variants 'full'): %s's %d questions, shape %s; single: one "
          "%d-token ticket; batch: %d tickets of %d..%d tokens"
          % (args.questions.upper(), len(qs), args.shape, args.tokens, len(states),
             min(lengths), max(lengths)))
    print("CPU: %s, %d cores; kime %s (%s, threads=%s, answer cache off)"
          % (info["cpu"], info["cores"], kime.__version__, args.precision,
             args.threads or "all"), flush=True)
    for key, run in runs.items():
        print("%s: %d rows" % (key, run["rows"]))
        print(_line("kime", run["kime"]), flush=True)

    peer_note = "not run (--peers none)"
    versions: Dict[str, Any] = {}
    if args.peers == "auto":
        python, why = find_peer_python(args.peer_python)
        if python is None:
            peer_note = "not run: " + why
        else:
            log("running Laya's torch Agent with %s (%s)" % (python, why))
            peer = _peer(python, {"path": path, "states": states, "questions": qs, "hook": HOOK,
                                  "warmup": args.warmup, "repeat": args.repeat}, timeout=3600)
            for key, got in peer["runs"].items():
                runs[key]["laya"] = summarize(got["seconds"])
                runs[key]["agreement"] = compare_results(runs[key]["result"], got["result"])
            versions = {"laya": peer["laya"], "torch": peer["torch"],
                        "torch_threads": peer["threads"]}
            peer_note = "laya %s, torch %s (%d threads)" % (peer["laya"], peer["torch"],
                                                            peer["threads"])

    print("Laya: %s" % peer_note)
    for key, run in runs.items():
        if "laya" in run:
            print("%s: %d rows" % (key, run["rows"]))
            print(_line("kime", run["kime"]))
            print(_line("laya (torch)", run["laya"]))
            print("  kime is %.2fx Laya's speed (ratio of medians)"
                  % (run["laya"]["p50"] / run["kime"]["p50"]))
            agree = run["agreement"]
            print("  answers: largest difference %.2g%s; labels that differ: %s"
                  % (agree["max_abs"], " (%s)" % agree["worst"] if agree["worst"] else "",
                     agree["mismatches"] or "none"))
    for name in calls:
        plain, probed = runs[name], runs[name + "+hook"]
        sides = [("kime", "kime")] + ([("laya", "laya (torch)")] if "laya" in plain else [])
        print("the hook's cost on %s: %s" % (name, "; ".join(
            "%s %.2fx" % (label, probed[side]["p50"] / plain[side]["p50"])
            for side, label in sides)))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "shape": args.shape, "lengths": lengths,
                       "questions": len(qs), "precision": args.precision,
                       "kime_version": kime.__version__, "laya_versions": versions,
                       "runs": {k: {kk: vv for kk, vv in v.items() if kk != "result"}
                                for k, v in runs.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
        # These slow a current OpenBLAS and are read when NumPy loads it: start again without.
        env = clean_env({"KIME_BENCH_REEXEC": "1"})
        os.execve(sys.executable, [sys.executable, "-m", "bench.stability"] + sys.argv[1:], env)
    sys.exit(main())
