"""`python -m bench.parallel`: W1 and W3 on a parallel-layout checkpoint beside the same weights
in the sequential layout, and beside Laya's torch `Agent`, in one run on one machine.

A checkpoint trained with `option_layout="parallel"` is run with per-token position ids and an
option mask in every encoder layer (`kime.layout.parallel_layout`). The two checkpoints here are
one random checkpoint of `--shape` (`base`: max_len 512), written once, and a copy of it whose
config says `"option_layout": "parallel"` (its files hard-linked where the file system allows),
so the weights and rows are the same and only the layout differs.

kime's calls run first, the two layouts interleaved call by call (W1 sequential, W1 parallel, W1
sequential, ...), each with the answer cache off. Laya then runs in the peer interpreter
(`bench.peers`), in a side process started after kime's calls so neither side's thread pool is
awake during the other's, on both layouts the same way. Prints the CPU, each side's median, p95
and worst call, the ratios of medians (parallel / sequential on each side, kime / Laya on each
layout), and how far kime's answers are from Laya's on each layout. `--json PATH` also writes
the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from typing import Any, Dict, List, Optional

from .peers import UNSET_ENV, clean_env, find_peer_python, run_script, timing_line

LAYOUTS = ("sequential", "parallel")

# Laya's side: reads one JSON request on stdin, answers one JSON object on stdout.
PEER = r"""
import json, sys, time, warnings
req = json.load(sys.stdin)
import torch
import laya
from laya.agent import Agent
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    agents = {k: Agent(p, device="cpu") for k, p in req["paths"].items()}
    assert agents["parallel"].parallel_options and not agents["sequential"].parallel_options
    out = {}
    for w in req["workloads"]:
        for i in range(req["warmup"] + req["repeat"]):
            for layout, agent in agents.items():
                t0 = time.perf_counter()
                result = agent.predict(w["state"], w["questions"])
                dt = time.perf_counter() - t0
                run = out.setdefault("%s/%s" % (w["name"], layout), {"seconds": []})
                if i >= req["warmup"]:
                    run["seconds"].append(dt)
                run["result"] = result
json.dump({"runs": out, "laya": laya.__version__, "torch": torch.__version__,
           "threads": torch.get_num_threads()}, sys.stdout)
