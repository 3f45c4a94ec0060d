"""The machine a bench runs on: the CPU (model, and family and model numbers where a VM hides the
name), cores, OS and Python, and NumPy's BLAS. Every bench prints it beside its numbers."""
from __future__ import annotations

import os
import platform
from typing import Any, Dict, List


def machine_info() -> Dict[str, Any]:
    model = platform.processor() or platform.machine()
    ids: Dict[str, str] = {}
    try:  # a VM may name only "AMD EPYC": the family and model numbers tell the generation
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in ("model name", "cpu family", "model") and key not in ids:
                    ids[key] = value.strip()
                if len(ids) == 3:
                    break
        model = ids.get("model name", model)
        if "cpu family" in ids:
            model += " (family %s, model %s)" % (ids["cpu family"], ids.get("model", "?"))
    except OSError:
        pass
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    info: Dict[str, Any] = {"cpu": model, "cores": cores, "os": platform.platform(),
                            "python": platform.python_version()}
    try:
        info["loadavg_start"] = list(os.getloadavg())
    except OSError:
        pass
    return info


def blas_info() -> List[Dict[str, Any]]:
    try:
        from threadpoolctl import threadpool_info  # type: ignore[import-untyped]
        return [{k: d.get(k) for k in ("user_api", "internal_api", "version", "num_threads",
                                       "architecture")}
                for d in threadpool_info()]
    except Exception:
        return []
