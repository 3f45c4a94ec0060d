"""`python -m bench.integrations`: one call through a framework integration, kime in process
beside laya 0.4.15 with its torch `Agent`, in one run on one machine.

Each measurement is one call a user of an integration makes, timed on both sides on a random
checkpoint of `--shape` (`base`: the published English shape, max_len 512, head_max_len 192):

- `langchain.router_invoke`: one `LayaRouter.invoke` of a support message over five routes
  (`kime.integrations.langchain.LayaRouter` on `kime.load(...)` against
  `laya.integrations.langchain.LayaRouter` on laya's `Agent`).
- `mcp.predict`: one MCP `laya_predict` tool call in process, routing included (`kime.mcp.tools`
  over a `kime.Router` against `laya.mcp.tools` over laya's torch `Router`, the checkpoint
  registered as `english` on both), with the JSON text the server would send.

kime's answer cache is off, so every call runs the model. Laya runs in the peer interpreter
(`bench.peers`: `--peer-python`, `$KIME_BENCH_PEER_PYTHON`, or the oracle environment), in a side
process started after kime's calls, so neither side's thread pool is awake during the other's;
without one, kime runs alone and the report says why.

A measurement is a `Measurement` in `MEASUREMENTS`: its name, a line saying what one call is, its
inputs (sent to both sides with the common `path`, `warmup`, `repeat`, `threads`, `precision`),
kime's side (a function of that request returning the seconds of each timed call and the last
decision) and laya's (Python source run after `PEER_PRELUDE`, which sets `seconds` and `result`).
`--only NAME` runs some of them. Prints the CPU, then per measurement each side's median, p95 and
worst call, the ratio of medians and how far the two decisions are apart. `--json PATH` also
writes the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .peers import UNSET_ENV, clean_env, find_peer_python, run_script, timing_line

PEER_PRELUDE = r"""
import json, sys, time, warnings
req = json.load(sys.stdin)
import torch
import laya
warnings.simplefilter("ignore")


def timed(call):
    seconds, result = [], None
    for i in range(req["warmup"] + req["repeat"]):
        t0 = time.perf_counter()
        result = call()
        if i >= req["warmup"]:
            seconds.append(time.perf_counter() - t0)
    return seconds, result
"""
"""Laya's side of every measurement starts with this: the request (JSON on stdin) and `timed`."""

PEER_EPILOGUE = r"""
json.dump({"seconds": seconds, "result": result, "laya": laya.__version__,
           "torch": torch.__version__, "threads": torch.get_num_threads()}, sys.stdout)
"""


class Measurement(NamedTuple):
    """One call, timed on both sides."""

    name: str
    about: str
    inputs: Dict[str, Any]
    kime: Callable[[Dict[str, Any]], Tuple[List[float], Any]]
    peer: str


def timed(call: Callable[[], Any], warmup: int, repeat: int) -> Tuple[List[float], Any]:
    """Seconds of each of `repeat` calls after `warmup` untimed ones, and the last result."""
    seconds: List[float] = []
    result: Any = None
    for i in range(warmup + repeat):
        t0 = time.perf_counter()
        result = call()
        if i >= warmup:
            seconds.append(time.perf_counter() - t0)
    return seconds, result


# --- langchain.router_invoke ---------------------------------------------------------------------

ROUTES = {"billing": "Payments, invoices, refunds and charges",
          "shipping": "Deliveries, parcels and addresses",
          "tech": "Bugs, crashes, errors and outages",
          "account": "Logins, passwords and profile settings",
          "sales": "Pricing, plans and upgrades"}
TICKET = ("Hi, I was charged twice for my subscription this month and the second payment "
          "still shows on my card. Could you refund it? Thanks, Priya")


def _kime_router_invoke(req: Dict[str, Any]) -> Tuple[List[float], Any]:
    import kime
    from kime.integrations.langchain import LayaRouter

    agent = kime.load(req["path"], device="cpu", threads=req["threads"],
                      precision=req["precision"], answer_cache=0)
    try:
        router = LayaRouter(criteria=req["criteria"], agent=agent)
        seconds, _ = timed(lambda: router.invoke(req["state"]), req["warmup"], req["repeat"])
        return seconds, router.last_decision
    finally:
        agent.close()


_PEER_ROUTER_INVOKE = r"""
from laya.agent import Agent
from laya.integrations.langchain import LayaRouter
router = LayaRouter(criteria=req["criteria"], agent=Agent(req["path"], device="cpu"))
seconds, result = timed(lambda: (router.invoke(req["state"]), router.last_decision)[1])
"""

# --- mcp.predict ---------------------------------------------------------------------------------

MCP_QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": ROUTES},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "this week", "today", "right now"]},
    "refund": {"type": "noul", "instructions": "The customer asks for a refund."}}


