"""Smoke test of `bench.scale_out` on the tiny shape with one core per setup: one `kime
serve`, one behind haproxy, and `kime serve --engine ray` (one replica), two levels of a few
requests each; every request answered, sane numbers, and the CPU charged to each setup's own
processes (the Ray replica's, or kime serve's; haproxy's only where haproxy runs)."""
from __future__ import annotations

import importlib.util
import math
import shutil

import pytest

_MISSING = [m for m in ("fastapi", "uvicorn", "ray") if importlib.util.find_spec(m) is None]


@pytest.mark.slow  # three setups of servers under load, a Ray among them
@pytest.mark.skipif(bool(_MISSING) or not shutil.which("haproxy"),
                    reason="needs kime[serve,ray] and haproxy (%s)" % ", ".join(_MISSING))
def test_scale_out_bench_tiny(capsys):
    from bench import scale_out

    res = scale_out.run_bench("tiny", cores=1, levels=[1, 2],
                              setups=["one", "haproxy", "ray-Nx1"], requests=6, time_cap=60)
    assert list(res["results"]) == ["one", "haproxy", "ray-1x1"]
    for label, rows in res["results"].items():
        assert [r["concurrency"] for r in rows] == [1, 2]
        for r in rows:
            assert r["errors"] == 0 and r["ok"] == r["sent"] == 6, (label, r["error_samples"])
            assert r["requests_per_s"] > 0 and math.isfinite(r["requests_per_s"])
            assert 0 < r["p50_ms"] <= r["p99_ms"] < 60_000
            cpu = r["cpu_ms_per_request"]  # only roles that used a clock tick (10 ms) appear
            assert label == "haproxy" or "haproxy" not in cpu
            if label == "ray-1x1":
                assert cpu["replicas"] > 0
            else:
                assert cpu["kime serve"] > 0 and "replicas" not in cpu
    text = scale_out.table("tiny", res["results"], [1, 2])
    assert len(text.splitlines()) == 2 + 6 and "| haproxy | 1 |" in text and "1.00x" in text
