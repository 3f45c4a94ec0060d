"""The precision contract (docs/precision.md): on the same requests and checkpoint, kime's `bf16`
moves Laya 0.4.15's FP32 answers no further than Laya's own CPU autocast does, and its `int8` no
further than ONNX Runtime's `quantize_dynamic` INT8 does, in the returned probabilities and in
the raw logits, and flips no label the peer does not flip.

The peers' numbers are goldens (`tests/goldens/precision.json`, recorded in the oracle
environment by `tools/goldens_precision.py`), so the contract holds in CI, which has no oracle:
the goldens' checkpoints every run, the `base` shape among the slow tests. Where the oracle is
here (`.oracle` with laya, torch and onnxruntime: `tools/oracle-requirements.txt`), the last test
measures the peers live on `tiny` and holds kime to those numbers too.
"""
from __future__ import annotations

import hashlib
import json
import subprocess
import warnings
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np
import pytest

import kime
from kime._cpu.backend import bf16_missing
from kime.render import QTYPES
from kime.request import Request
from kime.synthetic import write_checkpoint

from ..contract import deviation, within
from ..golden_cases import assert_same
from ..paths import GOLDENS, ORACLE, ROOT
from ..tolerances import FP32

GOLDEN = json.loads((GOLDENS / "precision.json").read_text(encoding="utf-8"))
MODES = {"bf16": "laya-amp-bf16", "int8": "ort-int8"}
"""kime's precision -> the peer whose deviation bounds it."""


def _checkpoint(name: str, scratch: Optional[Path] = None) -> Path:
    info = GOLDEN["checkpoints"][name]
    if "path" in info:
        return ROOT / info["path"]
    try:
        from bench.workloads import cached_checkpoint  # the bench's cache: written once, reused
        path = Path(cached_checkpoint(info["shape"], seed=info["seed"]))
    except ImportError:  # tests/ copied beside an installed wheel (tools/test_wheel.sh): no bench/
        assert scratch is not None, "a generated checkpoint needs a scratch directory"
        path = scratch / ("%s-seed%d" % (info["shape"], info["seed"]))
        if not (path / "model.safetensors").exists():
            write_checkpoint(path, shape=info["shape"], seed=info["seed"])
    digest = hashlib.sha256((path / "model.safetensors").read_bytes()).hexdigest()
    assert digest == info["model_sha256"], (
        "kime.synthetic now writes other %s weights than the goldens were recorded on: "
        "re-record them with tools/goldens_precision.py" % name)
    return path


def _answer(agent: kime.Agent, state: str, questions: Dict[str, Any]
            ) -> Tuple[Dict[str, Any], Dict[str, List[float]]]:
    """kime's result dict and its raw logits by question id, in Laya's option layout."""
    result = agent.predict(state, questions)
    rows = agent.engine.rows_for(Request(state=state, questions=questions))
    outputs = agent.engine.run_rows(rows, [QTYPES[q["type"]] for q in questions.values()],
                                    cache=False)
    return result, {qid: [float(x) for x in logits]
                    for qid, (logits, _) in zip(questions, outputs)}


def _deviations(name: str, precision: str, scratch: Optional[Path] = None
                ) -> List[Tuple[Mapping[str, Any], Dict[str, Any]]]:
    """(case, kime's deviation) for each of the checkpoint's recorded workloads."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(str(_checkpoint(name, scratch)), device="cpu", precision=precision,
                          threads=2, answer_cache=0)
    out = []
    with agent:
        for case in (c for c in GOLDEN["cases"] if c["checkpoint"] == name):
            fp32 = case["fp32"]
            result, logits = _answer(agent, case["state"], case["questions"])
            out.append((case, deviation(fp32["result"], fp32["logits"], result, logits)))
    return out


def _check(name: str, precision: str, scratch: Optional[Path] = None) -> None:
    if precision == "bf16" and bf16_missing():
        pytest.skip("BF16 does not run here: %s" % bf16_missing())
    cases = _deviations(name, precision, scratch)
    problems = within([ours for _, ours in cases],
                      [case["peers"][MODES[precision]]["deviation"] for case, _ in cases])
    assert not problems, "kime %s leaves the contract on %s (%s):\n  %s" % (
        precision, name, ", ".join(c["workload"] for c, _ in cases), "\n  ".join(problems))


def _scratch(factory: pytest.TempPathFactory) -> Path:
    """One directory for the session's generated checkpoints, where bench's cache is absent."""
    path = factory.getbasetemp() / "precision-checkpoints"
    path.mkdir(exist_ok=True)
    return path


FAST = [n for n, info in GOLDEN["checkpoints"].items() if "path" in info]
SLOW = [n for n in GOLDEN["checkpoints"] if n not in FAST]


def test_goldens_cover_the_contract():
    """Every recorded checkpoint has W1, W2 and W3, each with both peers' deviations."""
    assert set(GOLDEN["systems"]) == set(MODES.values())
    assert {"tiny", "multilingual-tiny", "base"} <= set(GOLDEN["checkpoints"])
    for name in GOLDEN["checkpoints"]:
        cases = [c for c in GOLDEN["cases"] if c["checkpoint"] == name]
        assert [c["workload"] for c in cases] == ["W1", "W2", "W3"], name
        for case in cases:
            assert set(case["peers"]) == set(MODES.values())
            assert list(case["fp32"]["logits"]) == list(case["questions"])


