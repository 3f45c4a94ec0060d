"""The bench still builds its workloads and runs end to end (tiny shape, no peers, one repeat).

Speed is never asserted; this only keeps `python -m bench` from rotting.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any, Dict

import pytest

from bench import run as bench_run
from bench.stats import compare_results, percentile, w1_agrees
from bench.workloads import (WORKLOAD_NAMES, build_workloads, cached_checkpoint, exact_tokens_text,
                             source_text, tokenizer_encoder)


@pytest.fixture(scope="module")
def bench_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    return cached_checkpoint("tiny", str(tmp_path_factory.mktemp("bench-cache")))


def test_checkpoint_is_cached(bench_checkpoint: str) -> None:
    again = cached_checkpoint("tiny", str(Path(bench_checkpoint).parent))
    assert again == bench_checkpoint
    assert (Path(bench_checkpoint) / "model.safetensors").is_file()


def test_exact_token_lengths(bench_checkpoint: str) -> None:
    encode = tokenizer_encoder(bench_checkpoint)
    for n in (1, 17, 96, 300):
        assert len(encode(exact_tokens_text(encode, source_text(n), n))) == n


def test_workloads_match_their_definitions(bench_checkpoint: str) -> None:
    import kime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        engine = kime.Kime(bench_checkpoint, device="cpu", precision="f32", threads=1)
    ws = {w.name: w for w in build_workloads(bench_checkpoint, engine)}
    assert list(ws) == list(WORKLOAD_NAMES)
    max_len = engine.max_row_tokens
    assert [len(ws[n].questions) for n in WORKLOAD_NAMES] == [1, 5, 10, 50, 5]
    assert ws["W1"].state_tokens == 96 and ws["W2"].state_tokens == 300
    assert ws["W3"].state_tokens == max_len and ws["W3"].states == ws["W4"].states
    assert set(ws["W3"].row_tokens) == {max_len} and set(ws["W4"].row_tokens) == {max_len}
    assert ws["W9"].kind == "predict_batch" and len(set(ws["W9"].states)) == 16
    assert ws["W9"].rows == 80
    kinds = [q["type"] for q in ws["W2"].questions.values()]
    assert sorted(kinds) == ["choice", "noul", "noul", "score", "score"]


@pytest.mark.slow  # the bench end to end
def test_bench_runs_without_peers(bench_checkpoint: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report.json"
    # --quick: one startup probe and a warm-up on W1 only; every workload still runs once, in
    # FP32 and INT8 side by side.
    status = bench_run.main(["--shape", "tiny", "--peers", "none", "--quick", "--repeat", "1",
                             "--precision", "f32,int8",
                             "--workloads", ",".join(WORKLOAD_NAMES),
                             "--cache-dir", str(Path(bench_checkpoint).parent), "--out", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert [w["name"] for w in report["workloads"]] == list(WORKLOAD_NAMES)
    for w in report["workloads"]:
        assert w["runs"] == 1 and w["stats"]["kime"]["n"] == 1
        assert w["stats"]["kime"]["p50"] > 0 and w["stats"]["kime-int8"]["p50"] > 0
        ratio = w["stats"]["kime"]["p50"] / w["stats"]["kime-int8"]["p50"]
        assert w["speedup"]["kime-int8"]["kime"] == pytest.approx(ratio)
        assert w["agreement"]["kime-int8"]["max_abs"] > 0  # INT8 really ran, and was compared
    assert report["workloads"][-1]["questions_per_s"]["kime-int8"] > 0
    assert "INT8" in report["kime"]["others"]["kime-int8"]["device"]
    for fam in ("kime", "kime-int8"):
        startup = report["startup"][fam]
        assert startup["load_s"] >= 0 and startup["rss_w3_kb"] >= startup["rss_load_kb"] > 0
    text = capsys.readouterr().out
    for name in WORKLOAD_NAMES:
        assert "\n%s  " % name in text
    assert "Startup in a new process" in text and "kime-int8 vs kime" in text


def test_floor_runs(bench_checkpoint: str, capsys: pytest.CaptureFixture[str]) -> None:
    from bench import floor

    assert floor.main(["--shape", "tiny", "--precision", "f32,int8", "--repeat", "2",
                       "--cache-dir", str(Path(bench_checkpoint).parent)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("|")[0].strip(): [c.strip() for c in line.split("|")]
            for line in out.splitlines() if line.count("|") == 8}
    attention = {m.group(1): [float(g) for g in m.groups()[1:]] for m in re.finditer(
        r"attention alone, (\w+) products: (\d+) calls \((\d+) global, (\d+) local.*?, "
        r"([\d.]+) ms", out)}
    # FP32's products for f32, BF16's for int8 (the precision contract)
    assert sorted(attention) == ["BF16", "F32"], out
    for prec, products in (("f32", "F32"), ("int8", "BF16")):
        calls, glob, local, attn_ms = attention[products]
        # tiny: 4 encoder layers (global every third) and the decision head's first layer
        assert (calls, glob, local) == (5, 3, 2) and attn_ms > 0
        w1, floor_ms, ratio, both_ms, both, paired = (
            float(rows[prec][i].split()[0].rstrip("x")) for i in (1, 2, 3, 5, 6, 7))
        assert w1 > 0 and floor_ms > 0 and ratio == pytest.approx(w1 / floor_ms, rel=0.03, abs=0.01)
        assert both_ms == pytest.approx(floor_ms + attn_ms, abs=0.02)
        assert both == pytest.approx(w1 / both_ms, rel=0.03, abs=0.01)
        # each round's W1 over that round's kernels, which take at least their best times: so
        # the median of the rounds' ratios is at most the median W1 over the best (2 places)
        assert 0 < paired <= both + 0.01


def test_stats_helpers() -> None:
    assert percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert percentile([1.0, 2.0], 95) == pytest.approx(1.95)
    a: Dict[str, Any] = {"answers": {"q": {"type": "choice", "choice": "x",
                                           "probabilities": {"x": 0.6, "y": 0.4}}},
                         "usage": {"input_tokens": 10}}
    b: Dict[str, Any] = {"answers": {"q": {"type": "choice", "choice": "x",
                                           "probabilities": {"x": 0.6004, "y": 0.3996}}},
                         "usage": {"input_tokens": 10}}
    cmp = compare_results(a, b)
    assert cmp["max_abs"] == pytest.approx(4e-4) and not cmp["mismatches"] and not cmp["layout"]
    assert w1_agrees(a, b) == []
    b["answers"]["q"]["choice"] = "y"
    assert w1_agrees(a, b) and compare_results(a, b)["mismatches"]


@pytest.mark.slow
def test_interpreters_bench_runs_and_compares_answers(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """bench.interpreters end to end with this interpreter twice: two workers, one round, the
    answers compared (they must agree, so the run exits 0) and a row per interpreter."""
    import sys

    from bench import interpreters

    rc = interpreters.main(["--python", "a=" + sys.executable, "--python", "b=" + sys.executable,
                            "--shape", "tiny", "--rounds", "1", "--gap", "0", "--threads", "1",
                            "--cache-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "answers: identical on every interpreter" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("a ", "b "))]
    assert [row[0] for row in rows] == ["a", "b"], out
    # paired: each round's call over the first interpreter's; the first's is its own, so 1
    assert rows[0][-1] == "1.000", out
    assert float(rows[1][-1]) > 0, out
