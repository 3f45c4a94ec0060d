"""Smoke test of `bench.load` (the HTTP load bench) on the tiny shape: kime serve only, two
concurrency levels, eight requests each, no errors and sane numbers."""
from __future__ import annotations

import importlib.util
import math

import pytest

_MISSING = [m for m in ("fastapi", "uvicorn") if importlib.util.find_spec(m) is None]


@pytest.mark.slow  # two kime serve processes under load
@pytest.mark.skipif(bool(_MISSING), reason="kime serve needs %s (pip install 'kime[serve]')"
                    % " and ".join(_MISSING))
def test_load_bench_tiny(tmp_path):
    from bench import load

    res = load.run_bench("tiny", concurrency=[1, 4], requests=8, peer="none", time_cap=60,
                         cache_dir=str(tmp_path / "cache"), merge_baseline=True,
                         log=lambda s: None)
    assert list(res["servers"]) == ["kime", "kime-1"]
    # --max-merge 1: every forward run takes exactly one request
    assert [lv["requests_per_run"] for lv in res["servers"]["kime-1"]["levels"]] == [1.0, 1.0]
    assert set(res["merge_gain"]) == {"1", "4"} and all(v > 0 for v in res["merge_gain"].values())
    levels = res["servers"]["kime"]["levels"]
    assert [lv["concurrency"] for lv in levels] == [1, 4]
    for lv in levels:
        assert lv["errors"] == 0, lv["error_samples"]
        assert lv["ok"] == lv["sent"] == 8
        assert lv["requests_per_s"] > 0 and math.isfinite(lv["requests_per_s"])
        assert lv["questions_per_s"] == pytest.approx(5 * lv["requests_per_s"])
        assert 0 < lv["p50_ms"] <= lv["p95_ms"] <= lv["p99_ms"] < 60_000
        # every request is answered by some forward run; merging can only raise this
        assert lv["runs"] is not None and lv["runs"] >= 1
        assert 1.0 <= lv["requests_per_run"] <= lv["concurrency"]
        # every state is new: the answer cache must not short-circuit a request
        assert lv["cache_hit_ratio"] in (None, 0.0)
    d = res["servers"]["kime"]["derived"]
    assert d["unloaded_p50_ms"] == levels[0]["p50_ms"]
    assert d["p99_over_unloaded_p50"] > 0
    assert d["closed_loop_mean_ms"] == pytest.approx(4e3 / levels[1]["requests_per_s"])
    text = load.format_report(res)
    assert "kime" in text and "p99 at 4" in text and "merged batches vs one request" in text
