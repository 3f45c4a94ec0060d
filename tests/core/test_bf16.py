"""`precision="bf16"` end to end: BF16 GEMMs in the encoder and decision head (bfloat16 weights
at half the bytes, FP32 sums), everything else FP32. Its answers are close to FP32's, its bits
do not depend on the thread count or the batch, its packed weights are cached beside the FP32
ones, the gate and `kime doctor` cover it, and where the kernels cannot run (no AVX512_BF16, or
KIME_ISA capping kime below AVX-512, as the tests force it here) it is refused by name."""
from __future__ import annotations

import json
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

import kime
from kime import cli
from kime._cpu import _bgemm
from kime._cpu import weights as packed
from kime._cpu.backend import CpuBackend
from kime.backend import Device, Precision
from kime.batch import Batch
from kime.buckets import pick_bucket
from kime.checkpoint import load_checkpoint
from kime.precision_gate import builtin_requests, gate

from .test_cpu_backend import QUESTIONS, STATE, _engine, _requests
from ..golden_cases import DATA
from ..paths import GOLDENS
from ..tolerances import BF16

needs_bf16 = pytest.mark.skipif(_bgemm.missing() is not None,
                                reason="BF16 does not run here (missing: %s)" % _bgemm.missing())


def _path(name: str) -> Path:
    return GOLDENS / DATA["checkpoints"][name]["path"]


@pytest.mark.slow  # more than a second and a half (CONTRIBUTING.md's fast tier)
@needs_bf16
@pytest.mark.parametrize("name", sorted(DATA["checkpoints"]))
def test_close_to_fp32(name: str, tmp_path, monkeypatch) -> None:
    """Within the BF16 table of FP32 on every golden checkpoint, and really BF16 (not FP32)."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    f32 = _engine(_path(name), threads=2, precision="f32")
    bf16 = _engine(_path(name), threads=2, precision="bf16")
    assert bf16.device == ("cpu (%s BF16 GEMMs, BF16 attention products, FP32 softmax, norms "
                           "and heads, 2 threads)" % _bgemm.kernels())
    reqs = _requests(7, 24) + builtin_requests(30)
    agree = total = 0
    for a, b in zip(f32.decide_batch(reqs, cache=False), bf16.decide_batch(reqs, cache=False)):
        for qid, fa in a.answers.items():
            fb = b.answers[qid]
            total += 1
            agree += int(np.argmax(fa.probabilities) == np.argmax(fb.probabilities))
            np.testing.assert_allclose(fb.logits, fa.logits, **BF16.logits.kw)
            np.testing.assert_allclose(fb.probabilities, fa.probabilities, **BF16.probs.kw)
            assert abs(fb.act_probability - fa.act_probability) <= BF16.probs.atol
            assert fb.logits.tobytes() != fa.logits.tobytes()
    assert agree / total >= BF16.argmax_agreement, (agree, total)
    assert bf16.memory().weights < f32.memory().weights


@needs_bf16
def test_bits_independent_of_threads_and_batch(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    reqs = _requests(13, 16)
    two = _engine(_path("tiny"), threads=2, precision="bf16")
    one = _engine(_path("tiny"), threads=1, precision="bf16")
    together = two.decide_batch(reqs[::-1], cache=False)[::-1]
    for req, got in zip(reqs, together):
        alone = one.decide(req, cache=False)
        for qid in req["questions"]:
            assert got[qid].logits.tobytes() == alone[qid].logits.tobytes()
            assert got[qid].act_probability == alone[qid].act_probability


@needs_bf16
def test_packed_blob_has_its_own_key_and_is_reused(tmp_path, monkeypatch) -> None:
    """BF16 weights are cached under a key of their own, beside FP32's and INT8's, and the next
    load maps the file instead of packing again."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(_path("tiny")))
    backends = {p: CpuBackend(ck, 1, precision=p) for p in (Precision.F32, Precision.INT8,
                                                              Precision.BF16)}
    files = {p: b.weights_file for p, b in backends.items()}
    assert len(set(files.values())) == 3 and "-bf16-" in Path(files[Precision.BF16]).name
    again = CpuBackend(ck, 1, precision="bf16")
    assert again.weights_from == "cache" and again.weights_file == files[Precision.BF16]
    assert again.spec.bf16 and not again.spec.int8 and again.kernels == _bgemm.kernels()
    assert sorted(Path(packed.cache_dir()).glob("*.kpack")) == sorted(Path(f) for f in
                                                                       files.values())


