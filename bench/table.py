"""The peers table: kime, ONNX Runtime and OpenVINO at every precision, in one run.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.table --shape base
    python -m bench.table --shape large --repeat 7 --out large.json
    python -m bench.table --shape base --precision f32,int8,bf16,mixed   # with the gate's mix
    python -m bench.table --shape tiny --peers none --repeat 2           # kime only: a smoke run

Three settings, each W1 or W3 (`bench/workloads.py`) through Laya's API on every engine:

1. W1 quiet: `--gap` seconds of idle (0.5 by default) before every call, so no engine's pool is
   still spinning from the one before;
2. W3 quiet, the same way;
3. W1 beside a spinner: a process that keeps one core busy (`bench.busy`'s), quiet gaps.

The engines, each at `--threads` (default: every usable core): kime at each `--precision`; Laya's
`ONNXAgent` under ONNX Runtime on the FP32 export and on its `quantize_dynamic` INT8; and the
same `ONNXAgent` on OpenVINO with an expert's latency settings (`bench/peer_openvino.py`): FP32
and BF16 by its precision hint, INT8 from NNCF's SmoothQuant calibrated on single rows of W1-W3.
In each setting every engine gets a warm-up call, then `--repeat` timed calls interleaved
round-robin, the order rotated each round. The table gives each engine's p50 / p90 per setting
and precision, and kime's best-peer ratio (the fastest peer's p50 over kime's: above 1 when kime
is faster). Beside it, `paired` is the median over rounds of that peer's call over kime's call
of the same round: on a machine whose speed drifts within a run, it compares calls made seconds
apart, where the p50s pool calls minutes apart. The CPU is named in its first line.

FP32 W1 answers of every peer must agree with kime's as in `python -m bench` (the same choice,
every probability within 1e-3), or the run exits 1. Progress goes to stderr, the table to
stdout, `--out FILE` writes every sample as JSON.
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):  # they pin OpenBLAS to slower kernels
    os.environ.pop(_var, None)

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any, Dict, List, Optional, Sequence, Tuple  # noqa: E402

from . import peers as peerlib  # noqa: E402
from .busy import run_spinner, time_setting  # noqa: E402
from .machine import machine_info  # noqa: E402
from .report import emit  # noqa: E402
from .run import (CALIBRATION, OPENVINO, W1_TOLERANCE, Engine, kime_runner,  # noqa: E402
                  peer_runner, prepare_onnx, prepare_onnx_int8, prepare_openvino)
from .stats import compare_results, paired_ratio, w1_agrees  # noqa: E402
from .workloads import build_workloads, cached_checkpoint  # noqa: E402

SETTINGS = (("W1", "quiet"), ("W3", "quiet"), ("W1", "spinner"))
PRECISIONS = ("f32", "int8", "bf16", "mixed")
ONNX = {"f32": "onnx", "int8": "onnx-int8"}
NAMES = {"f32": "FP32", "int8": "INT8", "bf16": "BF16", "mixed": "mixed"}
ROWS = {"W1-quiet": "W1", "W3-quiet": "W3", "W1-spinner": "W1 beside a spinner"}


def log(msg: str) -> None:
    sys.stderr.write("[table] %s\n" % msg)
    sys.stderr.flush()


def parse_args(argv: Optional[Sequence[str]]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.table",
                                 description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--shape", default="base", help="checkpoint shape (default base)")
    ap.add_argument("--precision", default="f32,int8,bf16",
                    help="kime's precisions, comma-separated (f32, int8, bf16, mixed: the "
                         "checkpoint's `kime gate --mixed` choice); default f32,int8,bf16; "
                         "bf16 is skipped, with a note, where the CPU lacks it")
    ap.add_argument("--threads", type=int, default=0,
                    help="every engine's threads; 0 = every usable core (default)")
    ap.add_argument("--repeat", type=int, default=11, help="timed calls per engine and setting")
    ap.add_argument("--gap", type=float, default=0.5, help="idle seconds before each call")
    ap.add_argument("--settings", default="W1-quiet,W3-quiet,W1-spinner",
                    help="which of W1-quiet, W3-quiet, W1-spinner to run (default all three)")
    ap.add_argument("--peers", choices=["auto", "none"], default="auto",
                    help="auto: ONNX Runtime and OpenVINO when the peer interpreter has them")
    ap.add_argument("--peer-python", help="interpreter with laya, torch, onnxruntime, openvino "
                                          "and nncf (default: see bench/peers.py)")
    ap.add_argument("--cache-dir", default=None, help="default ~/.cache/kime/bench")
    ap.add_argument("--out", help="write the report as JSON to this file")
    args = ap.parse_args(argv)
    aliases = {"fp32": "f32", "float32": "f32", "i8": "int8", "bfloat16": "bf16"}
    args.precisions = []
    for p in args.precision.split(","):
        p = aliases.get(p.strip().lower(), p.strip().lower())
        if p not in PRECISIONS:
            ap.error("unknown precision %r; use %s" % (p, ", ".join(PRECISIONS)))
        if p not in args.precisions:
            args.precisions.append(p)
    known = ["%s-%s" % s for s in SETTINGS]
    args.settings = [s.strip() for s in args.settings.split(",") if s.strip()]
    bad = [s for s in args.settings if s not in known]
    if bad or not args.settings:
        ap.error("unknown settings %s; choose from %s" % (bad, ", ".join(known)))
    if args.repeat < 1 or args.gap < 0:
        ap.error("--repeat must be at least 1 and --gap not negative")
    return args


def peer_engines(args: argparse.Namespace, path: str, threads: int, workloads: List[Any],
                 report: Dict[str, Any], problems: List[str], notes: List[str]
                 ) -> Tuple[Optional[peerlib.PeerProcess], List[Engine]]:
    """The side process with ONNX Runtime and OpenVINO at the precisions they have, or None
    (why in the report; a problem when a peer interpreter was named and fails)."""
    python, why = peerlib.find_peer_python(args.peer_python)
    report["peers"].update(python=python, found=why)
    if python is None:
        log("peers: none (%s)" % why)
        if args.peer_python:
            problems.append("peers: none (%s)" % why)
        return None, []
    log("peers: %s (%s), %d threads" % (python, why, threads))
    peer = peerlib.PeerProcess(python)
    engines: List[Engine] = []
    try:
        vers = peer.call("hello")["versions"]
        report["peers"]["versions"] = vers
        missing = vers.get("onnxruntime_import") or vers.get("onnx_agent")
        if missing:
            raise peerlib.PeerError("ONNX Runtime or ONNXAgent does not import: %s" % missing)
        peer.call("workloads", items={w.name: w.payload() for w in workloads})
        onnx_path = prepare_onnx(peer, path, args.cache_dir, [threads], report, problems)
        if "int8" in args.precisions:
            prepare_onnx_int8(peer, path, onnx_path, [threads], report)
        fams = [ONNX[p] for p in args.precisions if p in ONNX]
        ov_missing = vers.get("openvino_import") or (None if vers.get("nncf")
                                                     else "nncf is missing")
        if ov_missing:
            notes.append("openvino peer skipped: %s; install it with `%s -m pip install "
                         "openvino nncf`" % (ov_missing, python))
            log(notes[-1])
        else:
            fams += list(prepare_openvino(peer, path, onnx_path, [threads], args.precisions,
                                          CALIBRATION, report))
    except peerlib.PeerError as e:
        problems.append(("peers disabled: %s" % e).splitlines()[0])
        log(problems[-1])
        peer.close()
        return None, []
    engines = [Engine(fam, fam, threads, peer_runner(peer, fam, threads)) for fam in fams]
    return peer, engines


def precision_of(key: str) -> str:
    """The precision an engine key runs: kime-int8, onnx-int8, openvino-int8 -> int8."""
    for p in ("int8", "bf16", "mixed"):
        if key.endswith(p):
            return p
    return "f32"


def peer_label(key: str) -> str:
    return "ORT" if key.startswith("onnx") else "OpenVINO"


def rows_of(report: Dict[str, Any]) -> List[List[str]]:
    """The table's rows: per setting and precision, kime's, ORT's and OpenVINO's p50 / p90,
    kime's lead over the fastest of them, and that lead paired round by round."""
    out = []
    for setting, res in report["results"].items():
        stats = res["stats"]
        unit = "s" if max((s["p50"] for s in stats.values()), default=0) >= 2 else "ms"
        scale = 1.0 if unit == "s" else 1e3

        def cell(key: Optional[str]) -> str:
            s = stats.get(key) if key else None
            return "—" if not s else "%.*f / %.*f %s" % (
                2 if unit == "s" else 1, s["p50"] * scale, 2 if unit == "s" else 1,
                s["p90"] * scale, unit)
        for prec in report["settings"]["precisions"]:
            kime = "kime" if prec == "f32" else "kime-" + prec
            ort = ONNX.get(prec)
            ov = OPENVINO.get(prec)
            if prec == "mixed":  # against the peers' INT8, its lowest precision
                ort, ov = ONNX["int8"], OPENVINO["int8"]
            peers = [k for k in (ort, ov) if k in stats]
            best = min(peers, key=lambda k: stats[k]["p50"]) if peers else None
            ratio = ("%.2fx vs %s" % (stats[best]["p50"] / stats[kime]["p50"], peer_label(best))
                     if best and kime in stats else "—")
            paired = (paired_ratio(stats[best]["samples"], stats[kime]["samples"])
                      if best and kime in stats else None)
            out.append(["%s %s" % (ROWS[setting], NAMES[prec]), cell(kime),
                        cell(ort if ort in stats else None), cell(ov if ov in stats else None),
                        ratio, "—" if paired is None else "%.2fx" % paired])
    return out