def _kime_mcp_predict(req: Dict[str, Any]) -> Tuple[List[float], Any]:
    import kime
    from kime.mcp import tools

    router = kime.Router(models={"english": req["path"]}, device="cpu",
                         agent_kwargs={"threads": req["threads"], "precision": req["precision"],
                                       "answer_cache": 0})
    router.preload(["english"])
    try:
        def call() -> Any:  # the tool's dict and the JSON text the server sends
            out = tools.run_tool(tools.laya_predict, state=req["state"],
                                 questions=req["questions"], router=router)
            json.dumps(out, ensure_ascii=False, indent=2)
            return out

        return timed(call, req["warmup"], req["repeat"])
    finally:
        router.unload()


_PEER_MCP_PREDICT = r"""
from laya.mcp import tools as T
router = laya.Router(models={"english": req["path"]}, device="cpu")
router.preload(["english"])
def call():
    out = T.laya_predict(req["state"], req["questions"], router=router)
    json.dumps(out, ensure_ascii=False, indent=2)
    return out
seconds, result = timed(call)
"""

MEASUREMENTS: Dict[str, Measurement] = {
    "langchain.router_invoke": Measurement(
        "langchain.router_invoke", "one LayaRouter.invoke: a support message, 5 routes",
        {"state": TICKET, "criteria": ROUTES}, _kime_router_invoke, _PEER_ROUTER_INVOKE),
    "mcp.predict": Measurement(
        "mcp.predict", "one MCP laya_predict tool call in process (its JSON included): a "
        "routed Router, 3 questions", {"state": {"message": TICKET}, "questions": MCP_QUESTIONS},
        _kime_mcp_predict, _PEER_MCP_PREDICT),
}
"""Every measurement, by name, in the order they run and print."""


# --- running ------------------------------------------------------------------------------------

def _peer(python: str, source: str, req: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    return run_script(python, PEER_PRELUDE + source + PEER_EPILOGUE, req, timeout)


def _line(name: str, s: Dict[str, Any]) -> str:
    return timing_line(name, s, width=14, digits=2)


def run_one(m: Measurement, req: Dict[str, Any], python: Optional[str]) -> Dict[str, Any]:
    """kime's calls, then laya's in the peer interpreter when there is one."""
    from .stats import compare_results, summarize

    seconds, ours = m.kime(req)
    out: Dict[str, Any] = {"about": m.about, "kime": summarize(seconds)}
    if python is not None:
        peer = _peer(python, m.peer, req, timeout=3600)
        out["laya"] = summarize(peer["seconds"])
        out["laya_versions"] = {"laya": peer["laya"], "torch": peer["torch"],
                                "torch_threads": peer["threads"]}
        out["agreement"] = compare_results(ours, peer["result"])
    return out


def report(name: str, out: Dict[str, Any]) -> None:
    """One measurement's lines."""
    print("%s: %s" % (name, out["about"]))
    print(_line("kime", out["kime"]))
    if "laya" in out:
        print(_line("laya (torch)", out["laya"]))
        print("  kime is %.2fx Laya's speed (ratio of medians)"
              % (out["laya"]["p50"] / out["kime"]["p50"]))
        agree = out["agreement"]
        print("  decisions: largest difference %.2g%s; labels that differ: %s"
              % (agree["max_abs"], " (%s)" % agree["worst"] if agree["worst"] else "",
                 agree["mismatches"] or "none"))


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.integrations",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", choices=sorted(MEASUREMENTS), default=None,
                    help="run this measurement (repeatable; default: all)")
    ap.add_argument("--shape", default="base")
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per side")
    ap.add_argument("--warmup", type=int, default=3, help="untimed calls first")
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
    from .workloads import cached_checkpoint

    log = lambda s: print("[bench.integrations] " + s, file=sys.stderr, flush=True)  # noqa: E731
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    info = machine_info()
    python, peer_note = None, "not run (--peers none)"
    if args.peers == "auto":
        python, why = find_peer_python(args.peer_python)
        peer_note = ("not run: " + why) if python is None else "with %s (%s)" % (python, why)
    common = {"path": path, "warmup": args.warmup, "repeat": args.repeat,
              "threads": args.threads, "precision": args.precision}
    results: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in args.only or list(MEASUREMENTS):
            log("%s: kime, then laya %s" % (name, peer_note))
            m = MEASUREMENTS[name]
            results[name] = run_one(m, dict(common, **m.inputs), python)

    print("CPU: %s, %d cores; shape %s; kime %s (%s, threads=%s, answer cache off); Laya: %s"
          % (info["cpu"], info["cores"], args.shape, kime.__version__, args.precision,
             args.threads or "all", peer_note))
    for name, out in results.items():
        report(name, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": info, "shape": args.shape, "measurements": results}, f,
                      indent=1)
    return 0


if __name__ == "__main__":
    if any(v in os.environ for v in UNSET_ENV) and not os.environ.get("KIME_BENCH_REEXEC"):
        # These slow a current OpenBLAS and are read when NumPy loads it: start again without.
        env = clean_env({"KIME_BENCH_REEXEC": "1"})
        os.execve(sys.executable, [sys.executable, "-m", "bench.integrations"] + sys.argv[1:], env)
    sys.exit(main())
