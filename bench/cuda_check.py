"""The device check for a lent GPU machine: install kime, run its CUDA tests, bench it against
Laya's torch Agent, and write everything to one report.

Run from the repository root, with no network:

    python bench/cuda_check.py [--report PATH] [--laya-wheel WHEEL] [--budget SECONDS]

The report goes to `$OUT/cuda_report.md` when `$OUT` is set, else to `--report` (default
`cuda_report.md`). It is rewritten after every section, so a run that is cut short still leaves
what it measured, and a section that fails records its traceback while the others go on.

Sections: the machine (GPU, driver, CuPy, torch); installing kime (an editable install without
build isolation, else an in-place build; the CUDA backend itself needs no build, but the CPU
extensions the tests import do); `pytest tests/cuda`; then, for random `base` and `large`
checkpoints (kime.testing), kime in FP16 and FP32 and Laya's torch `Agent` on CUDA with its
default autocast, over the bench's workloads (bench/workloads.py): W1 p50, W3 and W4 per
question, W9 questions per second. Laya runs in a child process (`--laya-worker`), so torch and
CuPy never share a process and a Laya failure cannot take kime's numbers with it. Issue 5's
targets for `large` are checked at the end. `base-parallel` is `base` in Laya's parallel option
layout (issue 26), last, so it runs only where the budget allows.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import glob
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOADS = ("W1", "W3", "W4", "W9")
REPEATS = {"W1": 100, "W3": 30, "W4": 10, "W9": 10}
WARMUP = 3
SECONDS_PER_WORKLOAD = 12.0  # fewer repeats when a workload is slow (FP32 on `large`)
TARGETS = {"W1_p50_ms": 1.5, "W3_ms_per_question": 1.0, "speedup": 5.0}  # issue 5, `large`


class Report:
    """Markdown sections, written out after each one."""

    def __init__(self, path: str):
        self.path = path
        self.parts: List[str] = ["# kime CUDA device check\n", "started %s\n" % time.strftime(
            "%Y-%m-%d %H:%M:%S %Z")]

    def add(self, text: str) -> None:
        self.parts.append(text.rstrip() + "\n")
        self.write()

    def write(self) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("\n".join(self.parts))


def log(msg: str) -> None:
    sys.stderr.write("[cuda_check %s] %s\n" % (time.strftime("%H:%M:%S"), msg))
    sys.stderr.flush()


@contextlib.contextmanager
def section(report: Report, title: str) -> Iterator[List[str]]:
    """Collect a section's lines; an exception is recorded in it and swallowed."""
    lines: List[str] = []
    t0 = time.perf_counter()
    log(title)
    try:
        yield lines
    except Exception:
        lines.append("**failed:**\n\n```\n%s```" % traceback.format_exc())
    finally:
        report.add("## %s (%.1f s)\n\n%s" % (title, time.perf_counter() - t0, "\n".join(lines)))


def run(cmd: Sequence[str], timeout: float, env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """A command's exit code and the tail of its output, never raising."""
    t0 = time.perf_counter()
    try:
        p = subprocess.run(list(cmd), cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                           env=env)
        out, rc = (p.stdout or "") + (p.stderr or ""), p.returncode
    except subprocess.TimeoutExpired as e:
        out = ((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes)
               else (e.stdout or "")) + "\n[timed out after %.0f s]" % timeout
        rc = 124
    except OSError as e:
        out, rc = str(e), 127
    return {"rc": rc, "out": out, "seconds": time.perf_counter() - t0}


def tail(text: str, lines: int = 60) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def code(text: str) -> str:
    return "```\n%s\n```" % text.rstrip()


# --- sections -----------------------------------------------------------------------------


def machine(lines: List[str]) -> None:
    lines.append("- python %s on %s" % (sys.version.split()[0], platform.platform()))
    smi = run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
               "--format=csv,noheader"], 30)
    lines.append("- nvidia-smi: %s" % (smi["out"].strip() if smi["rc"] == 0 else "unavailable (%s)"
                                       % smi["out"].strip()[:200]))
    try:
        import cupy  # type: ignore[import-not-found]

        rt = cupy.cuda.runtime
        props = rt.getDeviceProperties(0)
        lines.append("- cupy %s, CUDA runtime %d, driver %d, %s (sm_%d%d), %d GPU(s)" % (
            cupy.__version__, rt.runtimeGetVersion(), rt.driverGetVersion(),
            props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
            props["major"], props["minor"], rt.getDeviceCount()))
    except Exception as e:
        lines.append("- cupy: %s: %s" % (type(e).__name__, e))
    for name in ("numpy", "setuptools", "Cython", "torch", "transformers", "tokenizers",
                 "safetensors", "laya", "pytest"):
        try:
            from importlib.metadata import version

            lines.append("- %s %s" % (name, version(name)))
        except Exception:
            lines.append("- %s: not installed" % name)


