"""`python -m bench.table` (kime, ONNX Runtime and OpenVINO at every precision, quiet and beside
a spinner) end to end: kime alone on the tiny shape everywhere, and with its peers where the
peer interpreter has openvino and nncf (`PEER_PYTHON -m pip install openvino nncf`; skipped
without them, as in CI). Speed is never asserted."""
from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import peers, table
from bench.busy import call_stats
from bench.stats import percentile
from kime._cpu.backend import bf16_missing

TIMES = st.floats(min_value=1e-3, max_value=10.0, allow_nan=False)


def _report(samples: dict) -> dict:
    """A report of one W1-quiet setting at FP32 with these engines' timed calls."""
    stats = {key: call_stats(xs, xs[0], [], []) for key, xs in samples.items()}
    return {"settings": {"precisions": ["f32"]},
            "results": {"W1-quiet": {"stats": stats, "other_cores": 0.0}}}


@given(st.lists(st.tuples(TIMES, TIMES, TIMES), min_size=1, max_size=25))
def test_the_paired_ratio_is_the_median_of_each_rounds_ratio_to_the_fastest_peer(rounds) -> None:
    kime, ort, ov = (list(xs) for xs in zip(*rounds))
    row = table.rows_of(_report({"kime": kime, "onnx": ort, "openvino": ov}))[0]
    best = ort if percentile(ort, 50) <= percentile(ov, 50) else ov  # the table's own p50s
    lead, name = row[4].split("x vs ")
    assert name == ("ORT" if best is ort else "OpenVINO")
    assert float(lead) == pytest.approx(statistics.median(best) / statistics.median(kime),
                                        abs=0.0051)
    assert row[5].endswith("x")
    assert float(row[5][:-1]) == pytest.approx(
        statistics.median(p / k for p, k in zip(best, kime)), abs=0.0051)


@pytest.mark.slow  # three kime engines and a spinning process: about 3 s
def test_table_runs_kime_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "table.json"
    status = table.main(["--shape", "tiny", "--peers", "none", "--repeat", "2", "--gap", "0.01",
                         "--precision", "f32,int8", "--cache-dir", str(tmp_path / "cache"),
                         "--out", str(out)])
    assert status == 0
    report = json.loads(out.read_text())
    assert list(report["results"]) == ["W1-quiet", "W3-quiet", "W1-spinner"]
    for res in report["results"].values():
        assert set(res["stats"]) == {"kime", "kime-int8"}
        for s in res["stats"].values():
            assert s["n"] == 2 and 0 < s["p50"] <= s["p90"] <= s["max"]
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 3 * 2  # the header, a row per setting and precision
    assert rows[1].startswith("| W1 FP32 |") and rows[-1].startswith("| W1 beside a spinner INT8")
    assert all(r.count("—") == 4 for r in rows[1:])  # no peer: their cells and both ratios


def _peer_with_openvino() -> str:
    python, why = peers.find_peer_python(None)
    if python is None:
        pytest.skip("no peer interpreter: %s" % why)
    probe = subprocess.run([python, "-c", "import openvino, nncf, onnxruntime"],
                           capture_output=True, text=True, env=peers.clean_env(), timeout=120)
    if probe.returncode != 0:
        pytest.skip("the peer interpreter %s lacks openvino, nncf or onnxruntime (`%s -m pip "
                    "install openvino nncf`): %s" % (python, python,
                                                     probe.stderr.strip().splitlines()[-1:]))
    return python


@pytest.mark.slow  # an ONNX export, NNCF's calibration and three compiled graphs: about 40 s
def test_openvino_runs_as_a_peer_with_its_latency_settings(tmp_path: Path) -> None:
    python = _peer_with_openvino()
    out = tmp_path / "table.json"
    status = table.main(["--shape", "tiny", "--repeat", "1", "--gap", "0", "--threads", "2",
                         "--settings", "W1-quiet", "--peer-python", python,
                         "--precision", "f32,int8,bf16", "--cache-dir", str(tmp_path / "cache"),
                         "--out", str(out)])
    report = json.loads(out.read_text())
    assert status == 0, report["problems"]
    stats = report["results"]["W1-quiet"]["stats"]
    # a CPU without BF16 kernels skips bf16, kime's and the peer's, and says why
    bf16 = bf16_missing() is None
    assert ("bf16" in report["settings"]["precisions"]) == bf16
    assert any(n.startswith("bf16 skipped: ") for n in report["notes"]) != bf16
    assert {"onnx", "onnx-int8", "openvino", "openvino-int8"} <= set(stats)
    assert ("openvino-bf16" in stats) == bf16
    # FP32 is the same model: the same answer as kime's within 1e-3 (no problem was raised)
    assert report["agreement"]["openvino"]["w1_check"] == []
    for fam, hint in (("openvino", "float32"), ("openvino-bf16", "bfloat16"),
                      ("openvino-int8", "float32")):
        if fam not in stats:
            continue
        seen = report["peers"][fam]["compiled"]["2"]
        assert seen["PERFORMANCE_HINT"] == "LATENCY" and seen["NUM_STREAMS"] == "1"
        assert seen["INFERENCE_NUM_THREADS"] == "2" and hint in seen["INFERENCE_PRECISION_HINT"]
    # NNCF really quantized the graph: its IR carries FakeQuantize ops, calibrated on the 16
    # rows of W1-W3 one at a time
    int8 = report["peers"]["openvino-int8"]
    assert int8["rows"] == 16 and "TRANSFORMER" in int8["quantizer"]
    assert Path(int8["path"]).read_text().count('type="FakeQuantize"') > 10
