"""W1 on kime and on ONNX Runtime when the machine is quiet, when the engines run back to back,
and beside a process that spins: how much each engine loses to the other's spinning threads.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.busy --shape base
    python -m bench.busy --shape base --precision f32 --repeat 41 --gap 1 --out busy.json
    python -m bench.busy --shape tiny --peers none --repeat 2   # kime only: a smoke run

Times W1 (`predict` on one ~180-token row, a choice of 4: the bench's workload, see
`bench/workloads.py`) on kime in this process and on Laya's `ONNXAgent` under ONNX Runtime in
the bench's side process (`bench/peer_worker.py`, found and started as `python -m bench` does),
at FP32 and at INT8 (kime's `precision="int8"` against ONNX Runtime on the export quantized with
`quantize_dynamic`), in three settings:

1. quiet: `--gap` seconds of idle (0.5 by default) before every call, so the other engine's
   thread pool has stopped spinning;
2. back to back: no gap, kime and ONNX Runtime in turn, so every call starts while the other
   engine's idle pool still spins (the order rotates a kime/ORT pair at a time, so the two keep
   alternating across rounds);
3. beside a spinner: the bench starts a process that keeps one core busy (it also ends itself
   when the bench dies), then times the calls with the quiet gap, and stops it in a `finally`.

In each setting every engine gets a warm-up call, then `--repeat` timed calls, interleaved
round-robin with the order rotated each round. Both engines run at `--threads` (default: every
usable core, `kime.backend.cpu_count`). The report names the CPU, the shape and the threads and
prints a markdown table, one row per setting: each engine's p50 / p90 and ORT p50 / kime p50
(above 1 when kime is faster). kime's and ORT's FP32 W1 answers must agree as in `python -m
bench` (the same choice, every probability within 1e-3), or the run exits 1. Progress goes to
stderr, the table to stdout, `--out FILE` writes every sample as JSON.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # they pin OpenBLAS to slower kernels
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Sequence  # noqa: E402

from . import peers as peerlib  # noqa: E402
from .machine import machine_info  # noqa: E402
from .report import emit  # noqa: E402
from .run import (W1_TOLERANCE, CpuMonitor, Engine, kime_runner, peer_runner,  # noqa: E402
                  prepare_onnx, prepare_onnx_int8)
from .stats import compare_results, percentile, summarize, w1_agrees  # noqa: E402
from .workloads import Workload, build_workloads, cached_checkpoint  # noqa: E402

SETTINGS = ("quiet", "back-to-back", "spinner")
# The spinner: a pure-Python busy loop that also stops once its parent is gone (reparented).
SPIN = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(10 ** 6): pass\n"
SPIN_SETTLE_S = 0.3  # how long the spinner runs before the first call beside it
LABELS = {"kime": "kime FP32", "onnx": "ORT FP32", "kime-int8": "kime INT8",
          "onnx-int8": "ORT INT8"}


def log(msg: str) -> None:
    sys.stderr.write("[busy] %s\n" % msg)
    sys.stderr.flush()


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.busy",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--shape", default="base", help="checkpoint shape (default base)")
    ap.add_argument("--precision", default="f32,int8", help="f32, int8 or both (default)")
    ap.add_argument("--threads", type=int, default=0,
                    help="kime's and ORT's threads; 0 = every usable core (default)")
    ap.add_argument("--repeat", type=int, default=21, help="timed calls per engine and setting")
    ap.add_argument("--gap", type=float, default=0.5,
                    help="idle seconds before each call when quiet and beside the spinner")
    ap.add_argument("--peers", choices=["auto", "none"], default="auto",
                    help="auto: ONNX Runtime when a peer interpreter is found; none: kime only")
    ap.add_argument("--peer-python", help="interpreter with laya, torch and onnxruntime")
    ap.add_argument("--cache-dir", default=None, help="default ~/.cache/kime/bench")
    ap.add_argument("--out", help="write the report as JSON to this file")
    args = ap.parse_args(argv)
    aliases = {"fp32": "f32", "float32": "f32", "i8": "int8"}
    args.precisions = []
    for p in args.precision.split(","):
        p = aliases.get(p.strip().lower(), p.strip().lower())
        if p not in ("f32", "int8"):
            ap.error("unknown precision %r; use f32, int8 or f32,int8" % p)
        if p not in args.precisions:
            args.precisions.append(p)
    if args.repeat < 1 or args.gap < 0:
        ap.error("--repeat must be at least 1 and --gap not negative")
    return args


def start_peer(args: argparse.Namespace, path: str, threads: int, w1: Workload,
               report: Dict[str, Any], problems: List[str]) -> Optional[peerlib.PeerProcess]:
    """The side process with ONNXAgent on the FP32 export and/or its INT8 quantization, or None
    (the reason in the report, and in `problems` when the peer was asked for and failed)."""
    python, why = peerlib.find_peer_python(args.peer_python)
    report["peers"].update(python=python, found=why)
    if python is None:
        log("peers: none (%s)" % why)
        if args.peer_python:
            problems.append("peers: none (%s)" % why)
        return None
    log("peers: %s (%s), %d threads" % (python, why, threads))
    peer = peerlib.PeerProcess(python)
    try:
        vers = peer.call("hello")["versions"]
        report["peers"]["versions"] = vers
        missing = vers.get("onnxruntime_import") or vers.get("onnx_agent")
        if missing:
            raise peerlib.PeerError("ONNX Runtime or ONNXAgent does not import: %s" % missing)
        onnx_path = prepare_onnx(peer, path, args.cache_dir, [threads], report, problems)
        if "int8" in args.precisions:
            prepare_onnx_int8(peer, path, onnx_path, [threads], report)
        peer.call("workloads", items={w1.name: w1.payload()})
    except peerlib.PeerError as e:
        problems.append(("peers disabled: %s" % e).splitlines()[0])
        log(problems[-1])
        peer.close()
        return None
    return peer


def time_setting(setting: str, w1: Workload, engines: List[Engine], repeat: int, gap: float,
                 pids: List[int], results: Dict[str, Any]) -> Dict[str, Any]:
    """A warm-up call per engine, then `repeat` rounds of one timed call each, the order rotated
    every round; kept answers (the first of each engine) go into `results`."""
    monitor = CpuMonitor(pids)
    # back to back, a kime/ORT pair at a time, so every call follows the other engine's
    step = 2 if setting == "back-to-back" and len({e.family for e in engines}) > 1 else 1
    samples: Dict[str, List[float]] = {e.key: [] for e in engines}
    warmup: Dict[str, float] = {}
    for i in range(repeat + 1):
        k = (i * step) % len(engines)
        for e in engines[k:] + engines[:k]:
            if setting != "back-to-back":
                time.sleep(gap)
            seconds, res = e.run(w1, e.key not in results)
            if res is not None:
                results[e.key] = res
            if i == 0:
                warmup[e.key] = seconds
            else:
                samples[e.key].append(seconds)
    stats = {key: dict(summarize(xs), p90=percentile(xs, 90), warmup_s=warmup[key])
             for key, xs in samples.items()}
    return {"stats": stats, "other_cores": monitor.others_cores()}


def run_spinner(fn: Callable[[], Dict[str, Any]]) -> Dict[str, Any]:
    """`fn()` beside a process that keeps one core busy, stopped (and reaped) whatever happens;
    its pid goes into the result."""
    spinner = subprocess.Popen([sys.executable, "-c", SPIN], env=peerlib.clean_env(),
                               stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        time.sleep(SPIN_SETTLE_S)
        if spinner.poll() is not None:
            raise RuntimeError("the spinner exited at once (status %s)" % spinner.returncode)
        out = fn()
    finally:
        spinner.kill()
        spinner.wait()
    out["spinner_pid"] = spinner.pid
    return out


def cell(stats: Dict[str, Any], key: str) -> str:
    s = stats.get(key)
    return "%.2f / %.2f ms" % (s["p50"] * 1e3, s["p90"] * 1e3) if s else "—"


def ratio(stats: Dict[str, Any], suffix: str) -> str:
    peer, ours = stats.get("onnx" + suffix), stats.get("kime" + suffix)
    return "%.2fx" % (peer["p50"] / ours["p50"]) if peer and ours else "—"


def render(report: Dict[str, Any]) -> str:
    s = report["settings"]
    lines = ["cpu: %s; shape %s (W1: %s); %d threads; %d timed calls per engine and setting"
             % (report["machine"]["cpu"], s["shape"], report["w1"]["rows_text"], s["threads"],
                s["repeat"]), ""]
    names = {"quiet": "quiet (%.2g s gap)" % s["gap_s"], "back-to-back": "back to back",
             "spinner": "beside a spinner (%.2g s gap)" % s["gap_s"]}
    head, rule = ["setting"], ["---"]
    for p in s["precisions"]:
        sfx = "" if p == "f32" else "-" + p
        head += [LABELS["kime" + sfx] + " p50 / p90", LABELS["onnx" + sfx] + " p50 / p90",
                 "ORT / kime"]
        rule += ["---:"] * 3
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join(rule) + "|"]
    for setting in SETTINGS:
        st = report["results"][setting]["stats"]
        row = [names[setting]]
        for p in s["precisions"]:
            sfx = "" if p == "f32" else "-" + p
            row += [cell(st, "kime" + sfx), cell(st, "onnx" + sfx), ratio(st, sfx)]
        lines.append("| " + " | ".join(row) + " |")
    loads = ["%s %s" % (k, "?" if r["other_cores"] is None else "%.2f" % r["other_cores"])
             for k, r in report["results"].items()]
    lines += ["", "cores other processes kept busy: " + ", ".join(loads)]
    agree = report["agreement"].get("onnx")
    if agree is not None:
        lines.append("W1 answers, kime vs ORT at FP32: " + (
            "agree (max |diff| %.2g)" % agree["max_abs"] if not agree["w1_check"]
            else "DISAGREE: " + "; ".join(agree["w1_check"])))
    lines += ["PROBLEM: " + p for p in report["problems"]]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # random checkpoints clamp a temperature
        return _main(args, argv)


def _main(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> int:
    import kime
    from kime.backend import cpu_count

    threads = args.threads or cpu_count()
    report: Dict[str, Any] = {
        "command": " ".join(["python", "-m", "bench.busy"]
                            + list(sys.argv[1:] if argv is None else argv)),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine_info(),
        "kime": {"version": kime.__version__},
        "settings": {"shape": args.shape, "precisions": args.precisions, "threads": threads,
                     "repeat": args.repeat, "gap_s": args.gap, "peers": args.peers},
        "peers": {"mode": args.peers}, "results": {}, "agreement": {}}
    problems: List[str] = []
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    kimes: Dict[str, Engine] = {}
    for prec in args.precisions:
        key = "kime" if prec == "f32" else "kime-" + prec
        agent = kime.load(path, device="cpu", precision=prec, threads=threads, answer_cache=0)
        log("%s: %s" % (key, agent.engine.device))
        report["kime"][key] = str(agent.engine.device)
        kimes[prec] = Engine(key, "kime", threads, kime_runner(agent))
    w1 = build_workloads(path, agent.engine, ["W1"])[0]
    report["w1"] = dict(w1.describe(), rows_text=w1.rows_text())
    peer = start_peer(args, path, threads, w1, report, problems) if args.peers != "none" else None
    engines: List[Engine] = []
    for prec in args.precisions:  # kime f32, ORT f32, kime int8, ORT int8
        engines.append(kimes[prec])
        if peer is not None:
            key = "onnx" if prec == "f32" else "onnx-" + prec
            engines.append(Engine(key, "onnx", threads, peer_runner(peer, key, threads)))
    log("W1: %s; %s; %d timed calls each per setting"
        % (w1.rows_text(), ", ".join(e.key for e in engines), args.repeat))
    answers: Dict[str, Any] = {}
    try:
        pids = [os.getpid()] + ([peer.proc.pid] if peer is not None else [])
        for setting in SETTINGS:
            log("%s ..." % setting)

            def timed() -> Dict[str, Any]:
                return time_setting(setting, w1, engines, args.repeat, args.gap, pids, answers)
            res = run_spinner(timed) if setting == "spinner" else timed()
            report["results"][setting] = res
            log("%s: %s" % (setting, ", ".join("%s p50 %.2f ms" % (k, s["p50"] * 1e3)
                                                for k, s in res["stats"].items())))
    except peerlib.PeerError as e:
        problems.append(("the peer failed: %s" % e).splitlines()[0])
        log(problems[-1])
        for setting in SETTINGS:
            report["results"].setdefault(setting, {"stats": {}, "other_cores": None})
    finally:
        if peer is not None:
            peer.close()
    report["spinner_pid"] = report["results"]["spinner"].get("spinner_pid")

    # The answers, each against kime's at its precision; only FP32 is held to W1's 1e-3.
    for prec in args.precisions:
        sfx = "" if prec == "f32" else "-" + prec
        if "kime" + sfx in answers and "onnx" + sfx in answers:
            cmp = compare_results(answers["kime" + sfx], answers["onnx" + sfx])
            if prec == "f32":
                cmp["w1_check"] = w1_agrees(answers["kime"], answers["onnx"], W1_TOLERANCE)
                if cmp["w1_check"]:
                    problems.append("W1: ORT does not give kime's FP32 answer (%s)"
                                    % "; ".join(cmp["w1_check"]))
            if cmp["layout"]:
                problems.append("W1: ORT lays the question out differently: %s"
                                % "; ".join(cmp["layout"][:3]))
            report["agreement"]["onnx" + sfx] = cmp
    report["problems"] = problems
    emit(render(report), report, args.out, log)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
