"""`kime doctor`: versions, the CPU's kernel path, the GPU and the CuPy wheel that fits its
driver, and the cache directories, as text or JSON.

What the backends find on this machine comes from `kime.factory.backend_report`, the one module
that imports them; the rest (versions, environment variables, CuPy's own view) is read here.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from typing import Any, Dict, List, Optional, Tuple

from .._version import __version__
from .convert import size_text
from .exits import EXIT_OTHER

PACKAGES = ("numpy", "tokenizers", "safetensors", "huggingface_hub", "threadpoolctl")
"""The runtime dependencies whose versions the report lists."""


def _version(package: str) -> Optional[str]:
    from importlib import metadata

    try:
        return metadata.version(package.replace("_", "-"))
    except metadata.PackageNotFoundError:
        try:
            return str(__import__(package).__version__)
        except Exception:
            return None


def doctor_report(prune: bool = False) -> Dict[str, Any]:
    """The report `kime doctor --json` prints: kime, python, platform, packages, cpu, gpu,
    caches. Never raises for a broken build or a missing GPU; it says so instead. With `prune`,
    the packed-weight cache's files this build never reads are deleted first, and `caches`
    says what went (`pruned`, `pruned_bytes`, `prune_errors`) and what is left."""
    from ..cpus import cpu_budget
    from ..factory import backend_report, prune_packed_cache

    pruned = prune_packed_cache() if prune else {}
    found = backend_report()
    report: Dict[str, Any] = {
        "kime": __version__,
        "python": "%s (%s)" % (platform.python_version(), sys.executable),
        "platform": platform.platform(),
        "packages": {name: _version(name) for name in PACKAGES},
    }
    budget = cpu_budget()
    cpu: Dict[str, Any] = {"threads": budget.threads, "threads_why": budget.reason,
                           "affinity": budget.affinity, "cpu_quota": budget.quota,
                           "kime_isa_env": os.environ.get("KIME_ISA")}
    cpu.update(found["cpu"])
    cpu["backend"] = os.environ.get("KIME_CPU_BACKEND", "compiled")
    cpu["huge_pages"] = _huge_pages()
    report["cpu"] = cpu
    gpu: Dict[str, Any] = {"cupy": None, "devices": 0}
    try:
        import cupy  # optional: kime never needs it

        gpu["cupy"] = str(cupy.__version__)
        gpu["devices"] = int(cupy.cuda.runtime.getDeviceCount())
    except ImportError:
        pass
    except Exception as e:
        gpu["error"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
    gpu.update(found["gpu"])
    report["gpu"] = gpu
    offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
    caches: Dict[str, Any] = dict(found["caches"], hf_hub=None, hf_hub_offline=offline)
    caches.update(pruned)
    try:
        from huggingface_hub import constants

        caches["hf_hub"] = constants.HF_HUB_CACHE
        caches["hf_hub_offline"] = bool(constants.HF_HUB_OFFLINE)
    except Exception:
        pass
    report["caches"] = caches
    return report


THP_ENABLED = "/sys/kernel/mm/transparent_hugepage/enabled"


def _huge_pages() -> Optional[str]:
    """Linux's transparent huge pages mode (`always`, `madvise` or `never`), or None where
    there are none to read. kime maps its packed weights asking for 2 MiB pages, which
    `always` and `madvise` grant and `never` refuses."""
    try:
        with open(THP_ENABLED) as f:
            text = f.read()
    except OSError:
        return None
    start, end = text.find("["), text.find("]")
    return text[start + 1:end] if 0 <= start < end else None


def _huge_pages_line(mode: Optional[str]) -> str:
    if mode is None:
        return "none on this system; the packed weights map in its base pages"
    if mode == "never":
        return ("never: the packed weights stream through 4 KiB pages, which cost short "
                "requests up to 9%% (as root: echo madvise > %s)" % THP_ENABLED)
    return "%s: kime maps its packed weights asking for 2 MiB pages" % mode


def _cache_line(caches: Dict[str, Any]) -> str:
    """Where the packed weights live, how much is there, and how much this build never reads."""
    line = "%s (%d blob%s, %s)" % (caches["packed"], caches["packed_blobs"],
                                   "" if caches["packed_blobs"] == 1 else "s",
                                   size_text(caches["packed_bytes"]))
    if "pruned" in caches:
        line += "; pruned %s, %s" % (_files(caches["pruned"]), size_text(caches["pruned_bytes"]))
    if caches["packed_unused"]:
        line += ("; %s, %s, from other kime builds or cut-short packings, which this build "
                 "never reads (`kime doctor --prune` deletes them)"
                 % (_files(caches["packed_unused"]), size_text(caches["packed_unused_bytes"])))
    return line


def _files(count: int) -> str:
    return "%d file%s" % (count, "" if count == 1 else "s")


def _pool_line(cpu: Dict[str, Any]) -> str:
    """kime's own thread pool (no OpenMP): how its idle workers wait, or why it has no threads."""
    if cpu.get("error"):
        return "unavailable (the kernels did not load)"
    if cpu.get("pool_spin_us") is None:
        return "one thread (a build without POSIX threads)"
    return ("kime's own (pthreads), tasks claimed; an idle worker spins %d us, then sleeps "
            "(KIME_SPIN_US)" % cpu["pool_spin_us"])