def install(lines: List[str]) -> None:
    """kime importable with its CPU extensions: already built, an editable install, or an
    in-place build, in that order."""
    probe = [sys.executable, "-c", "import kime, kime._cpu._ops, kime._cpu._forward; "
             "print(kime.__file__)"]
    before = run(probe, 120)
    if before["rc"] == 0:
        lines.append("- kime and its CPU extensions import already: %s" % before["out"].strip())
    else:
        lines.append("- kime does not import yet:\n\n" + code(tail(before["out"], 8)))
        for cmd in ([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                     "--no-index", "-e", "."],
                    [sys.executable, "setup.py", "build_ext", "--inplace"]):
            r = run(cmd, 420)
            lines.append("- `%s`: exit %d in %.0f s\n\n%s" % (" ".join(cmd[1:]), r["rc"],
                                                            r["seconds"], code(tail(r["out"], 15))))
            if r["rc"] == 0 and run(probe, 120)["rc"] == 0:
                break
    after = run([sys.executable, "-c", "import kime; from kime._cuda.device import probe; "
                 "print(probe(0) or 'GPU 0 runs kime')"], 120)
    lines.append("- CUDA: %s" % after["out"].strip())


def tests(lines: List[str], timeout: float) -> None:
    r = run([sys.executable, "-m", "pytest", "tests/cuda", "-q", "-ra", "-p", "no:cacheprovider"],
            timeout)
    lines.append("exit %d in %.0f s\n\n%s" % (r["rc"], r["seconds"], code(tail(r["out"], 80))))


def _timed(call: Callable[[], Any], repeats: int, budget: float) -> List[float]:
    for _ in range(WARMUP):
        call()
    samples: List[float] = []
    start = time.perf_counter()
    while len(samples) < repeats and (len(samples) < 3 or time.perf_counter() - start < budget):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    return samples


def _call(agent: Any, w: Dict[str, Any]) -> Any:
    if w["kind"] == "predict_batch":
        return agent.predict_batch(w["states"], w["questions"])
    return agent.predict(w["states"][0], w["questions"])


def measure(agent: Any, workloads: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """p50 seconds of each workload, and the metric issue 5 asks for."""
    from bench.stats import percentile

    out: Dict[str, Any] = {}
    for name, w in workloads.items():
        samples = _timed(lambda: _call(agent, w), REPEATS[name], SECONDS_PER_WORKLOAD)
        p50 = percentile(samples, 50)
        rows = len(w["states"]) * len(w["questions"])
        out[name] = {"p50_s": p50, "n": len(samples), "rows": rows,
                     "ms_per_question": 1000 * p50 / rows, "questions_per_s": rows / p50}
    out["W3_result"] = _call(agent, workloads["W3"]) if "W3" in workloads else None
    return out


def kime_bench(path: str, precision: str, workloads_out: str) -> Dict[str, Any]:
    """kime on the GPU over the workloads; writes them to `workloads_out` for Laya's run."""
    import kime
    from bench.workloads import build_workloads

    t0 = time.perf_counter()
    agent = kime.load(path, device="cuda", precision=precision, answer_cache=0)
    load_s = time.perf_counter() - t0
    check = agent.engine.gpu_check  # kime.load falls back to the CPU on a failed self-check
    if check is not None and not check.passed:
        raise RuntimeError("the CUDA self-check failed, so kime would run on the CPU: "
                           + check.summary())
    built = build_workloads(path, agent.engine, names=WORKLOADS)
    workloads = {w.name: w.payload() for w in built}
    with open(workloads_out, "w", encoding="utf-8") as f:
        json.dump(workloads, f)
    try:
        res = measure(agent, workloads)
        res["device"] = agent.engine.device
        res["load_s"] = load_s
        res["self_check"] = "off" if check is None else "%s (%.1f s, its CPU side %.1f s)" % (
            check.summary(), check.seconds, check.cpu_seconds)
        res["memory"] = dataclasses.asdict(agent.engine.memory())
        res["rows"] = {w.name: w.rows_text() for w in built}
        return res
    finally:
        del agent
        gc.collect()
        try:
            import cupy  # type: ignore[import-not-found]

            cupy.get_default_memory_pool().free_all_blocks()
            cupy.get_default_pinned_memory_pool().free_all_blocks()
        except Exception:
            pass


def ensure_laya(lines: List[str], wheel: Optional[str]) -> bool:
    if run([sys.executable, "-c", "import laya.agent"], 120)["rc"] == 0:
        lines.append("- laya imports")
        return True
    candidates = [wheel] if wheel else sorted(
        glob.glob(os.path.join(ROOT, "shared", "**", "laya-*.whl"), recursive=True)
        + glob.glob(os.path.join(ROOT, "..", "shared", "**", "laya-*.whl"), recursive=True))
    if not candidates:
        lines.append("- laya is not installed and no wheel was given (--laya-wheel) or found in "
                     "shared/: the Laya comparison is skipped")
        return False
    r = run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", candidates[-1]],
            300)
    lines.append("- pip install %s: exit %d\n\n%s"
                 % (candidates[-1], r["rc"], code(tail(r["out"], 8))))
    ok = run([sys.executable, "-c", "import laya.agent"], 120)
    if ok["rc"] != 0:
        lines.append("- laya still does not import:\n\n" + code(tail(ok["out"], 10)))
    return ok["rc"] == 0


