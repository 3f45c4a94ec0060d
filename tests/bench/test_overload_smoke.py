"""Smoke tests of `bench.overload` and `bench.failover` on tiny with short phases: the benches
run end to end and report what they promise to (their numbers are never asserted: the machine
decides them)."""
from __future__ import annotations

import argparse
import importlib.util
import math
import shutil

import pytest

_MISSING = [m for m in ("fastapi", "uvicorn", "prometheus_client")
            if importlib.util.find_spec(m) is None]
pytestmark = [pytest.mark.slow,  # kime serve subprocesses under load
              pytest.mark.skipif(bool(_MISSING), reason="needs kime[serve] (%s)" % _MISSING)]


def test_overload_reports_the_burst_and_the_recovery():
    from bench import overload

    args = argparse.Namespace(model=overload.TINY, factor=5.0, rate=0.0, seconds=2.0,
                              calibrate=2.0, after=4.0, clients=4, timeout=10.0, max_queue=8,
                              threads=1)
    res = overload.run(args)
    assert res["capacity_rps"] > 0 and res["target_rps"] == pytest.approx(
        5 * res["capacity_rps"])
    assert sum(res["statuses"].values()) == sum(r["arrivals"] for r in res["per_second"])
    assert res["statuses"].get("200", 0) > 0 and res["max_in_flight"] <= 8
    assert res["recovery_s"] >= 0 and (math.isinf(res["recovery_s"]) or res["recovery_s"] < 7)
    assert all(isinstance(line, str) for line in overload.check(res))
    assert "503: p50" in overload.report(res)


@pytest.mark.skipif(not shutil.which("haproxy"), reason="needs haproxy")
def test_failover_kills_a_replica_and_the_survivor_answers():
    from bench import failover

    args = argparse.Namespace(model=failover.TINY, seconds=8.0, kill_at=3.0, clients=4,
                              timeout=30.0)
    res = failover.run(args)
    assert res["victim_exit"] == -9 and 3.0 <= res["killed_at_s"] < 4.0
    answered_after = sum(r.get("answered", 0) for r in res["per_second"]
                         if r["second"] > res["killed_at_s"] + 1)
    assert answered_after > 0 and res["requests"] == res["answered"] + len(res["lost"])
    assert "clients saw:" in failover.report(res)
