"""`python -m bench.integrations` still runs end to end (tiny shape, no peers, one call each).

Speed is never asserted; this only keeps the bench from rotting.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")

from bench import integrations


def test_integrations_bench_runs_without_peers(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "i.json"
    rc = integrations.main(["--shape", "tiny", "--repeat", "2", "--warmup", "0", "--peers",
                            "none", "--threads", "1", "--cache-dir", str(tmp_path / "cache"),
                            "--json", str(out)])
    assert rc == 0
    report = json.loads(out.read_text())
    assert list(report["measurements"]) == list(integrations.MEASUREMENTS)
    for name, m in report["measurements"].items():
        assert m["kime"]["n"] == 2 and m["kime"]["p50"] > 0, name
        assert "laya" not in m
    printed = capsys.readouterr().out
    assert "langchain.router_invoke: one LayaRouter.invoke" in printed
