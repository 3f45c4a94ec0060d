"""`python -m bench.score` still runs end to end (a few rows, one repeat, without Ray, which
tests/jobs/test_ray.py covers). Speed is never asserted; this keeps the bench from rotting."""
from __future__ import annotations

import json

import pytest

from bench import score as bench_score


@pytest.mark.slow  # the score bench end to end
def test_bench_score_runs(tmp_path, capsys):
    out = tmp_path / "score.json"
    assert bench_score.main(["--rows", "24", "--repeats", "1", "--engines", "loop,local",
                             "--batch-size", "8", "--cores", "1", "--cache-dir",
                             str(tmp_path / "ck"), "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("cpu: ")
    assert "kime score (local)" in printed and "predict_batch loop" in printed
    numbers = json.loads(out.read_text())
    assert set(numbers["medians"]) == {"loop", "local"} and numbers["rows"] == 24
    assert all(rate > 0 for rate in numbers["medians"].values())
