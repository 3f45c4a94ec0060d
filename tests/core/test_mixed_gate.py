"""`kime gate --mixed`: the group-testing search on a controlled verdict, then the whole gate on
a checkpoint with outlier features injected in two encoder layers, where INT8 must fail in those
layers and hold in the others, end to end through `precision="mixed"` and the command line."""
from __future__ import annotations

import json
import math
import shutil
import warnings
from pathlib import Path
from typing import Any, Dict, List, Set, Tuple

import numpy as np
import pytest

import kime
from kime import cli
from kime._cpu import _bgemm
from kime.factory import bf16_missing
from kime.layer_choice import FILE_NAME, read_choice
from kime.mixed_precision import Trial, grow, layer_names, mixed_gate
from kime.precision_gate import builtin_requests
from kime.synthetic import write_checkpoint
from kime.synthetic.outliers import inject_outliers

BF16 = _bgemm.missing() is None
OUTLIER_LAYERS = (1, 2)


class Verdicts:
    """A stand-in for running a mix: it passes when no layer of `bad` runs `precision` and at
    most `most` layers do; every mix it was asked about is kept."""

    def __init__(self, bad: Set[int], most: int = 10 ** 6, precision: str = "int8"):
        self.bad, self.most, self.precision = bad, most, precision
        self.asked: List[Tuple[Tuple[str, ...], bool]] = []

    def __call__(self, layers: Tuple[str, ...], what: str) -> Trial:
        low = {i for i, p in enumerate(layers) if p == self.precision}
        ok = not (low & self.bad) and len(low) <= self.most
        self.asked.append((layers, ok))
        return Trial(layers, what, {}, 0, 0.0, 0.0, ok, 0.0)


@pytest.mark.parametrize("bad", [set(), {5}, {0, 1}, {3, 17, 18}, set(range(24))])
def test_grow_keeps_every_layer_that_holds(bad: Set[int]) -> None:
    verdict = Verdicts(bad)
    got = grow(verdict, ("f32",) * 24, range(24), "int8", 22)
    assert sorted(got) == [i for i in range(24) if i not in bad]
    # the mix returned was itself run and passed
    want = tuple("int8" if i in got else "f32" for i in range(24))
    assert (want, True) in verdict.asked or not got
    d = max(len(bad), 1)
    assert len(verdict.asked) <= 1 + 2 * d * math.ceil(math.log2(24)), len(verdict.asked)


def test_grow_stops_where_layers_fail_together() -> None:
    """Every layer holds alone but at most 9 hold together: the search keeps a passing set of
    9, not a failing set of all."""
    verdict = Verdicts(set(), most=9)
    got = grow(verdict, ("f32",) * 24, range(24), "int8", 22)
    assert len(got) == 9
    assert all(ok or sum(p == "int8" for p in layers) > 9 for layers, ok in verdict.asked)


def test_grow_adds_to_its_base() -> None:
    verdict = Verdicts({2}, precision="bf16")
    base = ("int8", "f32", "f32", "int8", "f32")
    assert grow(verdict, base, [1, 2, 4], "bf16", 4) == [1, 4]
    assert all(layers[0] == layers[3] == "int8" for layers, _ in verdict.asked)


def test_layer_names() -> None:
    assert layer_names([0, 1, 2, 5, 22, 23], 22) == "encoder 0-2, 5; head 0-1"
    assert layer_names([23], 22) == "head 1"


