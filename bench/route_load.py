"""Serve throughput with three checkpoints behind a Router, against one checkpoint.

    python -m bench.route_load [--shape tiny] [--concurrency 1,8,32] [--requests N]
                               [--threads N] [--time-cap S] [--json]

Three `kime serve` configurations, each in turn on a free loopback port, each driven by
`bench.load`'s worker process (keep-alive connections, a separate GIL) with the same W2-like
requests: a ~300-token state, unique per request, and five questions.

- `one`: `--model CKPT`, the single-model server. It takes the requests as they are (with one
  engine, `lang` and `task` change nothing).
- `router-1`: `--model english=CKPT`, a Router that serves one checkpoint, to show what routing
  costs (detecting the language of every state). Its requests carry no `lang` or `task`.
- `router-3`: english, multilingual and typed-decisions, each with its own engine and
  scheduler. A third of the requests are left to detection (English text, so english), a
  third carry `"lang": "de"` (multilingual) and a third `"task": "typed-decisions"`.

The english and typed-decisions checkpoints are `--shape`, the multilingual one is the
multilingual variant of the shape (`tiny` -> `multilingual-tiny`; `base` has none and serves
itself in that role). They are random checkpoints from `bench.workloads`' cache. All three
engines share the machine's cores: `--threads` per engine (default: the cores / 3 for router-3,
all of them otherwise).
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Dict, List, Optional, Sequence

from bench.load import Server, _clean_env, _healthy, build_requests, drive, free_port, summarize

MULTILINGUAL = {"tiny": "multilingual-tiny", "base": "base"}
ROUTED = ({}, {"lang": "de"}, {"task": "typed-decisions"})


def start(name: str, models: List[str], threads: int) -> Server:
    port = free_port()
    argv = [sys.executable, "-m", "kime.cli", "serve", "--host", "127.0.0.1", "--port",
            str(port), "--log-level", "warning", "--threads", str(threads), "--device", "cpu"]
    for model in models:
        argv += ["--model", model]
    return _healthy(Server(name, argv, _clean_env(), port), 180.0)


def run(shape: str, levels: Sequence[int], n: int, threads: Optional[int],
        time_cap: float) -> Dict[str, Any]:
    import os

    from bench.workloads import cached_checkpoint

    english = cached_checkpoint(shape)
    multilingual = cached_checkpoint(MULTILINGUAL[shape])
    cores = os.cpu_count() or 1
    plain = build_requests(english, n * len(levels) + 8)
    routed = [dict(body, **ROUTED[i % 3]) for i, body in enumerate(plain)]
    configs = [
        ("one", [english], plain, threads or cores),
        ("router-1", ["english=" + english], plain, threads or cores),
        ("router-3", ["english=" + english, "multilingual=" + multilingual,
                      "typed-decisions=" + english], routed, threads or max(1, cores // 3)),
    ]
    out: Dict[str, Any] = {"shape": shape, "requests_per_level": n, "configs": {}}
    for name, models, bodies, engine_threads in configs:
        srv = start(name, models, engine_threads)
        try:
            drive(srv, bodies[:8], 4, time_cap)  # warm every checkpoint's plans
            rows, offset = [], 8
            for level in levels:
                before = srv.metrics()
                raw = drive(srv, bodies[offset:offset + n], level, time_cap)
                rows.append(summarize(raw, len(bodies[0]["questions"]), level, before,
                                      srv.metrics()))
                offset += n
            _, health = srv.get("/health")
            out["configs"][name] = {"threads_per_engine": engine_threads, "levels": rows,
                                    "loaded": json.loads(health).get("loaded")}
        finally:
            srv.stop()
    return out


def report(res: Dict[str, Any]) -> str:
    lines = ["serve throughput, %s checkpoints, %d requests per level (5 questions each)"
             % (res["shape"], res["requests_per_level"]),
             "%-9s %7s %5s %9s %9s %9s %8s %6s" % ("config", "threads", "conc", "req/s",
                                                  "p50 ms", "p99 ms", "req/run", "errors")]
    for name, cfg in res["configs"].items():
        for row in cfg["levels"]:
            lines.append("%-9s %7d %5d %9.1f %9.1f %9.1f %8s %6d" % (
                name, cfg["threads_per_engine"], row["concurrency"], row["requests_per_s"] or 0,
                row["p50_ms"] or 0, row["p99_ms"] or 0,
                "%.2f" % row["requests_per_run"] if row["requests_per_run"] else "-",
                row["errors"]))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.route_load", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default="tiny", choices=sorted(MULTILINGUAL))
    parser.add_argument("--concurrency", default="1,8,32")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--time-cap", type=float, default=60.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    res = run(args.shape, levels, args.requests, args.threads, args.time_cap)
    print(json.dumps(res, indent=1) if args.json else report(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