@pytest.mark.parametrize("name", FAST)
def test_fp32_is_laya(name: str):
    """The recorded reference is Laya's FP32 on this very checkpoint: kime's FP32 gives it
    (the golden parity bounds), so the deviations below are measured from the right place."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(str(_checkpoint(name)), device="cpu", threads=2, answer_cache=0)
    with agent:
        for case in (c for c in GOLDEN["cases"] if c["checkpoint"] == name):
            result, logits = _answer(agent, case["state"], case["questions"])
            assert_same(result, case["fp32"]["result"])
            for qid, row in case["fp32"]["logits"].items():
                np.testing.assert_allclose(logits[qid], row, **FP32.logits.kw)


@pytest.mark.parametrize("precision", sorted(MODES))
@pytest.mark.parametrize("name", FAST)
def test_within_the_peers(name: str, precision: str):
    _check(name, precision)


@pytest.mark.slow  # a ModernBERT-base-shaped checkpoint: written once (bench's cache), 3 s a mode
@pytest.mark.parametrize("precision", sorted(MODES))
@pytest.mark.parametrize("name", SLOW)
def test_within_the_peers_on_the_base_shape(name: str, precision: str,
                                           tmp_path_factory: pytest.TempPathFactory):
    _check(name, precision, _scratch(tmp_path_factory))


def test_a_deviation_beyond_the_peer_is_caught():
    """The check can fail: FP32's own answers pass, a moved logit or an extra flip does not."""
    case = next(c for c in GOLDEN["cases"] if c["checkpoint"] == "tiny" and c["workload"] == "W3")
    fp32 = case["fp32"]
    bound = [case["peers"]["laya-amp-bf16"]["deviation"]]
    assert within([deviation(fp32["result"], fp32["logits"], fp32["result"], fp32["logits"])],
                  bound) == []
    moved = {q: list(v) for q, v in fp32["logits"].items()}
    qid = next(iter(moved))
    top = int(np.argmax(moved[qid]))
    moved[qid][top] -= 10.0  # another option is now on top
    problems = within([deviation(fp32["result"], fp32["logits"], fp32["result"], moved)], bound)
    assert any(p.startswith("logits") for p in problems)
    assert any("flips" in p for p in problems) == (qid not in bound[0]["flips"])


@pytest.mark.slow  # Laya, torch and ONNX Runtime in the oracle environment: about 20 s
@pytest.mark.skipif(not ORACLE.exists(), reason="no oracle environment (.oracle) here")
def test_within_the_live_peers(tmp_path: Path):
    """The peers measured now, in the oracle, on `tiny`: kime stays within them too."""
    probe = subprocess.run([str(ORACLE), "-c", "import laya, torch, onnxruntime, onnx"],
                           capture_output=True)
    if probe.returncode:
        pytest.skip("the oracle lacks onnxruntime or onnx (tools/oracle-requirements.txt)")
    out = tmp_path / "precision.json"
    done = subprocess.run([str(ORACLE), str(ROOT / "tools" / "goldens_precision.py"),
                           "--checkpoints", "tiny", "--out", str(out),
                           "--cache-dir", str(tmp_path / "cache")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    live = {c["workload"]: c for c in json.loads(out.read_text(encoding="utf-8"))["cases"]}
    for precision, peer in MODES.items():
        if precision == "bf16" and bf16_missing():
            continue
        cases = _deviations("tiny", precision)
        assert [live[c["workload"]]["state"] for c, _ in cases] == [c["state"] for c, _ in cases]
        assert within([ours for _, ours in cases],
                      [live[c["workload"]]["peers"][peer]["deviation"] for c, _ in cases]) == []
