"""`python -m bench.parallel` still runs end to end (tiny shape, no peers, one call each), and
its parallel twin is a parallel checkpoint while the original stays sequential (the twin's files
are hard links, so rewriting its config in place would have changed both).

Speed is never asserted; this only keeps the bench from rotting.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import parallel


def test_parallel_bench_runs_without_peers(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "p.json"
    cache = tmp_path / "cache"
    rc = parallel.main(["--shape", "tiny", "--repeat", "1", "--warmup", "0", "--peers", "none",
                        "--threads", "1", "--cache-dir", str(cache), "--json", str(out)])
    assert rc == 0
    runs = json.loads(out.read_text())["runs"]
    assert sorted(runs) == ["W1/parallel", "W1/sequential", "W3/parallel", "W3/sequential"]
    assert all(run["kime"]["n"] == 1 and run["kime"]["p50"] > 0 for run in runs.values())
    original = json.loads((cache / "tiny-seed0" / "rl_agent_config.json").read_text())
    twin = json.loads((cache / "tiny-seed0-parallel" / "rl_agent_config.json").read_text())
    assert original.get("option_layout", "sequential") == "sequential"
    assert twin["option_layout"] == "parallel"
    assert {k: v for k, v in twin.items() if k != "option_layout"} == \
        {k: v for k, v in original.items() if k != "option_layout"}
    assert "parallel / sequential (ratio of medians)" in capsys.readouterr().out