"""


def parallel_twin(path: str) -> str:
    """A sibling of checkpoint `path` whose config asks for the parallel layout, made once."""
    twin = path.rstrip("/") + "-parallel"
    cfg_file = os.path.join(twin, "rl_agent_config.json")
    if os.path.isfile(cfg_file) and os.path.isfile(os.path.join(twin, "model.safetensors")):
        return twin
    tmp = twin + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(path, tmp, copy_function=_link_or_copy)
    cfg_tmp = os.path.join(tmp, "rl_agent_config.json")
    with open(cfg_tmp) as f:
        cfg = json.load(f)
    cfg["option_layout"] = "parallel"
    os.remove(cfg_tmp)  # a hard link: rewriting it in place would change the original too
    with open(cfg_tmp, "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.rmtree(twin, ignore_errors=True)
    os.replace(tmp, twin)
    return twin


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _peer(python: str, req: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    return run_script(python, PEER, req, timeout)


def _line(name: str, s: Dict[str, Any]) -> str:
    return timing_line(name, s, width=24, digits=2)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.parallel",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", default="base")
    ap.add_argument("--workloads", default="W1,W3")
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per layout and workload")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls first")
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
    from .workloads import build_workloads, cached_checkpoint

    log = lambda s: print("[bench.parallel] " + s, file=sys.stderr, flush=True)  # noqa: E731
    seq_path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    paths = {"sequential": seq_path, "parallel": parallel_twin(seq_path)}
    info = machine_info()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {k: kime.load(p, device="cpu", threads=args.threads,
                               precision=args.precision, answer_cache=0)
                  for k, p in paths.items()}
    if not agents["parallel"].engine.checkpoint.config.parallel:
        raise AssertionError("the parallel twin did not load as a parallel checkpoint")
    workloads = build_workloads(seq_path, agents["sequential"].engine,
                                [w.strip() for w in args.workloads.split(",") if w.strip()])
    runs: Dict[str, Dict[str, Any]] = {}
    for w in workloads:
        samples: Dict[str, List[float]] = {k: [] for k in LAYOUTS}
        for i in range(args.warmup + args.repeat):
            for layout in LAYOUTS:
                t0 = time.perf_counter()
                result = agents[layout].predict(w.states[0], w.questions)
                dt = time.perf_counter() - t0
                if i >= args.warmup:
                    samples[layout].append(dt)
                runs.setdefault("%s/%s" % (w.name, layout), {})["result"] = result
        for layout in LAYOUTS:
            runs["%s/%s" % (w.name, layout)]["kime"] = summarize(samples[layout])
    for agent in agents.values():
        agent.close()

    print("Parallel vs sequential layout: shape %s, the same weights; %s"
          % (args.shape, "; ".join("%s %s" % (w.name, w.title) for w in workloads)))
    print("CPU: %s, %d cores; kime %s (%s, threads=%s, answer cache off)"
          % (info["cpu"], info["cores"], kime.__version__, args.precision,
             args.threads or "all"), flush=True)
    peer_note = "not run (--peers none)"
    versions: Dict[str, Any] = {}
    if args.peers == "auto":
        python, why = find_peer_python(args.peer_python)
        if python is None:
            peer_note = "not run: " + why
        else:
            log("running Laya's torch Agent with %s (%s)" % (python, why))
            peer = _peer(python, {
                "paths": paths, "warmup": args.warmup, "repeat": args.repeat,
                "workloads": [{"name": w.name, "state": w.states[0], "questions": w.questions}
                              for w in workloads]}, timeout=7200)
            for key, got in peer["runs"].items():
                runs[key]["laya"] = summarize(got["seconds"])
                runs[key]["agreement"] = compare_results(runs[key]["result"], got["result"])
            versions = {"laya": peer["laya"], "torch": peer["torch"],
                        "torch_threads": peer["threads"]}
            peer_note = "laya %s, torch %s (%d threads)" % (peer["laya"], peer["torch"],
                                                            peer["threads"])
    print("Laya: %s" % peer_note)
    for w in workloads:
        seq, par = runs[w.name + "/sequential"], runs[w.name + "/parallel"]
        print("%s (%s):" % (w.name, w.title))
        for layout, run in (("sequential", seq), ("parallel", par)):
            print(_line("kime %s" % layout, run["kime"]))
            if "laya" in run:
                print(_line("laya %s" % layout, run["laya"]))
        print("  parallel / sequential (ratio of medians): kime %.3fx%s"
              % (par["kime"]["p50"] / seq["kime"]["p50"],
                 "; laya %.3fx" % (par["laya"]["p50"] / seq["laya"]["p50"])
                 if "laya" in par else ""))
        for layout, run in (("sequential", seq), ("parallel", par)):
            if "laya" in run:
                agree = run["agreement"]
                print("  %s: kime is %.2fx Laya's speed; answers: largest difference %.2g%s; "
                      "labels that differ: %s"
                      % (layout, run["laya"]["p50"] / run["kime"]["p50"], agree["max_abs"],
                         " (%s)" % agree["worst"] if agree["worst"] else "",
                         agree["mismatches"] or "none"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "shape": args.shape, "precision": args.precision,
                       "kime_version": kime.__version__, "laya_versions": versions,
                       "runs": {k: {kk: vv for kk, vv in v.items() if kk != "result"}
                                for k, v in runs.items()}}, f, indent=1)
    return 0


if __name__ == "__main__":
    if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
        # These slow a current OpenBLAS and are read when NumPy loads it: start again without.
        env = clean_env({"KIME_BENCH_REEXEC": "1"})
        os.execve(sys.executable, [sys.executable, "-m", "bench.parallel"] + sys.argv[1:], env)
    sys.exit(main())
