"""`python -m bench.stability` still runs end to end (tiny shape, no peers, one call each).

Speed is never asserted; this only keeps the bench from rotting, and checks that the rows it
reports are the hook's: each choice question of W2 (one, of 6 options) asked 8 times.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import stability


def test_stability_bench_runs_without_peers(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "s.json"
    rc = stability.main(["--shape", "tiny", "--questions", "w2", "--tokens", "30", "--states",
                         "3", "--repeat", "1", "--warmup", "0", "--peers", "none",
                         "--threads", "1", "--cache-dir", str(tmp_path / "cache"),
                         "--json", str(out)])
    assert rc == 0
    runs = json.loads(out.read_text())["runs"]
    assert runs["single"]["rows"] == 5 and runs["single+hook"]["rows"] == 5 + 7
    assert runs["batch"]["rows"] == 3 * 5 and runs["batch+hook"]["rows"] == 3 * (5 + 7)
    assert all(run["kime"]["n"] == 1 and run["kime"]["p50"] > 0 for run in runs.values())
    assert "the hook's cost on batch" in capsys.readouterr().out
