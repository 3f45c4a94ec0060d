"""`python -m bench`: kime against Laya's torch `Agent` and `ONNXAgent`, side by side.

See `bench/__init__.py` for how to run it and what it measures. Progress goes to stderr; the
report goes to stdout (and, with `--out`, as JSON to a file).
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import peers as peerlib
from .machine import blas_info, machine_info
from .stats import compare_results, summarize, w1_agrees
from .workloads import WORKLOAD_NAMES, Workload, build_workloads, cached_checkpoint

W1_TOLERANCE = 1e-3
REDUCED = ("int8", "bf16", "mixed")  # kime's reduced CPU precisions, each timed beside FP32
# OpenVINO's engine at each precision kime runs: FP32 and BF16 by its precision hint on the
# export, INT8 by NNCF's quantization of it (bench/peer_openvino.py).
OPENVINO = {"f32": "openvino", "bf16": "openvino-bf16", "int8": "openvino-int8"}
# OpenVINO INT8's calibration: every row of these workloads, one row at a time, whichever
# workloads a run times (so `bench` and `bench.table` quantize the same graph).
CALIBRATION = ("W1", "W2", "W3")
GAP_S = 0.05  # idle time before each timed call, so one engine's spinning threads settle
BUSY_CORES = 0.25  # other processes' load above which a workload's numbers are marked noisy


def log(msg: str) -> None:
    sys.stderr.write("[bench] %s\n" % msg)
    sys.stderr.flush()


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench",
        description="Time kime against Laya's torch Agent and ONNXAgent on a random checkpoint.",
        epilog="Run it as: env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench "
               "--shape base")
    ap.add_argument("--shape", default="base",
                    help="checkpoint shape for kime.testing.write_checkpoint (tiny, "
                         "multilingual-tiny, base, large); default base")
    ap.add_argument("--precision", default="f32",
                    help="kime precision, or several comma-separated to time side by side in one "
                         "run (f32, int8, bf16, mixed: the checkpoint's `kime gate --mixed` "
                         "choice; e.g. f32,bf16); the first is the one peers are compared with; "
                         "default f32")
    ap.add_argument("--onnx-int8", choices=["auto", "on", "off"], default="auto",
                    help="also time ONNX Runtime on the export quantized with onnxruntime's "
                         "quantize_dynamic: auto (when kime runs int8), on, off")
    ap.add_argument("--openvino", choices=["auto", "on", "off"], default="auto",
                    help="also time OpenVINO on the export at each precision timed (f32 and bf16 "
                         "by its precision hint, int8 from NNCF), when the peer interpreter has "
                         "openvino and nncf: auto (default), on (a problem when it has not), off")
    ap.add_argument("--threads", type=int, default=0, help="kime threads; 0 = every core (default)")
    ap.add_argument("--peers", choices=["auto", "onnx", "none"], default="auto",
                    help="auto: run Laya's Agent and ONNXAgent when laya is importable here or "
                         "with --peer-python; onnx: ONNXAgent only (torch still checks the "
                         "export); none: kime only")
    ap.add_argument("--peer-python", help="interpreter of an environment with laya, torch and "
                                          "onnxruntime (default: see bench/peers.py)")
    ap.add_argument("--peer-threads", default=None,
                    help="comma-separated thread counts to run each peer at; the best is "
                         "reported (default: 1 and every core; --quick: every core)")
    ap.add_argument("--repeat", type=int, default=None,
                    help="timed runs per workload (default: as many as fit --budget per engine, "
                         "3 to 30; --quick: 1)")
    ap.add_argument("--budget", type=float, default=60.0,
                    help="seconds per engine and workload that set the default repeat count "
                         "(default 60)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: W1-W3 only, one timed run each, warm-up on the first only, "
                         "peers at every core only, one startup run; not numbers to quote")
    ap.add_argument("--workloads", default=None,
                    help="comma-separated subset of %s (default: all; --quick: W1,W2,W3)"
                         % ",".join(WORKLOAD_NAMES))
    ap.add_argument("--no-startup", action="store_true",
                    help="skip the new-process load-time and peak-RSS probes")
    ap.add_argument("--cache-dir", default=None,
                    help="where checkpoints and ONNX exports are cached "
                         "(default ~/.cache/kime/bench)")
    ap.add_argument("--out", help="write the report as JSON to this file")
    args = ap.parse_args(argv)
    if args.workloads is None:
        args.workloads = "W1,W2,W3" if args.quick else ",".join(WORKLOAD_NAMES)
    args.workloads = [w.strip().upper() for w in args.workloads.split(",") if w.strip()]
    bad = [w for w in args.workloads if w not in WORKLOAD_NAMES]
    if bad:
        ap.error("unknown workload(s) %s; choose from %s"
                 % (", ".join(bad), ", ".join(WORKLOAD_NAMES)))
    if args.repeat is not None and args.repeat < 1:
        ap.error("--repeat must be at least 1")
    aliases = {"fp32": "f32", "float32": "f32", "i8": "int8", "bfloat16": "bf16"}
    precisions: List[str] = []
    for p in args.precision.split(","):
        p = aliases.get(p.strip().lower(), p.strip().lower())
        if p not in ("f32",) + REDUCED:  # the CPU's precisions; f16 runs on a GPU only
            ap.error("unknown precision %r; use f32, int8, bf16 or mixed" % p)
        if p not in precisions:
            precisions.append(p)
    args.precisions = precisions
    args.precision = precisions[0]
    return args


def kime_key(precision: str, first: str) -> str:
    """The engine key of kime at a precision: `kime` for the first, `kime-int8` (`kime-bf16`)
    for others."""
    return "kime" if precision == first else "kime-" + precision


def is_reduced(key: str) -> bool:
    """Whether an engine runs a reduced precision (INT8 or BF16), whose answers are reported
    against FP32's but not held to the W1 1e-3 check."""
    return key.split("@")[0].endswith(REDUCED)


