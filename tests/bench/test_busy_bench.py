"""`python -m bench.busy` runs its three settings end to end (tiny shape, kime only, two calls)
and stops its spinner; the CPU it charges to a process is that process's threads' run time.
Speed is never asserted."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import busy


@pytest.mark.slow  # two engines loaded and a spinning process: about 4 s
def test_busy_bench_runs_without_peers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "busy.json"
    status = busy.main(["--shape", "tiny", "--peers", "none", "--repeat", "2", "--gap", "0.01",
                        "--rounds", "2", "--cache-dir", str(tmp_path / "cache"),
                        "--out", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert list(report["results"]) == list(busy.SETTINGS)
    # each round's ratios, none without ORT
    assert report["rounds"] == [{s: {"f32": None, "int8": None} for s in busy.SETTINGS}] * 2
    for setting in busy.SETTINGS:
        stats = report["results"][setting]["stats"]
        assert set(stats) == {"kime", "kime-int8"}  # both precisions, no peers
        for s in stats.values():
            assert s["n"] == 4 and len(s["samples"]) == 4  # two rounds of two calls, pooled
            assert len(s["cpu_own_s"]) == 4 and s["cpu_other_s"] == []
            assert all(math.isfinite(x) and x > 0 for x in s["samples"] + [s["warmup_s"]])
            assert 0 < s["p50"] <= s["p90"] <= s["max"]
            # kime's own CPU per call: some, and at most its threads' share of the wall time
            assert 0 < s["cpu_own_p50"] <= (report["settings"]["threads"] + 1) * s["max"]
            assert s["cpu_other_p50"] is None  # no other engine
    assert report["agreement"] == {} and report["problems"] == []

    # The spinner was stopped and reaped: its pid no longer names a process.
    pid = report["spinner_pid"]
    assert isinstance(pid, int) and pid > 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    # three tables (times, CPU, each round's ratios), each a header and a row per setting
    n = 1 + len(busy.SETTINGS)
    assert len(rows) == 3 * n
    times, cpu, each = rows[1:n], rows[n + 1:2 * n], rows[2 * n + 1:]
    # no ORT: its cells and the ratio are dashes, at both precisions
    assert all(row.count("—") == 4 for row in times)
    assert all(row.count("—") == 2 and row.count(" ms") == 2 for row in cpu)
    assert rows[2 * n].count(" r1 ") == 2 and all(row.count("—") == 6 for row in each)


def test_rounds_pool_their_calls() -> None:
    """Pooled stats are those of every round's calls together, and each round's ratio is that
    round's own, with their median beside them."""
    def res(wall: list, own: list, other: list) -> dict:
        return {"stats": {"kime": busy.call_stats(wall, wall[0] * 2, own, other)},
                "other_cores": 0.25 * len(wall)}
    r1, r2 = res([0.3, 0.1, 0.2], [0.5, 0.2, 0.4], [0.01]), res([0.6, 0.5], [1.1, 0.9], [])
    got = busy.pooled([r1, r2])
    k = got["stats"]["kime"]
    assert k["samples"] == [0.3, 0.1, 0.2, 0.6, 0.5] and k["n"] == 5
    assert k["p50"] == pytest.approx(0.3) and k["warmup_s"] == pytest.approx(0.6)
    assert k["cpu_own_p50"] == pytest.approx(0.5) and k["cpu_other_p50"] == pytest.approx(0.01)
    assert got["other_cores"] == pytest.approx((0.75 + 0.5) / 2)
    report = {"rounds": [{"quiet": {"f32": 1.5, "int8": None}}, {"quiet": {"f32": 1.1}},
                         {"quiet": {"f32": 1.2}}]}
    assert busy.round_cells(report, "quiet", "") == ["1.50x", "1.10x", "1.20x", "1.20x"]
    assert busy.round_cells(report, "quiet", "-int8") == ["—", "—", "—", "—"]


# A process whose second thread spins for `SPIN_S` while its main thread sleeps, then idles.
CHILD = """
import threading, time
def spin():
    end = time.perf_counter() + %r
    while time.perf_counter() < end:
        pass
threading.Thread(target=spin).start()
time.sleep(60)
"""
SPIN_S = 0.6


def test_process_cpu_counts_every_thread() -> None:
    """The spinning thread's CPU is counted though the main thread sleeps, and an idle process
    gains none; a process that is gone has no CPU to read."""
    child = subprocess.Popen([sys.executable, "-c", CHILD % SPIN_S])
    try:
        time.sleep(0.1)  # started and spinning
        c0, t0 = busy.process_cpu_s(child.pid), time.perf_counter()
        time.sleep(0.3)
        c1, t1 = busy.process_cpu_s(child.pid), time.perf_counter()
        assert c0 is not None and c1 is not None
        # it ran, though a busy machine may give it less than a whole core
        assert 0.03 < c1 - c0 <= (t1 - t0) + 0.02
        time.sleep(SPIN_S)  # the spinning thread has ended
        c2 = busy.process_cpu_s(child.pid)
        time.sleep(0.3)
        c3 = busy.process_cpu_s(child.pid)
        assert c2 is not None and c3 is not None and 0 <= c3 - c2 < 0.02
    finally:
        child.kill()
        child.wait()
    assert busy.process_cpu_s(child.pid) is None
