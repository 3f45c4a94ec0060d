"""`python -m bench.layer --base REV`: what Laya's layer costs, this checkout against another.

The engine does the same work in both; what differs is the Python around it (the call pipeline,
hooks, routing, the server's handlers). Measured, interleaved round by round:

- **W1** and **W3** through `kime.load(...).predict` on `--shape` (default `base`; answer cache
  off), one process per checkout, each loaded once;
- **routed**: `Router.predict_batch` of 64 states (English and German, every request routed by
  detection) over the `tiny` and `multilingual-tiny` checkpoints;
- **served**: requests per second of `kime serve --model tiny` under 8 concurrent clients (W2-like
  bodies, unique states; `bench.load`'s client in its own process), one server at a time.

Each checkout's `kime` is imported from that checkout (`PYTHONPATH`); `--base` is checked out in
a temporary git worktree, and its compiled kernels are copied from this checkout when their
sources are the same (else it is built in place). Between calls the machine is left quiet
(`GAP_S`), so one process's spinning thread pool does not steal the other's cores. Prints the
CPU, medians and tails per checkout, and this checkout's time over the base's.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.layer --base 5291c92
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

REPO = str(Path(__file__).resolve().parents[1])
GAP_S = 0.05
ROUTED_STATES = 64


# --- the worker: one checkout's kime, driven over stdin ----------------------------------------

def _worker() -> int:
    """Load what the first line asks, then answer `{"run": name, "n": N}` lines with the
    seconds of each of N calls."""
    import warnings

    warnings.simplefilter("ignore")
    import kime

    spec = json.loads(sys.stdin.readline())
    agent = kime.load(spec["checkpoint"], device="cpu", answer_cache=0)
    router = kime.Router(models={"english": spec["tiny"], "multilingual": spec["ml"],
                                 "typed-decisions": spec["tiny"]},
                         device="cpu", agent_kwargs={"answer_cache": 0}).preload()
    work = spec["work"]

    def once(name: str) -> None:
        if name == "routed":
            router.predict_batch(work["routed"])
        else:
            agent.predict(work[name]["state"], work[name]["questions"])

    sys.stdout.write(json.dumps({"kime": kime.__file__}) + "\n")
    sys.stdout.flush()
    for line in sys.stdin:
        ask = json.loads(line)
        times = []
        for _ in range(ask["n"]):
            time.sleep(GAP_S)
            t0 = time.perf_counter()
            once(ask["run"])
            times.append(time.perf_counter() - t0)
        sys.stdout.write(json.dumps(times) + "\n")
        sys.stdout.flush()
    return 0


class Worker:
    def __init__(self, tree: str, spec: Dict[str, Any]):
        from bench.peers import clean_env

        env = clean_env()
        env["PYTHONPATH"] = tree
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker"],
                                     env=env, cwd=tree, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.ask(spec)
        self.kime = json.loads(self.proc.stdout.readline())["kime"]  # type: ignore[union-attr]
        if not self.kime.startswith(tree):
            raise RuntimeError("the worker for %s imported kime from %s" % (tree, self.kime))

    def ask(self, obj: Any) -> None:
        self.proc.stdin.write(json.dumps(obj) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]

    def run(self, name: str, n: int) -> List[float]:
        self.ask({"run": name, "n": n})
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr,no-any-return]

    def close(self) -> None:
        self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.wait(30)


# --- the base checkout ---------------------------------------------------------------------------

def checkout(rev: str) -> str:
    """A worktree of `rev` with its compiled kernels in place, kept in the temporary directory
    for the next run (`git worktree remove` it, or `--clean`)."""
    commit = subprocess.run(["git", "-C", REPO, "rev-parse", rev], check=True,
                            capture_output=True, text=True).stdout.strip()
    where = os.path.join(tempfile.gettempdir(), "kime-base-" + commit[:12])
    if os.path.isdir(where) and list(Path(where, "kime", "_cpu").glob("*.so")):
        return where
    subprocess.run(["git", "-C", REPO, "worktree", "add", "--force", "--detach", where, commit],
                   check=True, capture_output=True)
    same = subprocess.run(["git", "-C", REPO, "diff", "--quiet", rev, "--", "kime/_cpu/*.pyx",
                           "kime/_cpu/*.pxd", "kime/_cpu/csrc", "setup.py"]).returncode == 0
    if same:
        for so in Path(REPO, "kime", "_cpu").glob("*.so"):
            shutil.copy2(so, Path(where, "kime", "_cpu", so.name))
    else:
        subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=where,
                       check=True, capture_output=True)
    return where


def drop(where: str) -> None:
    subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", where],
                   capture_output=True)


# --- the measurements ----------------------------------------------------------------------------

def workloads(checkpoint: str, tiny: str) -> Dict[str, Any]:
    import kime
    from bench.workloads import build_workloads

    with kime.Kime(checkpoint, device="cpu") as engine:
        built = {w.name: w for w in build_workloads(checkpoint, engine, ("W1", "W3"))}
    english = "I was charged twice for my order %d and I want my money back today."
    german = "Ich wurde für meine Bestellung %d zweimal belastet und möchte mein Geld zurück."
    questions = built["W1"].questions
    routed = [{"state": (english if i % 2 else german) % i, "questions": questions}
              for i in range(ROUTED_STATES)]
    return {"W1": {"state": built["W1"].states[0], "questions": questions},
            "W3": {"state": built["W3"].states[0], "questions": built["W3"].questions},
            "routed": routed}


def served_rps(tree: str, tiny: str, bodies: List[Dict[str, Any]]) -> float:
    from bench import load

    port = load.free_port()
    argv = [sys.executable, "-m", "kime.cli", "serve", "--model", tiny, "--host", "127.0.0.1",
            "--port", str(port), "--log-level", "warning"]
    srv = load.Server("kime", argv, dict(load._clean_env(), PYTHONPATH=tree), port)
    try:
        load._healthy(srv, 120.0)
        load.drive(srv, bodies[:16], 8, 60.0)  # warm: plans, caches off the timed run
        raw = load.drive(srv, bodies, 8, 120.0)
        if raw["errors"]:
            raise RuntimeError("%s: %d requests failed: %s"
                               % (tree, len(raw["errors"]), raw["errors"][:3]))
        return len(raw["latencies"]) / raw["elapsed"]
    finally:
        srv.stop()


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.layer", description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the git revision to compare against")
    ap.add_argument("--shape", default="base", help="checkpoint shape for W1 and W3")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=10, help="calls per workload per round")
    ap.add_argument("--requests", type=int, default=160, help="served requests per round")
    ap.add_argument("--clean", action="store_true", help="remove the base worktree afterwards")
    ap.add_argument("--no-serve", action="store_true", help="skip the served requests/s")
    args = ap.parse_args(argv)

    from bench import load
    from bench.machine import machine_info
    from bench.stats import summarize
    from bench.workloads import cached_checkpoint

    checkpoint = str(cached_checkpoint(args.shape))
    tiny, ml = str(cached_checkpoint("tiny")), str(cached_checkpoint("multilingual-tiny"))
    base = checkout(args.base)
    trees = {"base": base, "head": REPO}
    samples: Dict[str, Dict[str, List[float]]] = {t: {} for t in trees}
    try:
        spec = {"checkpoint": checkpoint, "tiny": tiny, "ml": ml,
                "work": workloads(checkpoint, tiny)}
        workers = {name: Worker(tree, spec) for name, tree in trees.items()}
        for _ in range(2):  # warm every plan in both
            for worker in workers.values():
                for run in ("W1", "W3", "routed"):
                    worker.run(run, 2)
        for r in range(args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for run in ("W1", "W3", "routed"):
                calls = max(2, args.calls // 3) if run == "W3" else args.calls  # W3 is the slow one
                for name in order:
                    samples[name].setdefault(run, []).extend(workers[name].run(run, calls))
        for worker in workers.values():
            worker.close()
        for r in range(0 if args.no_serve else args.rounds):
            order = list(trees) if r % 2 == 0 else list(trees)[::-1]
            for name in order:
                samples[name].setdefault("served_rps", []).append(
                    served_rps(trees[name], tiny, load.build_requests(tiny, args.requests,
                                                                      salt="r%d%s" % (r, name))))
    finally:
        if args.clean:
            drop(base)
    report: Dict[str, Any] = {"machine": machine_info(), "base": args.base, "shape": args.shape,
                              "results": {}}
    print("CPU: %s" % report["machine"].get("cpu", report["machine"]))
    print("%-10s %-6s %10s %10s %10s   head/base (p50)" % ("workload", "tree", "p50", "p90",
                                                            "max"))
    for run in ("W1", "W3", "routed") + (() if args.no_serve else ("served_rps",)):
        row = {}
        for name in trees:
            stats = summarize(samples[name][run])
            row[name] = stats
            unit = 1.0 if run == "served_rps" else 1000.0
            print("%-10s %-6s %10.2f %10.2f %10.2f" % (
                run, name, stats["p50"] * unit, _p(samples[name][run], 90) * unit,
                stats["max"] * unit))
        ratio = row["head"]["p50"] / row["base"]["p50"]
        print("%-10s %-6s %43.3f %s" % (run, "", ratio,
                                        "(req/s)" if run == "served_rps" else "(ms)"))
        report["results"][run] = {"ratio_p50": ratio, **{k: {m: v[m] for m in ("n", "p50", "p95",
                                                                            "max")}
                                                        for k, v in row.items()}}
    print(json.dumps(report["results"]))
    return 0


def _p(xs: Sequence[float], p: float) -> float:
    from bench.stats import percentile

    return percentile(xs, p)


if __name__ == "__main__":
    if "--worker" in sys.argv:
        sys.exit(_worker())
    sys.exit(main())