def _lines(report: Dict[str, Any]) -> List[Tuple[str, Any]]:
    """The report as (key, value) lines for the text form."""
    cpu, gpu, caches = report["cpu"], report["gpu"], report["caches"]
    lines = [("kime", report["kime"]), ("python", report["python"]),
             ("platform", report["platform"])]
    lines += [(name, version or "not installed") for name, version in report["packages"].items()]
    isa = cpu["isa"] or "unavailable (%s)" % cpu.get("error")
    if cpu["kime_isa_env"]:
        isa += " (capped by KIME_ISA=%s)" % cpu["kime_isa_env"]
    int8 = cpu.get("int8_kernels") or "unavailable"
    if cpu.get("kime_qgemm_env"):
        int8 += " (capped by KIME_QGEMM=%s)" % cpu["kime_qgemm_env"]
    bf16 = cpu.get("bf16_kernels") or "unavailable (%s)" % (cpu.get("bf16_missing")
                                                           or cpu.get("error"))
    lines += [("cpu isa / kernels", isa)]
    if cpu.get("fp32_kernels"):
        lines.append(("fp32 kernels", cpu["fp32_kernels"]))
    if cpu.get("cpu_features"):  # aarch64: what getauxval reports, KIME_ISA aside
        lines.append(("cpu features", " ".join(cpu["cpu_features"])))
    lines += [("int8 kernels", int8),
              ("bf16 kernels", bf16)]
    if cpu.get("bf16_attention"):  # int8's and bf16's attention products
        lines.append(("bf16 attention", cpu["bf16_attention"]))
    lines += [("huge pages", _huge_pages_line(cpu["huge_pages"])),
              ("thread pool", _pool_line(cpu)),
              ("threads (threads=0)", "%d: %s" % (cpu["threads"], cpu["threads_why"])),
              ("cpu backend", cpu["backend"])]
    why = " (%s)" % gpu["error"] if "error" in gpu else ""
    if gpu["cupy"] is None:
        lines.append(("cupy", "not installed" + why))
    else:
        lines.append(("cupy", "%s, %d GPU(s)%s" % (gpu["cupy"], gpu["devices"], why)))
    lines.append(("cupy for this driver", gpu["cupy_for_driver"]))
    lines += [("device='auto' runs on", gpu["auto"] + ("" if gpu["cuda0"] is None else
                                                     " (cuda: %s)" % gpu["cuda0"])),
              ("cuda self-check", _self_check_line(gpu["self_check"]))]
    lines += [("packed-weight cache", _cache_line(caches)),
              ("hugging face cache", caches["hf_hub"] or "unknown"),
              ("HF_HUB_OFFLINE", "yes" if caches["hf_hub_offline"] else "no")]
    return lines


def _self_check_line(check: Dict[str, Any]) -> str:
    """Whether GPU loads check themselves, and the newest verdict kept (kime.gpu_check)."""
    import time

    state = "on at every GPU load" if check["enabled"] else "off (KIME_CUDA_SELFCHECK=0)"
    if check["last"] is None:
        return state + "; no verdict kept on this machine"
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(check["last_at"]))
    return "%s; last (%s): %s" % (state, when, check["last"])


def _doctor(args: argparse.Namespace) -> int:
    report = doctor_report(prune=args.prune)
    errors = report["caches"].get("prune_errors") or []
    if args.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OTHER if errors else 0
    for error in errors:
        print("kime doctor: could not delete %s" % error, file=sys.stderr)
    lines = _lines(report)
    width = max(len(key) for key, _ in lines) + 1
    for key, value in lines:
        print("%-*s  %s" % (width, key + ":", value))
    return EXIT_OTHER if errors else 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `doctor` to `kime`'s subcommands (an argparse subparsers action)."""
    doc = sub.add_parser("doctor", help="report versions, the CPU's kernel path and the caches",
                         description="Print kime's and its dependencies' versions, the ISA kime's "
                         "kernels use on this CPU (capped by KIME_ISA) and the FP32, INT8 and "
                         "BF16 kernels they run, Linux's huge pages, the thread pool, the "
                         "default thread count, CuPy and GPUs if present, the CuPy wheel that "
                         "fits the NVIDIA driver, and the cache directories, with what of the "
                         "packed-weight cache this build never reads (--prune deletes it).")
    doc.add_argument("--json", action="store_true", help="print the report as JSON")
    doc.add_argument("--prune", action="store_true",
                     help="first delete the packed-weight cache's files this build never reads "
                     "(blobs other kime builds packed, packings cut short an hour ago or more); "
                     "exits 1 if one could not be deleted")
    doc.set_defaults(run=_doctor)