@needs_bf16
def test_gemm_weights_take_half_the_bytes() -> None:
    """Every encoder and decision-head GEMM weight is half its FP32 panels (the golden
    checkpoints' K are even and the AVX-512 panels are 32 wide, as BF16's); every other entry
    (embedding, norms, RoPE tables, scorer, act head) is the FP32 blob's."""
    from kime._cpu import _forward, _gemm

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(_path("tiny")))
    isa = _forward.isa_detect()
    f32 = packed.load_packed(ck, isa, _forward.isa_name(isa), _gemm.pack, use_cache=False)
    bf16 = packed.load_packed(ck, isa, _forward.isa_name(isa), _gemm.pack, use_cache=False,
                              bpack=_bgemm.pack)
    assert list(f32.arrays) == list(bf16.arrays)
    halved = 0
    for name, a in f32.arrays.items():
        b = bf16.arrays[name]
        if name.startswith(("enc.", "head.")) and name.endswith(("qkv", "out", "up", "down")):
            assert b.dtype == np.uint16 and b.nbytes * 2 == a.nbytes, name
            halved += 1
        else:
            assert b.dtype == a.dtype and np.array_equal(a, b), name
    assert halved == 4 * (len(ck.graph.layers) + len(ck.graph.head))


@needs_bf16
def test_warm_plan_allocates_nothing(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    eng = _engine(_path("tiny"), threads=2, precision="bf16")
    rows = eng.rows_for({"state": STATE * 4, "questions": QUESTIONS})
    batch = Batch.pack([r.ids for r in rows], [r.markers for r in rows], [0, 1, 2])
    eng.backend.prepare(batch.tokens)
    plan = eng.backend.plans[pick_bucket(batch.tokens)]
    plan.run(batch)
    tracemalloc.start()
    try:
        plan.run(batch)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16384, peak


@needs_bf16
def test_gate_compares_bf16_with_fp32(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        report = gate(str(_path("tiny")), builtin_requests(20), threads=1, precision="bf16")
    assert report.precision == "bf16" and report.questions == 60
    assert "BF16" in report.devices["bf16"] and "FP32" in report.devices["f32"]
    assert 0 < report.mean_prob_diff <= report.max_prob_diff <= BF16.probs.atol
    assert report.agreement >= BF16.argmax_agreement
    as_dict = json.loads(json.dumps(report.to_dict()))
    assert as_dict["precision"] == "bf16"
    assert all("bf16" in d and "int8" not in d for d in as_dict["disagreements"])
    assert "bf16:" in report.format()


def test_cli_gate_takes_the_precision(capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    monkeypatch.setenv("KIME_ISA", "avx2")  # refused before any forward pass, on any CPU
    code = cli.main(["gate", str(_path("tiny")), "--precision", "bf16", "--limit", "2"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_DEVICE and "AVX512_BF16" in err and "running" not in err
    with pytest.raises(SystemExit):
        cli.main(["gate", str(_path("tiny")), "--precision", "f16"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(kime.BadOption, match="int8 or bf16"):
        gate(str(_path("tiny")), precision="f32")


def test_refused_where_the_kernels_cannot_run(capsys, tmp_path, monkeypatch) -> None:
    """KIME_ISA=avx2 caps kime below AVX-512, as a CPU without AVX512_BF16 would: the engine,
    the backend and doctor all name the missing feature, before any weight is packed."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    monkeypatch.setenv("KIME_ISA", "avx2")
    with pytest.raises(kime.Unsupported, match="AVX512_BF16") as e:
        _engine(_path("tiny"), threads=1, precision="bf16")
    assert ("KIME_ISA=avx2" in str(e.value)) == (_bgemm.missing(2) is None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(_path("tiny")))
    with pytest.raises(kime.Unsupported, match="AVX512_BF16"):
        CpuBackend(ck, 1, precision="bf16")
    assert not list(Path(tmp_path).rglob("*.kpack"))
    assert cli.main(["doctor", "--json"]) == 0
    cpu = json.loads(capsys.readouterr().out)["cpu"]
    assert cpu["bf16_kernels"] is None and "AVX512_BF16" in cpu["bf16_missing"]


def test_precision_parsing_and_devices() -> None:
    assert Precision.parse("bfloat16") is Precision.parse("BF16") is Precision.BF16
    assert Precision.BF16.on(Device("cpu")) is Precision.BF16
    with pytest.raises(kime.Unsupported, match="precision='bf16' runs on the CPU only"):
        Precision.BF16.on(Device("cuda", 0))
    with pytest.raises(kime.BadOption, match="'bf16'"):
        Precision.parse("bf8")
    with pytest.raises(kime.Unsupported, match="bf16"):
        _engine(_path("tiny"), backend="reference", threads=1, precision="bf16")


def test_doctor_reports_bf16(capsys) -> None:
    assert cli.main(["doctor", "--json"]) == 0
    cpu = json.loads(capsys.readouterr().out)["cpu"]
    if _bgemm.missing() is None:
        assert cpu["bf16_kernels"] == _bgemm.kernels() and cpu["bf16_missing"] is None
    else:
        assert cpu["bf16_kernels"] is None and "AVX512_BF16" in cpu["bf16_missing"]
    assert cli.main(["doctor"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("bf16 kernels:")]
    assert len(line) == 1 and (cpu["bf16_kernels"] or "unavailable") in line[0]
