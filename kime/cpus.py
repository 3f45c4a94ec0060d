"""The CPUs this process may really use, and so kime's default thread count.

Not the machine's core count: a process pinned to some cores (`taskset`, `os.sched_setaffinity`,
Kubernetes' static CPU manager) has its affinity mask, and a container given a CPU quota (Docker's
`--cpus 1.5`, a Kubernetes CPU limit) has the cgroup's `cpu.max`. A thread more than the quota
allows does not add speed: the kernel throttles the whole cgroup at the end of each period, and
kime's threads, which meet at a barrier after every step, all wait for the throttled one. So the
default is the affinity mask's size, capped by the quota rounded down (never below 1), as Go's
automaxprocs does.

Read: cgroup v2 (`/proc/self/cgroup`'s `0::PATH` line, then `cpu.max` in PATH and every ancestor
under the cgroup mount: the tightest limit wins) and cgroup v1 (the `cpu` controller's
`cpu.cfs_quota_us` and `cpu.cfs_period_us`). Paths are parameters, so tests give their own files.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Tuple

CGROUP_ROOT = "/sys/fs/cgroup"
PROC_CGROUP = "/proc/self/cgroup"


@dataclass(frozen=True)
class CpuBudget:
    """What kime may use, and why: `threads` is the default thread count."""

    threads: int
    affinity: int
    """CPUs in this process's affinity mask (the machine's count where there is no mask)."""
    quota: Optional[float]
    """The cgroup CPU quota in CPUs (1.5 for `cpu.max` 150000 100000), None when unlimited."""
    quota_file: Optional[str]
    """The file the quota came from."""

    @property
    def reason(self) -> str:
        """Why `threads` is what it is, in words (`kime doctor` prints it)."""
        mask = "%d CPU%s in the affinity mask" % (self.affinity, "" if self.affinity == 1 else "s")
        if self.quota is None:
            return mask + ", no cgroup CPU quota"
        quota = "cgroup CPU quota %g (%s)" % (self.quota, self.quota_file)
        if self.threads < self.affinity:
            return "%s, capped by the %s, rounded down" % (mask, quota)
        return "%s, within the %s" % (mask, quota)


def affinity_count() -> int:
    """CPUs in this process's affinity mask, or the machine's count where there is none."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # macOS, Windows
        return max(1, os.cpu_count() or 1)


def _read(path: Path) -> Optional[str]:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _v2_limit(text: str) -> Optional[float]:
    """`cpu.max`'s "QUOTA PERIOD" in CPUs; None for "max" or a line that does not parse."""
    parts = text.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_quota(cgroup_root: str = CGROUP_ROOT,
                 proc_cgroup: str = PROC_CGROUP) -> Tuple[Optional[float], Optional[str]]:
    """The tightest CPU quota over this process's cgroup and its ancestors, in CPUs, and the file
    it came from; (None, None) when there is none or nothing can be read."""
    lines = (_read(Path(proc_cgroup)) or "").splitlines()
    root = Path(cgroup_root)
    best: Tuple[Optional[float], Optional[str]] = (None, None)
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2: one unified hierarchy
            here = root / path.lstrip("/")
            for folder in [here, *here.parents]:
                if folder != root and root not in folder.parents:
                    break
                text = _read(folder / "cpu.max")
                limit = _v2_limit(text) if text else None
                if limit is not None and (best[0] is None or limit < best[0]):
                    best = (limit, str(folder / "cpu.max"))
        elif "cpu" in controllers.split(","):  # cgroup v1: the cpu controller's own mount
            for mount in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
                folder = root / mount / path.lstrip("/")
                quota = _read(folder / "cpu.cfs_quota_us")
                period = _read(folder / "cpu.cfs_period_us")
                if quota is None or period is None:
                    continue
                limit = _v2_limit("%s %s" % (quota, period)) if quota != "-1" else None
                if limit is not None and (best[0] is None or limit < best[0]):
                    best = (limit, str(folder / "cpu.cfs_quota_us"))
                break
    return best


def cpu_budget(cgroup_root: str = CGROUP_ROOT, proc_cgroup: str = PROC_CGROUP) -> CpuBudget:
    """The affinity mask capped by the cgroup quota (rounded down, at least 1)."""
    affinity = affinity_count()
    quota, where = cgroup_quota(cgroup_root, proc_cgroup)
    threads = affinity if quota is None else max(1, min(affinity, int(quota)))
    return CpuBudget(threads=threads, affinity=affinity, quota=quota, quota_file=where)
