"""W1 on kime and on ONNX Runtime when the machine is quiet, when the engines run back to back,
and beside a process that spins: how much each engine loses to the other's spinning threads.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.busy --shape base
    python -m bench.busy --shape base --precision f32 --repeat 41 --gap 1 --out busy.json
    python -m bench.busy --shape base --repeat 11 --rounds 3    # how far a round's ratio moves
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
(above 1 when kime is faster).

A second table says where a slower call's time went: the CPU each call ran (p50), its own
engine's process and the other engine's (ORT's process, from the scheduler's per-thread counts
in /proc, during a kime call; kime's threads other than the caller, its idle pool, during an ORT
call), and their sum over the usable cores, the least wall time the call could take on cores it
shares. Back to back, ORT's idle pool runs a fixed amount of CPU after each of its calls however
busy the cores are (its spin is a count of pauses, not a time), so that much comes out of the
next kime call's cores.

With `--rounds N` the three settings run N times in turn (the spinner started afresh each
time). The two tables pool every round's calls, and a third gives ORT / kime in each round and
the rounds' median: on a shared machine one round's ratio can move by a fifth from one minute to
the next, and the spread says how much a single figure can be trusted.

kime's and ORT's FP32 W1 answers must agree as in `python -m bench` (the same choice, every
probability within 1e-3), or the run exits 1. Progress goes to stderr, the tables to stdout,
`--out FILE` writes every sample as JSON.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # they pin OpenBLAS to slower kernels
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import gc  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple  # noqa: E402

from . import peers as peerlib  # noqa: E402
from .machine import machine_info  # noqa: E402
from .report import emit  # noqa: E402
from .run import (W1_TOLERANCE, CpuMonitor, Engine, prepare_onnx,  # noqa: E402
                  prepare_onnx_int8)
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
    ap.add_argument("--rounds", type=int, default=1,
                    help="run the three settings this many times in turn; the tables pool every "
                         "round's calls, and a third table gives each round's ratios")
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
    if args.repeat < 1 or args.rounds < 1 or args.gap < 0:
        ap.error("--repeat and --rounds must be at least 1 and --gap not negative")
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


def process_cpu_s(pid: int) -> Optional[float]:
    """The CPU time process `pid`'s live threads have run, in seconds, from the scheduler's
    nanosecond count (/proc/PID/task/*/schedstat); None where the kernel does not keep it."""
    total = 0
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return None
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # the thread ended between the listing and the read
    return total / 1e9


# The CPU a timed call ran: (its engine's process, the other engine's), None where unknown.
CallCpu = Tuple[Optional[float], Optional[float]]


def kime_cpu_runner(agent: Any, peer_pid: Optional[int], cpu: Dict[str, CallCpu], key: str
                    ) -> Callable[[Workload, bool], Tuple[float, Any]]:
    """`bench.run.kime_runner`'s call for W1 (one `predict`), with the CPU this process and the
    peer ran between its two clock reads put in cpu[key]."""
    def run(w: Workload, want: bool) -> Tuple[float, Any]:
        gc.collect()
        p0 = process_cpu_s(peer_pid) if peer_pid else None
        c0, t0 = time.process_time(), time.perf_counter()
        res = agent.predict(w.states[0], w.questions)
        t1, c1 = time.perf_counter(), time.process_time()
        p1 = process_cpu_s(peer_pid) if peer_pid else None
        cpu[key] = (c1 - c0, p1 - p0 if p0 is not None and p1 is not None else None)
        return t1 - t0, (res if want else None)
    return run


def peer_cpu_runner(peer: peerlib.PeerProcess, family: str, threads: int,
                    cpu: Dict[str, CallCpu], key: str
                    ) -> Callable[[Workload, bool], Tuple[float, Any]]:
    """`bench.run.peer_runner`'s call, with the CPU the peer ran in its timed section and this
    process's threads other than the caller (kime's idle pool) ran around it in cpu[key]."""
    def run(w: Workload, want: bool) -> Tuple[float, Any]:
        o0 = time.process_time() - time.thread_time()
        r = peer.call("run", engine=family, threads=threads, workload=w.name, result=want)
        o1 = time.process_time() - time.thread_time()
        own = r.get("cpu_s")
        # two clocks read apart: a pool that ran nothing can come out a hair below 0
        cpu[key] = (float(own) if own is not None else None, max(0.0, o1 - o0))
        return float(r["seconds"]), r.get("result")
    return run


def time_setting(setting: str, w1: Workload, engines: List[Engine], repeat: int, gap: float,
                 pids: List[int], results: Dict[str, Any], cpu: Dict[str, CallCpu]
                 ) -> Dict[str, Any]:
    """A warm-up call per engine, then `repeat` passes of one timed call each, the order rotated
    every pass; kept answers (the first of each engine) go into `results`. Each call's CPU, as
    its runner put it in `cpu`, is kept beside its wall time."""
    monitor = CpuMonitor(pids)
    # back to back, a kime/ORT pair at a time, so every call follows the other engine's
    step = 2 if setting == "back-to-back" and len({e.family for e in engines}) > 1 else 1
    samples: Dict[str, List[float]] = {e.key: [] for e in engines}
    used: Dict[str, List[List[float]]] = {e.key: [[], []] for e in engines}
    warmup: Dict[str, float] = {}
    for i in range(repeat + 1):
        k = (i * step) % len(engines)
        for e in engines[k:] + engines[:k]:
            if setting != "back-to-back":
                time.sleep(gap)
            cpu.pop(e.key, None)
            seconds, res = e.run(w1, e.key not in results)
            if res is not None:
                results[e.key] = res
            if i == 0:
                warmup[e.key] = seconds
                continue
            samples[e.key].append(seconds)
            for part, x in zip(used[e.key], cpu.get(e.key, (None, None))):
                if x is not None:
                    part.append(x)
    stats = {key: call_stats(xs, warmup[key], *used[key]) for key, xs in samples.items()}
    return {"stats": stats, "other_cores": monitor.others_cores()}


def call_stats(samples: List[float], warmup_s: float, own: List[float], other: List[float]
               ) -> Dict[str, Any]:
    """One engine's calls in one setting: their wall times' summary and p90, the warm-up call,
    and the CPU each call ran in its own process and in the other engine's (every sample, and
    the p50; None where not read)."""
    return dict(summarize(samples), p90=percentile(samples, 90), warmup_s=warmup_s,
                cpu_own_p50=percentile(own, 50) if own else None,
                cpu_other_p50=percentile(other, 50) if other else None,
                cpu_own_s=list(own), cpu_other_s=list(other))


def pooled(rounds: List[Dict[str, Any]]) -> Dict[str, Any]:
    """One setting's results over every round: each engine's calls pooled (the first round's
    warm-up), the other processes' load averaged over the rounds that read it."""
    keys = [k for r in rounds for k in r["stats"]]
    stats = {}
    for key in dict.fromkeys(keys):
        got = [r["stats"][key] for r in rounds if key in r["stats"]]
        stats[key] = call_stats([x for g in got for x in g["samples"]], got[0]["warmup_s"],
                                [x for g in got for x in g["cpu_own_s"]],
                                [x for g in got for x in g["cpu_other_s"]])
    loads = [r["other_cores"] for r in rounds if r.get("other_cores") is not None]
    out = {"stats": stats, "other_cores": sum(loads) / len(loads) if loads else None}
    if rounds and "spinner_pid" in rounds[-1]:
        out["spinner_pid"] = rounds[-1]["spinner_pid"]
    return out


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


def ratio_of(stats: Dict[str, Any], suffix: str) -> Optional[float]:
    """ORT's p50 over kime's at one precision (its key suffix), None without both."""
    peer, ours = stats.get("onnx" + suffix), stats.get("kime" + suffix)
    return peer["p50"] / ours["p50"] if peer and ours else None


def ratio(stats: Dict[str, Any], suffix: str) -> str:
    r = ratio_of(stats, suffix)
    return "—" if r is None else "%.2fx" % r


def cpu_cell(stats: Dict[str, Any], key: str, cores: int) -> str:
    s = stats.get(key)
    if not s or s.get("cpu_own_p50") is None:
        return "—"
    own, other = s["cpu_own_p50"], s.get("cpu_other_p50")
    if other is None:
        return "%.1f ms" % (own * 1e3)
    return "%.1f / %.1f ms (%.1f ms)" % (own * 1e3, other * 1e3, (own + other) / cores * 1e3)


def table(report: Dict[str, Any], names: Dict[str, str],
          heads: Callable[[str], List[str]],
          cells: Callable[[str, str], List[str]]) -> List[str]:
    """A markdown table, a row per setting: per precision (its key suffix), the columns `heads`
    names and `cells(setting, suffix)` fills."""
    sfxs = ["" if p == "f32" else "-" + p for p in report["settings"]["precisions"]]
    head = ["setting"] + [h for sfx in sfxs for h in heads(sfx)]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] + ["---:"] * (len(head) - 1))
             + "|"]
    for setting in SETTINGS:
        row = [names[setting]] + [c for sfx in sfxs for c in cells(setting, sfx)]
        lines.append("| " + " | ".join(row) + " |")
    return lines


def round_cells(report: Dict[str, Any], setting: str, sfx: str) -> List[str]:
    """Each round's ORT / kime ratio in one setting at one precision, then their median."""
    prec = sfx[1:] if sfx else "f32"
    each = [rd.get(setting, {}).get(prec) for rd in report["rounds"]]
    got = [x for x in each if x is not None]
    return (["—" if x is None else "%.2fx" % x for x in each]
            + ["%.2fx" % percentile(got, 50) if got else "—"])


def render(report: Dict[str, Any]) -> str:
    s = report["settings"]
    lines = ["cpu: %s; shape %s (W1: %s); %d threads; %d timed calls per engine and setting%s"
             % (report["machine"]["cpu"], s["shape"], report["w1"]["rows_text"], s["threads"],
                s["repeat"] * s["rounds"],
                " (%d rounds of %d)" % (s["rounds"], s["repeat"]) if s["rounds"] > 1 else ""),
             ""]
    names = {"quiet": "quiet (%.2g s gap)" % s["gap_s"], "back-to-back": "back to back",
             "spinner": "beside a spinner (%.2g s gap)" % s["gap_s"]}

    def st(setting: str) -> Dict[str, Any]:
        return report["results"][setting]["stats"]

    lines += table(report, names, lambda sfx: [LABELS["kime" + sfx] + " p50 / p90",
                                               LABELS["onnx" + sfx] + " p50 / p90", "ORT / kime"],
                   lambda setting, sfx: [cell(st(setting), "kime" + sfx),
                                         cell(st(setting), "onnx" + sfx),
                                         ratio(st(setting), sfx)])
    cores = s["cores"]
    lines += ["", "CPU each call ran, p50: the engine's process / the other engine's process "
              "(in brackets their sum over the %d cores: the least wall time the call could "
              "take with the cores shared; a call near it lost nothing but the other's CPU)"
              % cores, ""]
    lines += table(report, names, lambda sfx: [LABELS["kime" + sfx], LABELS["onnx" + sfx]],
                   lambda setting, sfx: [cpu_cell(st(setting), "kime" + sfx, cores),
                                         cpu_cell(st(setting), "onnx" + sfx, cores)])
    rounds = len(report["rounds"])
    if rounds > 1:
        lines += ["", "ORT / kime in each round (that round's p50s), then the rounds' median: "
                  "how far one round's ratio moves on this machine", ""]
        lines += table(report, names,
                       lambda sfx: ["%s r%d" % (LABELS["kime" + sfx][5:], i + 1)
                                    for i in range(rounds)] + [LABELS["kime" + sfx][5:]
                                                               + " median"],
                       lambda setting, sfx: round_cells(report, setting, sfx))
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
                     "cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                     else (os.cpu_count() or 1),
                     "repeat": args.repeat, "rounds": args.rounds, "gap_s": args.gap,
                     "peers": args.peers},
        "peers": {"mode": args.peers}, "results": {}, "agreement": {}}
    problems: List[str] = []
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    agents: Dict[str, Any] = {}
    for prec in args.precisions:
        key = "kime" if prec == "f32" else "kime-" + prec
        agents[prec] = agent = kime.load(path, device="cpu", precision=prec, threads=threads,
                                         answer_cache=0)
        log("%s: %s" % (key, agent.engine.device))
        report["kime"][key] = str(agent.engine.device)
    w1 = build_workloads(path, agent.engine, ["W1"])[0]
    report["w1"] = dict(w1.describe(), rows_text=w1.rows_text())
    peer = start_peer(args, path, threads, w1, report, problems) if args.peers != "none" else None
    cpu: Dict[str, CallCpu] = {}
    engines: List[Engine] = []
    for prec in args.precisions:  # kime f32, ORT f32, kime int8, ORT int8
        sfx = "" if prec == "f32" else "-" + prec
        engines.append(Engine("kime" + sfx, "kime", threads, kime_cpu_runner(
            agents[prec], peer.proc.pid if peer is not None else None, cpu, "kime" + sfx)))
        if peer is not None:
            engines.append(Engine("onnx" + sfx, "onnx", threads,
                                  peer_cpu_runner(peer, "onnx" + sfx, threads, cpu, "onnx" + sfx)))
    log("W1: %s; %s; %d timed calls each per setting"
        % (w1.rows_text(), ", ".join(e.key for e in engines), args.repeat))
    answers: Dict[str, Any] = {}
    rounds: List[Dict[str, Any]] = []  # per round, each setting's results
    try:
        pids = [os.getpid()] + ([peer.proc.pid] if peer is not None else [])
        for r in range(args.rounds):
            rounds.append({})
            for setting in SETTINGS:
                log("%s%s ..." % (setting, " (round %d of %d)" % (r + 1, args.rounds)
                                  if args.rounds > 1 else ""))

                def timed() -> Dict[str, Any]:
                    return time_setting(setting, w1, engines, args.repeat, args.gap, pids,
                                        answers, cpu)
                res = run_spinner(timed) if setting == "spinner" else timed()
                rounds[-1][setting] = res
                log("%s: %s" % (setting, ", ".join("%s p50 %.2f ms" % (k, s["p50"] * 1e3)
                                                    for k, s in res["stats"].items())))
    except peerlib.PeerError as e:
        problems.append(("the peer failed: %s" % e).splitlines()[0])
        log(problems[-1])
    finally:
        if peer is not None:
            peer.close()
    for setting in SETTINGS:
        got = [rd[setting] for rd in rounds if setting in rd]
        report["results"][setting] = pooled(got) if got else {"stats": {}, "other_cores": None}
    report["rounds"] = [{setting: {p: ratio_of(res["stats"], "" if p == "f32" else "-" + p)
                                   for p in args.precisions}
                         for setting, res in rd.items()} for rd in rounds]
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
