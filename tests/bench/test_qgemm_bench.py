"""bench.qgemm: kime's INT8 and FP32 GEMMs per ModernBERT shape, and ONNX Runtime's MatMul beside
them in the peer interpreter (laya's, with onnxruntime)."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from bench import peers as peerlib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run_bench(*args: str) -> list[str]:
    r = subprocess.run([sys.executable, "-m", "bench.qgemm", "--threads", "1", "--repeat", "2",
                        "--tokens", "7", "--model", "base", *args],
                       cwd=REPO, capture_output=True, text=True, timeout=600,
                       env=peerlib.clean_env())
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.splitlines()


def shape_rows(lines: list[str]) -> list[list[str]]:
    return [[c.strip() for c in line.split("|")] for line in lines if line.startswith("base ")]


def test_qgemm_bench_times_every_base_layer_without_peers():
    lines = run_bench("--peers", "none")
    rows = shape_rows(lines)
    assert [r[0].split()[1:] for r in rows] == [
        ["Wqkv", "7", "768", "2304"], ["attn", "Wo", "7", "768", "768"],
        ["Wi", "7", "768", "2304"], ["mlp", "Wo", "7", "1152", "768"]]
    for r in rows:
        assert len(r) == 4  # no peer columns
        assert float(r[1].split()[0]) > 0 and float(r[2].split()[0]) > 0
    assert not any("ort/kime" in line for line in lines)


def test_peer_matmul_is_the_product_bench_qgemm_times(tmp_path):
    """The peer's ONNX MatMul multiplies the weights and input bench.qgemm makes for kime (same
    generator, same seeds), and its INT8 twin runs a quantized graph; then the bench prints
    ORT's columns and a ratio that is ORT INT8's time over kime's."""
    python, why = peerlib.find_peer_python(None)
    if python is None:
        pytest.skip("no peer interpreter: %s" % why)
    peer = peerlib.PeerProcess(python)
    try:
        if not peer.call("hello")["versions"].get("onnxruntime"):
            pytest.skip("no onnxruntime in %s" % python)
        K, N, M, seed = 96, 40, 5, 3
        reply = peer.call("matmul", name="t", K=K, N=N, M=M, seed=seed, dir=str(tmp_path),
                          threads=1)
        assert peer.call("matmul_run", name="t", precision="int8")["seconds"] > 0
    finally:
        peer.close()
    W = np.random.default_rng(seed).standard_normal((N, K), dtype=np.float32)
    x = np.random.default_rng([seed, M]).standard_normal((M, K), dtype=np.float32)
    want = (x[:1].astype(np.float64) @ W.T.astype(np.float64))[0, :8]
    np.testing.assert_allclose(reply["head"]["f32"], want, rtol=1e-4, atol=1e-4)
    # INT8: close to the product, not equal to it (a quantized graph really ran)
    got8 = np.asarray(reply["head"]["int8"])
    assert np.max(np.abs(got8 - want)) < 0.05 * np.max(np.abs(want))
    assert not np.array_equal(got8, np.asarray(reply["head"]["f32"]))
    assert any("Integer" in n or "Quant" in n for n in reply["nodes"])

    lines = run_bench("--peers", "auto", "--peer-python", python,
                      "--cache-dir", str(tmp_path / "cache"))
    rows = shape_rows(lines)
    assert len(rows) == 4
    for r in rows:
        assert len(r) == 7
        kime8, ort8 = float(r[1].split()[0]), float(r[4].split()[0])
        # GF/s are flop / median time, so ort/kime (a time ratio) is kime's GF/s over ORT's
        assert float(r[6]) == pytest.approx(kime8 / ort8, rel=0.02, abs=0.01)
    assert any(line.startswith("geometric mean ort/kime") for line in lines)
