"""bench.pool runs and reports both of its measures (speed is never asserted)."""
from __future__ import annotations

import re

import pytest

from bench import pool
from kime._cpu import _forward


def test_pool_bench_reports_idle_cpu_and_tail_sleeps(capsys: pytest.CaptureFixture[str]) -> None:
    default = _forward.pool_spin_us()
    assert pool.main(["--spin", "0,100", "--idle", "0.05", "--steps", "3", "--tail-ms", "2"]) == 0
    out = capsys.readouterr().out
    assert _forward.pool_spin_us() == default  # the bench leaves the spin as it found it
    if not _forward.pool_threaded():
        assert "one thread" in out
        return
    assert re.findall(r"spin +(\d+) us: \d+\.\d{4} s", out) == ["0", "100"], out
    tail = re.search(r"tail sleeps: (\d+) in 3 steps of 2 ms \(spin 8000 us\); the worker ran the "
                     r"short task in (\d+)", out)
    assert tail and int(tail.group(2)) <= 3, out