@pytest.fixture(scope="module")
def outliers(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, List[Dict[str, Any]]]:
    """The tiny shape with outlier features after both norms of encoder layers 1 and 2, and
    requests whose FP32 answers are clear (top two at least 0.1 apart on every question). A
    random checkpoint's near-ties flip under any perturbation, INT8's anywhere (see
    docs/precision.md), and the test is of the layers, not of near-ties."""
    root = tmp_path_factory.mktemp("mixed")
    path = write_checkpoint(root / "tiny-outliers", "tiny", seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        clean = kime.Kime(str(path), device="cpu", precision="f32", threads=2, answer_cache=0)
        reqs = builtin_requests(120, seed=1)
        before = clean.decide_batch(reqs, cache=False)
        clean.close()
        inject_outliers(path, OUTLIER_LAYERS)
        with kime.Kime(str(path), device="cpu", precision="f32", threads=2,
                       answer_cache=0) as eng:
            after = eng.decide_batch(reqs, cache=False)
    # The injection leaves FP32's function as it was.
    for a, b in zip(before, after):
        for qid, ans in a.answers.items():
            np.testing.assert_allclose(b.answers[qid].probabilities, ans.probabilities, atol=1e-4)

    def clear(resp: Any) -> bool:
        return all(float(np.diff(np.sort(a.probabilities)[-2:])[0]) >= 0.1
                   for a in resp.answers.values())
    kept = [r for r, resp in zip(reqs, after) if clear(resp)]
    assert len(kept) >= 25
    return path, kept


@pytest.mark.slow  # ten passes over the requests and the engines they load: about 8 s
def test_int8_fails_in_the_outlier_layers_and_holds_elsewhere(
        outliers: Tuple[Path, List[Dict[str, Any]]], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    src, reqs = outliers
    path = Path(shutil.copytree(src, tmp_path / "ckpt"))
    file = tmp_path / "requests.jsonl"
    file.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        code = cli.main(["gate", str(path), "--mixed", "--requests", str(file), "--threads", "2",
                         "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    choice = report["choice"]
    assert choice["encoder"] == ["int8", "bf16" if BF16 else "f32", "bf16" if BF16 else "f32",
                                 "int8"]
    assert choice["head"] == ["int8", "int8"]
    trials = {t["what"]: t for t in report["trials"]}
    # INT8 in an outlier layer alone fails, by far; the clean layers hold together
    for i in OUTLIER_LAYERS:
        t = trials["encoder %d int8" % i]
        assert not t["passed"] and t["max_prob_diff"] > 4 * report["bounds"]["int8"]
    assert all(p >= 0.999 for p in report["trials"][-1]["agreement"].values())
    assert report["written"] == str(path / FILE_NAME)
    assert read_choice(str(path), 4, 2).layers == tuple(choice["encoder"] + choice["head"])

    # precision="mixed" loads it, and answers as the gate measured: within the bound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with kime.Kime(str(path), device="cpu", precision="mixed", threads=2,
                       answer_cache=0) as mixed, \
                kime.Kime(str(path), device="cpu", precision="f32", threads=2,
                          answer_cache=0) as f32:
            got, want = mixed.decide_batch(reqs, cache=False), f32.decide_batch(reqs, cache=False)
            assert "mixed: 4 " in mixed.device
    worst = max(max(float(np.abs(a.answers[q].probabilities - b.answers[q].probabilities).max()),
                    abs(float(a.answers[q].act_probability - b.answers[q].act_probability)))
                for a, b in zip(got, want) for q in a.answers)
    assert worst == pytest.approx(report["trials"][-1]["max_prob_diff"], abs=1e-6)
    assert all(a.answers[q].probabilities.argmax() == b.answers[q].probabilities.argmax()
               for a, b in zip(got, want) for q in a.answers)


@pytest.mark.slow  # the search's passes without writing
def test_the_python_api_and_its_report(outliers: Tuple[Path, List[Dict[str, Any]]],
                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    path, reqs = outliers
    said: List[str] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        report = kime.mixed_gate(str(path), reqs, threads=1, write=False, progress=said.append,
                                 int8_deviation=1.0)
    # with no bound on the probabilities, only the argmaxes decide: the outlier layers still
    # flip answers under INT8
    assert report.written is None and not (path / FILE_NAME).exists()
    assert {report.choice.encoder[i] for i in OUTLIER_LAYERS} != {"int8"}
    assert report.choice.encoder[0] == report.choice.encoder[3] == "int8"
    text = report.format()
    assert "chosen: encoder int8 x2" in text and "encoder 1 int8" in text
    # one line for the FP32 pass, one per trial, and one more where BF16 cannot run (an AVX2 cap)
    assert said[0].startswith("running ")
    skipped = [line for line in said if line.startswith("BF16 does not run here")]
    assert len(skipped) == (bf16_missing() is not None)
    assert len(said) == 1 + len(report.trials) + len(skipped)
    assert all(t.what in line for t, line in zip(report.trials, said[1:]))


def test_bad_settings_are_refused_before_any_pass() -> None:
    for kw in ({"threshold": 0}, {"threshold": 1.5}, {"int8_deviation": -0.1},
               {"bf16_deviation": 2.0}, {"limit": 0}):
        with pytest.raises(kime.BadOption):
            mixed_gate("/nonexistent", [], **kw)
    with pytest.raises(kime.InvalidRequest, match="label"):
        mixed_gate("/nonexistent", [{"state": "x", "questions": {"q": {"type": "noul"}},
                                     "labels": {"other": True}}])


def test_cli_refuses_mixed_flags_without_mixed(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["gate", "x", "--max-int8-deviation", "0.1"]) == 2
    assert "goes with --mixed" in capsys.readouterr().err
    assert cli.main(["gate", "x", "--mixed", "--precision", "bf16"]) == 2
    assert "leave out --precision" in capsys.readouterr().err