def render(report: Dict[str, Any]) -> str:
    s = report["settings"]
    vers = report["peers"].get("versions") or {}
    lines = ["cpu: %s, %d cores; shape %s; %d threads for every engine; %d timed calls per "
             "engine and setting after a warm-up, %.2g s idle before each" % (
                 report["machine"]["cpu"], report["machine"]["cores"], s["shape"], s["threads"],
                 s["repeat"], s["gap_s"]),
             "kime %s; peers: laya %s ONNXAgent on onnxruntime %s and openvino %s (nncf %s)" % (
                 report["kime"]["version"], vers.get("laya"), vers.get("onnxruntime"),
                 vers.get("openvino"), vers.get("nncf")),
             "command: %s" % report["command"], "",
             "| p50 / p90 | kime | ONNX Runtime | OpenVINO | kime vs best peer | paired |",
             "|---|---:|---:|---:|---:|---:|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows_of(report)]
    if "mixed" in s["precisions"]:
        lines += ["", "kime's mixed precision (%s) against its uniform ones, p50:"
                  % report["kime"].get("kime-mixed", "")]
        for setting, res in report["results"].items():
            st = res["stats"]
            if "kime-mixed" in st:
                lines.append("  %s: mixed %.1f ms; %s" % (setting, st["kime-mixed"]["p50"] * 1e3,
                             ", ".join("%s %.1f ms (mixed takes %.2fx its time)" % (
                                 NAMES[p], st[k]["p50"] * 1e3,
                                 st["kime-mixed"]["p50"] / st[k]["p50"])
                                 for p, k in (("int8", "kime-int8"), ("bf16", "kime-bf16"))
                                 if k in st)))
    loads = ["%s %s" % (k, "?" if r["other_cores"] is None else "%.2f" % r["other_cores"])
             for k, r in report["results"].items()]
    lines += ["", "cores other processes kept busy: " + ", ".join(loads)]
    mem = report["peers"].get("memory")
    if mem:  # every peer engine lives in one process: on large it needs the machine's memory
        lines.append("the peer process's peak RSS: %.1f GB (%.1f GB at the end)"
                     % (mem["peak_kb"] / 2 ** 20, mem["rss_kb"] / 2 ** 20))
    lines += ["note: " + n for n in report["notes"]]
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
        "command": " ".join(["python", "-m", "bench.table"]
                            + list(sys.argv[1:] if argv is None else argv)),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": machine_info(),
        "kime": {"version": kime.__version__},
        "settings": {"shape": args.shape, "precisions": args.precisions, "threads": threads,
                     "repeat": args.repeat, "gap_s": args.gap, "settings": args.settings},
        "peers": {"mode": args.peers}, "results": {}, "agreement": {}}
    problems: List[str] = []
    notes: List[str] = []
    from kime._cpu.backend import bf16_missing

    if "bf16" in args.precisions and bf16_missing():  # nor is there a BF16 peer to compare
        args.precisions.remove("bf16")
        notes.append("bf16 skipped: %s" % bf16_missing())
        log(notes[-1])
    path = cached_checkpoint(args.shape, args.cache_dir, log=log)
    engines: List[Engine] = []
    agent = None
    for prec in args.precisions:
        key = "kime" if prec == "f32" else "kime-" + prec
        agent = kime.load(path, device="cpu", precision=prec, threads=threads, answer_cache=0)
        log("%s: %s" % (key, agent.engine.device))
        report["kime"][key] = str(agent.engine.device)
        engines.append(Engine(key, "kime", threads, kime_runner(agent)))
    assert agent is not None
    workloads = {w.name: w for w in build_workloads(path, agent.engine, list(CALIBRATION))}
    peer, theirs = (peer_engines(args, path, threads, list(workloads.values()), report,
                                 problems, notes) if args.peers != "none" else (None, []))
    engines += theirs
    answers: Dict[str, Any] = {}
    try:
        pids = [os.getpid()] + ([peer.proc.pid] if peer is not None else [])
        for name in args.settings:
            wname, setting = name.split("-")
            log("%s ..." % name)

            def timed() -> Dict[str, Any]:
                return time_setting(setting, workloads[wname], engines, args.repeat, args.gap,
                                    pids, answers if wname == "W1" else {}, {})
            res = run_spinner(timed) if setting == "spinner" else timed()
            report["results"][name] = res
            log("%s: %s" % (name, ", ".join("%s p50 %.1f ms" % (k, s["p50"] * 1e3)
                                            for k, s in res["stats"].items())))
    except peerlib.PeerError as e:
        problems.append(("the peer failed: %s" % e).splitlines()[0])
        log(problems[-1])
    finally:
        if peer is not None:
            try:
                report["peers"]["memory"] = peer.call("memory")
            except peerlib.PeerError:
                pass
            peer.close()
    for key, got in answers.items():  # W1's first answers, every engine against kime's
        base = "kime" if precision_of(key) in ("f32", "mixed") else "kime-" + precision_of(key)
        if key.startswith("kime") or base not in answers:
            continue
        cmp = compare_results(answers[base], got)
        if precision_of(key) == "f32":
            cmp["w1_check"] = w1_agrees(answers[base], got, W1_TOLERANCE)
            if cmp["w1_check"]:
                problems.append("W1: %s does not give kime's FP32 answer (%s)"
                                % (key, "; ".join(cmp["w1_check"])))
        report["agreement"][key] = cmp
    report["problems"], report["notes"] = problems, notes
    emit(render(report), report, args.out, log)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