def laya_bench(path: str, workloads_json: str, timeout: float) -> Dict[str, Any]:
    r = run([sys.executable, os.path.abspath(__file__), "--laya-worker", path, workloads_json],
            timeout)
    for line in reversed(r["out"].splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("the Laya worker gave no result (exit %d):\n%s"
                       % (r["rc"], tail(r["out"], 40)))


def laya_worker(path: str, workloads_json: str) -> int:
    """Child process: Laya's torch Agent on CUDA, default autocast; one JSON line out."""
    import warnings

    warnings.simplefilter("ignore")
    sys.path.insert(0, ROOT)
    import torch  # type: ignore[import-not-found]
    from laya.agent import Agent  # type: ignore[import-not-found]

    with open(workloads_json, encoding="utf-8") as f:
        workloads = json.load(f)
    t0 = time.perf_counter()
    agent = Agent(path, device="cuda")
    load_s = time.perf_counter() - t0
    res = measure(agent, workloads)
    res.update(load_s=load_s, device=str(getattr(agent, "device", "?")),
               dtype=str(getattr(agent, "dtype", "?")), torch=torch.__version__)
    sys.stdout.write(json.dumps(res) + "\n")
    return 0


def table(results: Dict[str, Dict[str, Any]]) -> str:
    rows = ["| shape | engine | W1 p50 ms | W3 ms/question | W4 ms/question | W9 questions/s |",
            "|---|---|---|---|---|---|"]
    for key, r in results.items():
        if "error" in r:
            rows.append("| %s | failed: %s | | | | |" % (key.replace(" ", " | ", 1), r["error"]))
            continue
        rows.append("| %s | %.3f | %.3f | %.3f | %.0f |" % (
            key.replace(" ", " | ", 1), 1000 * r["W1"]["p50_s"], r["W3"]["ms_per_question"],
            r["W4"]["ms_per_question"], r["W9"]["questions_per_s"]))
    return "\n".join(rows)


def targets(results: Dict[str, Dict[str, Any]]) -> List[str]:
    ours, laya = results.get("large kime-f16"), results.get("large laya-torch")
    if not ours or "error" in ours:
        return ["- no `large` FP16 numbers to check"]
    w1, w3 = 1000 * ours["W1"]["p50_s"], ours["W3"]["ms_per_question"]
    out = ["- W1 p50 %.3f ms (target <= %.1f): %s" % (
               w1, TARGETS["W1_p50_ms"], "met" if w1 <= TARGETS["W1_p50_ms"] else "MISSED"),
           "- W3 %.3f ms/question (target <= %.1f): %s" % (
               w3, TARGETS["W3_ms_per_question"],
               "met" if w3 <= TARGETS["W3_ms_per_question"] else "MISSED")]
    if laya and "error" not in laya:
        for name in ("W1", "W3"):
            speedup = laya[name]["p50_s"] / ours[name]["p50_s"]
            out.append("- %s %.1fx Laya's torch Agent (target >= %.0fx): %s" % (
                name, speedup, TARGETS["speedup"],
                "met" if speedup >= TARGETS["speedup"] else "MISSED"))
    else:
        out.append("- no Laya numbers: the speed-up targets are unchecked")
    return out


def agreement(ours: Dict[str, Any], laya: Dict[str, Any]) -> str:
    from bench.stats import compare_results

    diff = compare_results(ours["W3_result"], laya["W3_result"])
    return "max |difference| %.4g at %s; mismatches: %s" % (
        diff.get("max_abs", float("nan")), diff.get("worst"),
        diff.get("mismatches", [])[:5] or "none")


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--report", default=None, help="report path (default $OUT/cuda_report.md, "
                    "else cuda_report.md)")
    ap.add_argument("--laya-wheel", default=None, help="a laya wheel to install if laya is missing")
    ap.add_argument("--budget", type=float, default=540.0,
                    help="seconds for the whole check; later sections are skipped past it")
    ap.add_argument("--shapes", default="base,large,base-parallel")
    ap.add_argument("--skip-tests", action="store_true")
    ap.add_argument("--laya-worker", nargs=2, metavar=("CHECKPOINT", "WORKLOADS_JSON"),
                    help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.laya_worker:
        return laya_worker(*args.laya_worker)

    sys.path.insert(0, ROOT)
    os.chdir(ROOT)
    out_dir = os.environ.get("OUT")
    path = args.report or (os.path.join(out_dir, "cuda_report.md") if out_dir else "cuda_report.md")
    report = Report(path)
    start = time.perf_counter()

    def left() -> float:
        return args.budget - (time.perf_counter() - start)

    with section(report, "Machine") as lines:
        machine(lines)
    with section(report, "Install kime") as lines:
        install(lines)
    if not args.skip_tests:
        with section(report, "pytest tests/cuda") as lines:
            tests(lines, timeout=max(60.0, min(300.0, left() - 200)))

    results: Dict[str, Dict[str, Any]] = {}
    have_laya = False
    with section(report, "Laya") as lines:
        have_laya = ensure_laya(lines, args.laya_wheel)
    tmp = tempfile.mkdtemp(prefix="kime-cuda-check-")
    for shape in [s for s in args.shapes.split(",") if s]:
        with section(report, "Bench: %s" % shape) as lines:
            if left() < 60:
                lines.append("skipped: %.0f s of the budget left" % left())
                continue
            from bench.workloads import cached_checkpoint

            t0 = time.perf_counter()
            if shape.endswith("-parallel"):  # issue 26: the shape in Laya's parallel layout
                from kime.synthetic import write_checkpoint

                ck = str(write_checkpoint(os.path.join(tmp, shape), shape=shape[:-len("-parallel")],
                                          option_layout="parallel"))
            else:
                ck = cached_checkpoint(shape, cache_dir=os.path.join(tmp, "checkpoints"), log=log)
            lines.append("- random `%s` checkpoint written in %.1f s"
                         % (shape, time.perf_counter() - t0))
            workloads_json = os.path.join(tmp, "workloads-%s.json" % shape)
            for precision in ("f16", "f32"):
                key = "%s kime-%s" % (shape, precision)
                try:
                    results[key] = kime_bench(ck, precision, workloads_json)
                    lines.append("- kime %s: %s; loaded in %.1f s; self-check %s; memory %s; "
                                 "rows %s" % (precision, results[key]["device"],
                                              results[key]["load_s"], results[key]["self_check"],
                                              results[key]["memory"], results[key]["rows"]))
                except Exception as e:
                    results[key] = {"error": "%s: %s" % (type(e).__name__, str(e)[:200])}
                    lines.append("- kime %s failed:\n\n%s"
                                 % (precision, code(traceback.format_exc())))
            if have_laya and left() > 45 and os.path.isfile(workloads_json):
                key = "%s laya-torch" % shape
                try:
                    results[key] = laya_bench(ck, workloads_json, max(45.0, left() - 15))
                    lines.append("- Laya: %s %s, torch %s, loaded in %.1f s" % (
                        results[key]["device"], results[key]["dtype"], results[key]["torch"],
                        results[key]["load_s"]))
                    if "error" not in results.get("%s kime-f16" % shape, {"error": 1}):
                        lines.append("- W3 answers, kime FP16 vs Laya: " + agreement(
                            results["%s kime-f16" % shape], results[key]))
                except Exception as e:
                    results[key] = {"error": "%s: %s" % (type(e).__name__, str(e)[:200])}
                    lines.append("- Laya failed:\n\n%s" % code(traceback.format_exc()))
            lines.append("")
            lines.append(table({k: v for k, v in results.items() if k.startswith(shape + " ")}))
    with section(report, "Summary") as lines:
        lines.append(table(results))
        lines.append("")
        lines.extend(targets(results))
        lines.append("\ntotal %.0f s" % (time.perf_counter() - start))
    log("report: %s" % path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