# --- engines -----------------------------------------------------------------------------------

@dataclass
class Engine:
    """One thing being timed: kime in this process, or a peer at a thread count."""

    key: str  # "kime", "torch@2", "onnx@1"
    family: str  # "kime", "torch", "onnx"
    threads: Optional[int]
    run: Callable[[Workload, bool], Tuple[float, Any]]
    failed: Optional[str] = None


def kime_runner(agent: Any) -> Callable[[Workload, bool], Tuple[float, Any]]:
    def run(w: Workload, want: bool) -> Tuple[float, Any]:
        gc.collect()
        t0 = time.perf_counter()
        if w.kind == "predict_batch":
            res: Any = agent.predict_batch(w.states, w.questions)
        else:
            res = agent.predict(w.states[0], w.questions)
        return time.perf_counter() - t0, (res if want else None)
    return run


def peer_runner(peer: peerlib.PeerProcess, family: str, threads: int
                ) -> Callable[[Workload, bool], Tuple[float, Any]]:
    def run(w: Workload, want: bool) -> Tuple[float, Any]:
        r = peer.call("run", engine=family, threads=threads, workload=w.name, result=want)
        return float(r["seconds"]), r.get("result")
    return run


# --- startup and memory probes -----------------------------------------------------------------

_KIME_PROBE = r"""
import json, resource, sys, time, warnings
warnings.simplefilter("ignore")
path, precision, threads, first, then = sys.argv[1:6]
t0 = time.perf_counter()
import kime
t1 = time.perf_counter()
agent = kime.load(path, device="cpu", precision=precision, threads=int(threads), answer_cache=0)
t2 = time.perf_counter()
def rss():
    # VmHWM: getrusage's ru_maxrss is inherited from the (big) bench process across fork and exec.
    try:
        with open("/proc/self/status") as f:
            return int([l for l in f if l.startswith("VmHWM:")][0].split()[1])
    except (OSError, IndexError):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {"import_s": t1 - t0, "load_s": t2 - t1, "rss_load_kb": rss()}
for key, file in (("first", first), ("then", then)):
    if file:
        with open(file) as f:
            w = json.load(f)
        t3 = time.perf_counter()
        if w["kind"] == "predict_batch":
            agent.predict_batch(w["states"], w["questions"])
        else:
            agent.predict(w["states"][0], w["questions"])
        out[key + "_s"] = time.perf_counter() - t3
out["rss_peak_kb"] = rss()
print(json.dumps(out))
"""


