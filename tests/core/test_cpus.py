"""The default thread count follows what the process may use: the affinity mask (a real one, set
on a child process) and the cgroup CPU quota (cgroup v2 and v1 files the test writes)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kime.cpus import affinity_count, cgroup_quota, cpu_budget

from ..paths import TINY


def _v2(tmp: Path, path: str, limits: dict[str, str]) -> tuple[str, str]:
    """A cgroup v2 tree under tmp: this process in `path`, `cpu.max` where `limits` says."""
    root = tmp / "cgroup"
    (root / path.lstrip("/")).mkdir(parents=True)
    for where, text in limits.items():
        (root / where.lstrip("/") / "cpu.max").write_text(text + "\n")
    proc = tmp / "proc-self-cgroup"
    proc.write_text("0::%s\n" % path)
    return str(root), str(proc)


def test_no_quota_is_the_affinity_mask(tmp_path):
    root, proc = _v2(tmp_path, "/user.slice/session", {"/user.slice/session": "max 100000"})
    budget = cpu_budget(root, proc)
    assert (budget.threads, budget.quota) == (affinity_count(), None)
    assert "no cgroup CPU quota" in budget.reason


def test_a_container_given_one_and_a_half_cpus(tmp_path):
    root, proc = _v2(tmp_path, "/kubepods/pod1/c1", {"/kubepods/pod1/c1": "150000 100000"})
    budget = cpu_budget(root, proc)
    assert budget.quota == 1.5 and budget.quota_file == str(
        Path(root) / "kubepods/pod1/c1/cpu.max")
    assert budget.threads == min(affinity_count(), 1)
    assert "1.5" in budget.reason and "cpu.max" in budget.reason


def test_the_tightest_ancestor_wins(tmp_path):
    root, proc = _v2(tmp_path, "/kubepods/pod1/c1",
                     {"/kubepods/pod1/c1": "800000 100000", "/kubepods/pod1": "300000 100000",
                      "/kubepods": "max 100000"})
    quota, where = cgroup_quota(root, proc)
    assert quota == 3.0 and where == str(Path(root) / "kubepods/pod1/cpu.max")
    assert cpu_budget(root, proc).threads == min(affinity_count(), 3)


def test_cgroup_v1_cfs_quota(tmp_path):
    folder = tmp_path / "cgroup" / "cpu,cpuacct" / "docker" / "abc"
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text("200000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "proc-self-cgroup"
    proc.write_text("5:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n")
    assert cgroup_quota(str(tmp_path / "cgroup"), str(proc))[0] == 2.0
    (folder / "cpu.cfs_quota_us").write_text("-1\n")
    assert cgroup_quota(str(tmp_path / "cgroup"), str(proc)) == (None, None)


def test_a_quota_below_one_cpu_still_runs_one_thread(tmp_path):
    root, proc = _v2(tmp_path, "/c", {"/c": "20000 100000"})
    assert cpu_budget(root, proc).threads == 1


@given(st.text(max_size=40))
def test_any_cpu_max_text_reads_without_raising(tmp_path_factory, text):
    tmp = tmp_path_factory.mktemp("cg")
    root, proc = _v2(tmp, "/c", {"/c": text.replace("\x00", "")})
    budget = cpu_budget(root, proc)
    assert 1 <= budget.threads <= affinity_count()
    assert budget.quota is None or budget.quota > 0


def test_missing_files_mean_no_quota(tmp_path):
    assert cgroup_quota(str(tmp_path / "none"), str(tmp_path / "no-proc-file")) == (None, None)


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no affinity masks here")
def test_a_real_affinity_mask_sets_the_default_threads():
    """A child pinned to one CPU (os.sched_setaffinity before exec): `kime doctor` says 1 thread
    and why, and an engine loaded with threads=0 runs 1."""
    cpu = min(os.sched_getaffinity(0))
    code = ("import json, warnings; warnings.simplefilter('ignore'); import kime; "
            "from kime.cli.doctor import doctor_report; r = doctor_report()['cpu']; "
            "e = kime.Kime(%r, device='cpu'); "
            "print(json.dumps([r['threads'], r['affinity'], r['threads_why'], e.backend.threads]))"
            % str(TINY))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert done.returncode == 0, done.stderr[-2000:]
    threads, affinity, why, engine_threads = json.loads(done.stdout.splitlines()[-1])
    assert (threads, affinity, engine_threads) == (1, 1, 1)
    assert why.startswith("1 CPU in the affinity mask")
