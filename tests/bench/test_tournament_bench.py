"""`python -m bench.tournament` still runs end to end (tiny shape, no peers, one call).

Speed is never asserted; this only keeps the bench from rotting.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from bench import tournament


def test_tournament_bench_runs_without_peers(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "t.json"
    labels, group = 40, 8
    rc = tournament.main(["--shape", "tiny", "--labels", str(labels), "--group", str(group),
                          "--repeat", "1", "--warmup", "0", "--peers", "none", "--threads", "1",
                          "--cache-dir", str(tmp_path / "cache"), "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    # 40 labels in groups of at most 8: 5 groups, whose 5 winners fit one final.
    assert report["rounds"] == 1 and report["finalists"] == math.ceil(labels / group)
    assert report["kime"]["n"] == 1 and report["kime"]["p50"] > 0
    assert "predict_tournament: %d labels" % labels in capsys.readouterr().out


def test_labels_are_distinct_and_sized() -> None:
    for n in (1, 77, 120, 300):
        names = tournament.labels(n)
        assert len(names) == n and len(set(names)) == n