def kime_probe(path: str, precision: str, threads: int, first: str, then: str) -> Dict[str, Any]:
    """`_KIME_PROBE` in a new interpreter that imports this checkout's kime."""
    import kime

    root = os.path.dirname(os.path.dirname(os.path.abspath(kime.__file__)))
    pp = os.environ.get("PYTHONPATH")
    env = peerlib.clean_env({"PYTHONPATH": root + (os.pathsep + pp if pp else "")})
    r = subprocess.run([sys.executable, "-c", _KIME_PROBE, path, precision, str(threads), first,
                        then], env=env, capture_output=True, text=True, cwd=root, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError("kime probe failed (exit %d):\n%s" % (r.returncode, r.stderr[-3000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def median(xs: List[float]) -> float:
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def startup_and_memory(args: argparse.Namespace, path: str, onnx_paths: Dict[str, str],
                       families: List[str], peer_python: Optional[str],
                       by_name: Dict[str, Workload], problems: List[str]) -> Dict[str, Any]:
    """New processes per engine: import time, load time and the first W1 answer (medians over
    the runs); the last run then also runs W3, and its peak RSS is the memory figure."""
    runs = 1 if args.quick else 3
    out: Dict[str, Any] = {"runs": runs}
    monitor = CpuMonitor([os.getpid()])
    with tempfile.TemporaryDirectory(prefix="kime-bench-") as tmp:
        files = {}
        for name in ("W1", "W3"):
            w = by_name.get(name)
            if w is not None:
                files[name] = os.path.join(tmp, name + ".json")
                with open(files[name], "w") as f:
                    json.dump(w.payload(), f)
        first, then = files.get("W1", ""), files.get("W3", "")
        for fam in families:
            def one(then_file: str) -> Dict[str, Any]:
                if fam.startswith("kime"):
                    prec = fam.partition("-")[2] or args.precision
                    return kime_probe(path, prec, args.threads, first, then_file)
                assert peer_python is not None
                graph = onnx_paths.get(fam)
                if fam.startswith("openvino"):
                    argv = ["--probe", "openvino", "--path", path, "--export", onnx_paths["onnx"],
                            "--ov-precision", "bf16" if fam == "openvino-bf16" else "f32"]
                else:
                    argv = ["--probe", "onnx" if graph else fam, "--path", path]
                argv += ["--onnx", graph] if graph else []
                argv += ["--first", first] if first else []
                argv += ["--then", then_file] if then_file else []
                return peerlib.probe(peer_python, argv)
            try:
                log("startup and memory: %s (%d new process%s)"
                    % (fam, runs, "" if runs == 1 else "es"))
                starts = [one(then if i == runs - 1 else "") for i in range(runs)]
                out[fam] = {
                    "import_s": median([s["import_s"] for s in starts]),
                    "load_s": median([s["load_s"] for s in starts]),
                    "first_w1_s": median([s["first_s"] for s in starts]) if first else None,
                    "rss_load_kb": median([s["rss_load_kb"] for s in starts]),
                    "rss_w3_kb": starts[-1]["rss_peak_kb"] if then else None,
                    "runs": starts,
                }
            except Exception as e:  # reported, the rest of the report stands
                problems.append("startup/memory probe for %s failed: %s" % (fam, e))
                out[fam] = {"error": str(e)}
    out["other_cores"] = monitor.others_cores()
    return out


# --- the run -----------------------------------------------------------------------------------

class CpuMonitor:
    """How many cores other processes kept busy while a workload ran: the machine's busy time
    from /proc/stat less the bench's own processes' (this one, the peer, the probes it waited
    for), per second of wall time. A shared machine's noise made visible; None without /proc."""

    def __init__(self, pids: List[int]):
        self.pids = pids
        self._start = self._read()

    @staticmethod
    def _proc_ticks(pid: int) -> int:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime

    def _read(self) -> Optional[Tuple[float, int, int]]:
        try:
            with open("/proc/stat") as f:
                cpu = [int(x) for x in f.readline().split()[1:]]
            busy = sum(cpu) - cpu[3] - (cpu[4] if len(cpu) > 4 else 0)
            ours = sum(self._proc_ticks(p) for p in self.pids)
            t = os.times()  # children this process has waited for: the startup probes
            ours += int((t.children_user + t.children_system) * os.sysconf("SC_CLK_TCK"))
        except (OSError, ValueError, IndexError):
            return None
        return time.monotonic(), busy, ours

    def others_cores(self) -> Optional[float]:
        end = self._read()
        if self._start is None or end is None:
            return None
        hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        wall = end[0] - self._start[0]
        if wall <= 0:
            return None
        other = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return max(0.0, other / hz / wall)


def choose_repeats(args: argparse.Namespace, warm: Dict[str, float]) -> int:
    if args.repeat is not None:
        return args.repeat
    if args.quick:
        return 1
    slowest = max(warm.values()) if warm else 1.0
    return int(max(3, min(30, args.budget // max(slowest, 1e-6))))


def time_workload(w: Workload, engines: List[Engine], args: argparse.Namespace, first: bool,
                  problems: List[str], pids: List[int]) -> Dict[str, Any]:
    """Warm up, then timed runs interleaved across engines, the order rotated every round."""
    monitor = CpuMonitor(pids)
    results: Dict[str, Any] = {}
    warm: Dict[str, float] = {}
    samples: Dict[str, List[float]] = {e.key: [] for e in engines}

    def call(e: Engine) -> Optional[float]:
        if e.failed:
            return None
        time.sleep(GAP_S)
        try:
            seconds, res = e.run(w, e.key not in results)
        except Exception as exc:  # a peer that fails loses this workload, the rest goes on
            e.failed = str(exc).splitlines()[0]
            problems.append("%s %s failed: %s" % (w.name, e.key, exc))
            return None
        if res is not None:
            results[e.key] = res
        return seconds

    warmup = not args.quick or first
    if warmup:
        for e in engines:
            s = call(e)
            if s is not None:
                warm[e.key] = s
    n = choose_repeats(args, warm)
    log("%s: %s; %d timed run%s%s" % (w.name, w.rows_text(), n, "" if n == 1 else "s",
                                       " after a warm-up" if warmup else ""))
    for i in range(n):
        k = i % len(engines)
        for e in engines[k:] + engines[:k]:
            s = call(e)
            if s is not None:
                samples[e.key].append(s)
    stats = {key: summarize(xs) for key, xs in samples.items() if xs}
    for key in stats:
        stats[key]["warmup_s"] = warm.get(key)

    # The answers: every peer against kime.
    agreement: Dict[str, Any] = {}
    if "kime" in results:
        for e in engines:
            if e.key == "kime" or e.key not in results:
                continue
            cmp = compare_results(results["kime"], results[e.key])
            # INT8 and BF16 are not meant to be within 1e-3 of FP32: their answers are
            # reported, not judged.
            if w.name == "W1" and not is_reduced(e.key) and args.precision not in REDUCED:
                cmp["w1_check"] = w1_agrees(results["kime"], results[e.key], W1_TOLERANCE)
                if cmp["w1_check"]:
                    problems.append("W1: %s does not give kime's answer (%s)"
                                    % (e.key, "; ".join(cmp["w1_check"])))
            if cmp["layout"]:
                problems.append("%s: %s lays the question out differently: %s"
                                % (w.name, e.key, "; ".join(cmp["layout"][:3])))
            agreement[e.key] = cmp
    return {"stats": stats, "runs": n, "warmup": warmup, "agreement": agreement,
            "other_cores": monitor.others_cores(),
            "kime_answer": results.get("kime") if w.name == "W1" else None}


def prepare_onnx(peer: peerlib.PeerProcess, path: str, cache_dir: Optional[str],
                 threads: List[int], report: Dict[str, Any], problems: List[str]) -> str:
    """Export the checkpoint to ONNX once (cached beside it), check it against torch, and load
    `ONNXAgent` on it in the peer; returns the graph's path."""
    root = os.path.expanduser(cache_dir or os.path.join("~", ".cache", "kime", "bench"))
    onnx_dir = os.path.join(root, os.path.basename(path) + "-onnx")
    os.makedirs(onnx_dir, exist_ok=True)
    onnx_path = os.path.join(onnx_dir, "laya.onnx")
    log("onnx: checking/exporting %s" % onnx_path)
    ex = peer.call("export_onnx", path=path, out=onnx_path)
    log("onnx: %s (ONNX Runtime vs torch max |diff| %.2g)"
        % ("exported in %.1f s" % ex["seconds"] if ex["exported"] else "cached export",
           ex["max_diff"]))
    if ex["max_diff"] > 1e-3:
        problems.append("the ONNX export differs from torch by %.3g" % ex["max_diff"])
    r = peer.call("load_onnx", path=path, onnx=onnx_path, threads=threads)
    log("ONNXAgent loaded in %.2f s" % r["seconds"])
    report["peers"]["onnx"] = dict(ex, load_s=r["seconds"], path=onnx_path)
    return onnx_path


def prepare_onnx_int8(peer: peerlib.PeerProcess, path: str, onnx_path: str, threads: List[int],
                      report: Dict[str, Any]) -> str:
    """Quantize the export with onnxruntime's `quantize_dynamic` (cached beside it) and load it
    as a second set of sessions; returns the quantized graph's path."""
    out = onnx_path[:-len(".onnx")] + ".int8.onnx"
    log("onnx-int8: checking/quantizing %s" % out)
    q = peer.call("quantize_onnx", onnx=onnx_path, out=out)
    log("onnx-int8: %s" % ("quantized in %.1f s" % q["seconds"] if q["quantized"]
                           else "cached quantized graph"))
    r = peer.call("load_onnx", path=path, onnx=out, threads=threads, name="onnx-int8")
    log("ONNXAgent on the INT8 graph loaded in %.2f s" % r["seconds"])
    report["peers"]["onnx-int8"] = dict(q, load_s=r["seconds"], path=out)
    return out


def prepare_openvino(peer: peerlib.PeerProcess, path: str, onnx_path: str, threads: List[int],
                     precisions: Sequence[str], workloads: Sequence[str],
                     report: Dict[str, Any]) -> Dict[str, str]:
    """OpenVINO at each of `precisions` it has (f32, bf16, int8), behind ONNXAgent in the peer:
    the export compiled with its precision hint, and for int8 NNCF's quantization of it
    calibrated on every row of `workloads` one row at a time (cached beside the export).
    Returns {family: the graph it runs}."""
    graphs: Dict[str, str] = {}
    for prec in precisions:
        fam = OPENVINO.get(prec)
        if fam is None:
            continue
        graph = onnx_path
        if prec == "int8":
            graph = onnx_path[:-len(".onnx")] + ".ov-int8.xml"
            log("openvino-int8: checking/quantizing %s (NNCF, rows of %s)"
                % (graph, ",".join(workloads)))
            q = peer.call("quantize_openvino", path=path, onnx=onnx_path, out=graph,
                          workloads=list(workloads))
            log("openvino-int8: %s" % ("quantized in %.1f s on %d rows" % (q["seconds"], q["rows"])
                                       if q["quantized"] else "cached quantized graph"))
            report["peers"][fam] = dict(q, path=graph)
        r = peer.call("load_openvino", path=path, export=onnx_path, graph=graph, threads=threads,
                      precision="bf16" if prec == "bf16" else "f32", name=fam)
        log("%s compiled in %.2f s: %s" % (fam, r["seconds"], r["compiled"]))
        report["peers"].setdefault(fam, {}).update(load_s=r["seconds"], compiled=r["compiled"],
                                                   path=graph)
        graphs[fam] = graph
    return graphs


def best_by_family(stats: Dict[str, Any], family: str) -> Optional[str]:
    keys = [k for k in stats if k.split("@")[0] == family]
    return min(keys, key=lambda k: stats[k]["p50"]) if keys else None


def add_openvino(args: argparse.Namespace, peer: peerlib.PeerProcess, path: str,
                 onnx_path: str, threads: List[int], vers: Dict[str, Any],
                 report: Dict[str, Any], problems: List[str],
                 notes: List[str], onnx_paths: Dict[str, str], engines: List[Engine],
                 families: List[str]) -> Tuple[List[Engine], List[str]]:
    """The OpenVINO engines at the run's precisions, added to `engines` and `families` (and
    their graphs to `onnx_paths`); missing openvino is a note under auto, a problem under on."""
    missing = vers.get("openvino_import") or (None if vers.get("nncf") else "nncf is missing")
    if missing:
        msg = ("openvino peer skipped: %s; install it with `%s -m pip install openvino nncf`"
               % (missing, peer.python))
        log(msg)
        (problems if args.openvino == "on" else notes).append(msg)
        return engines, families
    try:
        graphs = prepare_openvino(peer, path, onnx_path, threads, args.precisions, CALIBRATION,
                                  report)
    except peerlib.PeerError as e:
        msg = "openvino peer disabled: %s" % e
        log(msg)
        problems.append(msg.splitlines()[0])
        return engines, families
    for fam, graph in graphs.items():
        onnx_paths[fam] = graph
        engines = engines + [Engine("%s@%d" % (fam, t), fam, t, peer_runner(peer, fam, t))
                             for t in threads]
        families = families + [fam]
    return engines, families


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # random checkpoints clamp a temperature
        return _main(args, argv)


def _main(args: argparse.Namespace, argv: Optional[Sequence[str]]) -> int:
    t_start = time.time()
    import kime

    report: Dict[str, Any] = {
        "command": " ".join(["python", "-m", "bench"] + [shlex.quote(a) for a in
                                                        (sys.argv[1:] if argv is None else argv)]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine_info(),
        # Dropped by `__main__` before NumPy loaded; still set means main() was called in-process.
        "unset_env": [v for v in os.environ.get("KIME_BENCH_REEXEC", "").split(",") if v],
        "still_set_env": [v for v in peerlib.UNSET_ENV if v in os.environ],
        "settings": {"shape": args.shape, "precision": args.precision, "threads": args.threads,
                     "quick": args.quick, "repeat": args.repeat, "budget_s": args.budget,
                     "workloads": args.workloads, "gap_s": GAP_S},
    }
    problems: List[str] = []  # the run's numbers cannot be trusted as they stand: exit 1
    notes: List[str] = []  # worth saying, not a failure
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    report["checkpoint"] = path
    with open(os.path.join(path, "encoder", "config.json")) as f:
        enc = json.load(f)
    with open(os.path.join(path, "rl_agent_config.json")) as f:
        rl = json.load(f)
    report["model"] = {"encoder": rl.get("encoder"), "layers": enc.get("num_hidden_layers"),
                       "hidden": enc.get("hidden_size"), "heads": enc.get("num_attention_heads"),
                       "intermediate": enc.get("intermediate_size"),
                       "vocab": enc.get("vocab_size"), "max_len": rl.get("max_len"),
                       "head_layers": rl.get("head_layers")}

    # kime, in this process: one agent per precision.
    engines: List[Engine] = []
    agents: Dict[str, Any] = {}
    for prec in args.precisions:
        key = kime_key(prec, args.precision)
        t0 = time.perf_counter()
        agents[key] = kime.load(path, device="cpu", precision=prec, threads=args.threads,
                                answer_cache=0)
        log("%s loaded in %.2f s: %s" % (key, time.perf_counter() - t0, agents[key].engine.device))
        engines.append(Engine(key, key, args.threads or None, kime_runner(agents[key])))
    agent = agents["kime"]
    report["kime"] = {"version": kime.__version__, "device": agent.engine.device,
                      "precision": args.precision, "threads": args.threads, "blas": blas_info(),
                      "others": {k: {"device": a.engine.device}
                                 for k, a in agents.items() if k != "kime"}}
    workloads = build_workloads(path, agent.engine, args.workloads)
    by_name = {w.name: w for w in workloads}

    # The peers, in a side process.
    peer: Optional[peerlib.PeerProcess] = None
    peer_python: Optional[str] = None
    onnx_path: Optional[str] = None
    onnx_paths: Dict[str, str] = {}
    families = [e.key for e in engines]
    want_onnx_int8 = args.onnx_int8 == "on" or (args.onnx_int8 == "auto"
                                                 and "int8" in args.precisions)
    report["peers"] = {"mode": args.peers}
    if args.peers != "none":
        peer_python, why = peerlib.find_peer_python(args.peer_python)
        report["peers"]["python"] = peer_python
        report["peers"]["found"] = why
        if peer_python is None:
            log("peers: none (%s)" % why)
            if args.peer_python:
                problems.append("peers: none (%s)" % why)
    if peer_python is not None:
        cores = report["machine"]["cores"]
        if args.peer_threads:
            threads = sorted({int(t) for t in args.peer_threads.split(",") if t.strip()})
        else:
            threads = [cores] if args.quick else sorted({1, cores})
        report["peers"]["threads"] = threads
        log("peers: %s (%s), threads %s" % (peer_python, why, threads))
        peer = peerlib.PeerProcess(peer_python)
        try:
            hello = peer.call("hello")
            vers = hello["versions"]
            report["peers"]["versions"] = vers
            if vers.get("torch_agent"):
                raise peerlib.PeerError("laya.agent does not import: %s" % vers["torch_agent"])
            calibration = {w.name: w for w in build_workloads(path, agent.engine,
                                                              list(CALIBRATION))}
            peer.call("workloads", items={w.name: w.payload()
                                          for w in list(calibration.values()) + workloads})
            r = peer.call("load_torch", path=path)
            log("torch Agent loaded in %.2f s" % r["seconds"])
            report["peers"]["torch"] = {"load_s": r["seconds"], "dtype": r["dtype"]}
            if args.peers == "auto":
                engines += [Engine("torch@%d" % t, "torch", t, peer_runner(peer, "torch", t))
                            for t in threads]
                families.append("torch")
            if vers.get("onnxruntime_import") or vers.get("onnx_agent"):
                msg = ("onnx peer skipped: %s; install it with `%s -m pip install onnxruntime "
                       "onnx onnxscript`"
                       % (vers.get("onnxruntime_import") or vers.get("onnx_agent"), peer_python))
                log(msg)
                notes.append(msg)
            else:
                try:
                    onnx_path = prepare_onnx(peer, path, args.cache_dir, threads, report, problems)
                except peerlib.PeerError as e:  # torch goes on without it
                    onnx_path = None
                    msg = "onnx peer disabled: %s" % e
                    log(msg)
                    problems.append(msg.splitlines()[0])
                if onnx_path is not None:
                    onnx_paths["onnx"] = onnx_path
                    engines += [Engine("onnx@%d" % t, "onnx", t, peer_runner(peer, "onnx", t))
                                for t in threads]
                    families.append("onnx")
                if onnx_path is not None and want_onnx_int8:
                    try:
                        onnx_paths["onnx-int8"] = prepare_onnx_int8(peer, path, onnx_path,
                                                                    threads, report)
                        engines += [Engine("onnx-int8@%d" % t, "onnx-int8", t,
                                           peer_runner(peer, "onnx-int8", t)) for t in threads]
                        families.append("onnx-int8")
                    except peerlib.PeerError as e:
                        msg = "onnx-int8 peer disabled: %s" % e
                        log(msg)
                        problems.append(msg.splitlines()[0])
                if onnx_path is not None and args.openvino != "off":
                    engines, families = add_openvino(args, peer, path, onnx_path, threads, vers,
                                                     report, problems, notes, onnx_paths,
                                                     engines, families)
        except peerlib.PeerError as e:
            msg = "peers disabled: %s" % e
            log(msg)
            problems.append(msg.splitlines()[0])
            engines = [e_ for e_ in engines if e_.family.startswith("kime")]
            families = [e_.key for e_ in engines]
            peer.close()
            peer = None

    # The workloads, interleaved.
    report["workloads"] = []
    try:
        for i, w in enumerate(workloads):
            for eng in engines:  # a peer that failed one workload tries the next, if still alive
                if eng.failed and peer is not None and peer.proc.poll() is None:
                    eng.failed = None
            pids = [os.getpid()] + ([peer.proc.pid] if peer is not None else [])
            res = time_workload(w, engines, args, i == 0, problems, pids)
            if (res["other_cores"] or 0) > BUSY_CORES:
                log("%s: other processes kept %.1f cores busy; its numbers are noisy"
                    % (w.name, res["other_cores"]))
            entry = dict(w.describe(), title=w.title, rows_text=w.rows_text(), **res)
            stats = res["stats"]
            # best[family] is that family's fastest thread count; speedup[base][family] is
            # family p50 / base p50, above 1 when the base (a kime engine) is faster.
            entry["best"] = {}
            for fam in families:
                best = best_by_family(stats, fam)
                if best:
                    entry["best"][fam] = best
            entry["speedup"] = {
                base: {fam: stats[k]["p50"] / stats[base]["p50"]
                       for fam, k in entry["best"].items() if fam != base}
                for base in families if base.startswith("kime") and base in stats}
            if w.kind == "predict_batch":
                entry["questions_per_s"] = {k: w.rows / s["p50"] for k, s in stats.items()}
            report["workloads"].append(entry)
    finally:
        if peer is not None:
            peer.close()

    if not args.no_startup:
        report["startup"] = startup_and_memory(args, path, onnx_paths, families, peer_python,
                                               by_name, problems)
    try:
        report["machine"]["loadavg_end"] = list(os.getloadavg())
    except OSError:
        pass
    report["elapsed_s"] = time.time() - t_start
    report["problems"] = problems
    report["notes"] = notes

    from .report import emit, render

    emit(render(report), report, args.out, log)
    return 1 if problems else 0
