"""`python -m bench.busy` runs its three settings end to end (tiny shape, kime only, two calls)
and stops its spinner. Speed is never asserted."""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from bench import busy


@pytest.mark.slow  # two engines loaded and a spinning process: about 4 s
def test_busy_bench_runs_without_peers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "busy.json"
    status = busy.main(["--shape", "tiny", "--peers", "none", "--repeat", "2", "--gap", "0.01",
                        "--cache-dir", str(tmp_path / "cache"),
                        "--out", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert list(report["results"]) == list(busy.SETTINGS)
    for setting in busy.SETTINGS:
        stats = report["results"][setting]["stats"]
        assert set(stats) == {"kime", "kime-int8"}  # both precisions, no peers
        for s in stats.values():
            assert s["n"] == 2 and len(s["samples"]) == 2
            assert all(math.isfinite(x) and x > 0 for x in s["samples"] + [s["warmup_s"]])
            assert 0 < s["p50"] <= s["p90"] <= s["max"]
    assert report["agreement"] == {} and report["problems"] == []

    # The spinner was stopped and reaped: its pid no longer names a process.
    pid = report["spinner_pid"]
    assert isinstance(pid, int) and pid > 0
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)

    text = capsys.readouterr().out
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(busy.SETTINGS)  # the header and a row per setting
    # no ORT: its cell and the ratio are dashes, at both precisions
    assert all(row.count("—") == 4 for row in rows[1:])
