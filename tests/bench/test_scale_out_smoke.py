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
            # only roles that used a clock tick (10 ms) appear: on the tiny model a role may use
            # none, so which roles appear is not asserted, only that none is charged wrongly
            # (test_roles_are_read_from_argv checks how processes are attributed)
            cpu = r["cpu_ms_per_request"]
            assert label == "haproxy" or "haproxy" not in cpu
            assert label == "ray-1x1" or "replicas" not in cpu
            assert all(v > 0 for v in cpu.values()), cpu
    text = scale_out.table("tiny", res["results"], [1, 2])
    assert len(text.splitlines()) == 2 + 6 and "| haproxy | 1 |" in text and "1.00x" in text


def test_roles_are_read_from_argv():
    """Which process a CPU tick is charged to: Ray's titles, the binaries, `python -m` modules."""
    from bench.scale_out import role_of

    assert role_of(["/venv/bin/python", "-m", "kime.cli", "serve", "--port", "1"]) == "kime serve"
    assert role_of(["python3", "-m", "bench.load", "--url", "x"]) == "clients"
    assert role_of(["ray::ServeReplica:kime:KimeServe.handle"]) == "replicas"
    assert role_of(["ray::ServeController"]) == "serve controller"
    assert role_of(["/usr/sbin/haproxy", "-f", "cfg"]) == "haproxy"
    assert role_of(["/x/raylet", "--a"]) == "ray system"
    assert role_of(["python", "/site/ray/dashboard/agent.py"]) == "ray system"
    assert role_of(["python", "-m", "http.server"]) is None and role_of([]) is None
