"""`python -m bench.score`: rows/s of `kime score` on this machine's engine and on Ray, at equal
cores, beside a hand-written `predict_batch` loop, on a random checkpoint (`tiny` by default).

Every engine scores the same JSONL file (distinct states, so no answer is cached) through the
real job (`kime.jobs.job.score_job`: reading, layout, the forward pass, JSON encoding, fsynced
appends), and its rate is the one the closing line reports: rows over the time from the first
row submitted to the last row written, so model load and cluster start are not counted. Ray
runs one actor with threads = the cores given, on a local cluster of exactly those cores, so the
comparison is the cost of Ray's plumbing, not of more hardware (`--ray-actors N` splits the
same cores between N actors). Repeats alternate the engines, so a change in the machine's load
hits each alike; the report gives medians.

    python -m bench.score [--rows 4000] [--repeats 3] [--cores N] [--engines loop,local,ray]
                          [--ray-actors N]
"""
from __future__ import annotations

import argparse
import io
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from typing import Dict, List, Optional, Sequence

from bench.machine import machine_info
from bench.workloads import cached_checkpoint

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "replace": "a new item", "info": None,
                            "complaint": None}},
    "urgent": {"type": "noul", "instructions": "Does this need an answer today?"},
    "mood": {"type": "score", "instructions": "How upset is the customer?",
             "criteria": ["calm", "annoyed", "upset", "furious"]},
}
WORDS = ("my order", "has not arrived", "and I want", "a refund", "please help", "the parcel",
         "was damaged", "again", "for the third time", "thank you", "urgently", "invoice")
CLOSING = re.compile(r"^scored (\d+) rows \((\d+) errors\) in ([\d.]+) s: ([\d.]+) rows/s$")
ENGINES = ("loop", "local", "ray")


def write_input(path: str, rows: int) -> List[str]:
    """`rows` distinct ticket-like states of 8 to 40 words, as `kime score` input."""
    states = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            n = 8 + (i * 7) % 33
            text = "ticket %d: " % i + " ".join(WORDS[(i + j * 5) % len(WORDS)] for j in range(n))
            states.append(text)
            f.write(json.dumps({"id": i, "state": text}) + "\n")
    return states


def run_job(model: str, source: str, out_dir: str, engine: str, cores: int,
            batch_size: int, actors: int = 1) -> float:
    """One `kime score` run; its rows/s from the closing line."""
    from kime.jobs.job import score_job
    from kime.jobs.options import EngineOptions

    dst = os.path.join(out_dir, "%s.jsonl" % engine)
    if os.path.exists(dst):
        os.unlink(dst)
    ray = engine == "ray"
    opts = EngineOptions(model=model, engine=engine, batch_size=batch_size,
                         threads=max(1, cores // actors) if ray else cores,
                         actors=actors if ray else None)
    said = io.StringIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = score_job(opts, QUESTIONS, source, dst, out=said, err=io.StringIO())
    m = CLOSING.match(said.getvalue().strip().splitlines()[-1])
    if code != 0 or m is None:
        raise RuntimeError("kime score --engine %s failed: %s" % (engine, said.getvalue()))
    return float(m.group(4))


def run_loop(model: str, states: Sequence[str], cores: int, batch_size: int) -> float:
    """A hand-written `predict_batch` loop over the same states: rows/s, load not counted."""
    import kime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(model, threads=cores)
    t0 = time.perf_counter()
    for start in range(0, len(states), batch_size):
        for result in agent.predict_batch(list(states[start:start + batch_size]), QUESTIONS):
            json.dumps(result)
    rate = len(states) / (time.perf_counter() - t0)
    agent.close()
    return rate


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.score", description=__doc__.split(
        "\n\n")[0])
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cores", type=int, default=0, help="cores each engine gets (0: all)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--shape", default="tiny")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--ray-actors", type=int, default=1, help="Ray actors sharing the cores "
                        "(default 1: one actor with every core, as on a node)")
    parser.add_argument("--cache-dir", default=None, help="where the random checkpoint is kept")
    parser.add_argument("--json", default=None, help="also write the numbers to this file")
    args = parser.parse_args(argv)
    engines = [e for e in args.engines.split(",") if e]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error("unknown engines %s; use %s" % (unknown, ", ".join(ENGINES)))
    info = machine_info()
    cores = args.cores or info["cores"]
    model = cached_checkpoint(args.shape, args.cache_dir)
    work = tempfile.mkdtemp(prefix="kime-bench-score-")
    ray = None
    try:
        source = os.path.join(work, "in.jsonl")
        states = write_input(source, args.rows)
        if "ray" in engines:
            import ray

            ray.init(num_cpus=cores, include_dashboard=False, logging_level="WARNING")
        rates: Dict[str, List[float]] = {e: [] for e in engines}
        for r in range(args.repeats):
            for engine in engines:
                rate = run_loop(model, states, cores, args.batch_size) if engine == "loop" \
                    else run_job(model, source, work, engine, cores, args.batch_size,
                                 args.ray_actors)
                rates[engine].append(rate)
                print("repeat %d  %-5s %8.1f rows/s" % (r + 1, engine, rate), file=sys.stderr,
                      flush=True)
    finally:
        if ray is not None:
            ray.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    medians = {e: statistics.median(v) for e, v in rates.items()}
    print("cpu: %s, %d cores given to each engine (of %d); load average %s"
          % (info["cpu"], cores, info["cores"],
             " ".join("%.2f" % x for x in info.get("loadavg_start", []))))
    print("%d rows of %d questions (%s checkpoint), chunks of %d; median of %d runs"
          % (args.rows, len(QUESTIONS), args.shape, args.batch_size, args.repeats))
    labels = {"loop": "predict_batch loop", "local": "kime score (local)",
              "ray": "kime score (ray, %d x %d)" % (args.ray_actors,
                                                    max(1, cores // args.ray_actors))}
    for engine in engines:
        print("  %-26s %8.1f rows/s" % (labels[engine], medians[engine]))
    if "ray" in medians and "local" in medians:
        print("  ray / local: %.2fx (target >= 0.8x)" % (medians["ray"] / medians["local"]))
    if "loop" in medians and "local" in medians:
        print("  local / predict_batch loop: %.2fx" % (medians["local"] / medians["loop"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "cores": cores, "rows": args.rows, "rates": rates,
                       "medians": medians}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
