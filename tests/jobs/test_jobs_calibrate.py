"""`kime calibrate`: labelled rows -> a calibration file in Laya's format that kime and laya
0.4.15 both load, with the numbers Laya's own fitters give on Laya's own forward pass, and no
PyTorch anywhere in kime."""
from __future__ import annotations

import importlib.util
import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import kime
from kime.jobs.calibrate import calibrate_job, target_from_expected, target_from_gold
from kime.jobs.options import EngineOptions
from kime.render import to_question

from ..paths import ORACLE

ROOT = Path(os.path.abspath(kime.__file__)).parents[1]
QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": ["refund", "question", "complaint"]},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "mood": {"type": "score", "instructions": "How upset?", "criteria": ["calm", "upset", "angry"]},
}
ROWS = 130


@pytest.fixture(scope="module")
def labeled(tmp_path_factory, tiny_path):
    """Rows whose labels follow the model's own answers 70% of the time, so the fit has a real
    optimum; a few with `gold` distributions, one label that fits no option, one bad row."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(str(tiny_path), threads=1)
    rng = random.Random(7)
    words = ["refund please", "where is my parcel", "this is outrageous", "thank you",
             "a question about my bill", "cancel it now"]
    rows = []
    for i in range(ROWS):
        state = "ticket %d: %s" % (i, rng.choice(words))
        answers = agent.predict(state, QUESTIONS)["answers"]
        follow = rng.random() < 0.7
        expected = {
            "intent": answers["intent"]["choice"] if follow else rng.choice(["refund", "question",
                                                                             "complaint"]),
            "urgent": answers["urgent"]["noul"] > 0.5 if follow else rng.random() < 0.5,
            "mood": int(round(answers["mood"]["score"])) if follow else rng.randint(0, 2),
        }
        row = {"id": i, "state": state, "expected": expected}
        if i % 13 == 0:
            row["gold"] = {"mood": {"probabilities": {"1": 0.75, "2": 0.25}}}
        rows.append(row)
    rows[5]["expected"]["intent"] = "no such label"
    path = tmp_path_factory.mktemp("labeled") / "labeled.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "not json\n", encoding="utf-8")
    qpath = path.parent / "questions.json"
    qpath.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return path, qpath


@pytest.fixture(scope="module")
def calibrated(labeled, tiny_path, tmp_path_factory):
    path, qpath = labeled
    out = tmp_path_factory.mktemp("cal") / "calibration.json"
    plot = out.parent / "reliability.png"
    # --plot needs the `plot` extra; the installed-wheel run goes without it.
    drawing = ["--plot", str(plot)] if importlib.util.find_spec("matplotlib") else []
    done = subprocess.run([sys.executable, "-m", "kime.cli", "calibrate", "-m", str(tiny_path),
                           "-q", str(qpath), "--labeled", str(path), "-o", str(out), *drawing],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out, plot, done.stdout


@pytest.mark.slow  # its fixture runs kime calibrate in a subprocess
def test_writes_laya_payload_and_report(calibrated, tiny_path):
    out, plot, stdout = calibrated
    payload = json.loads(out.read_text())
    assert list(payload)[:6] == ["version", "temperature", "temperature_by_options",
                                 "model_id_or_path", "subfolder", "config"]
    assert payload["version"] == 2 and payload["model_id_or_path"] == str(tiny_path)
    assert "temperature" not in payload["config"]
    assert all(0.5 <= t <= 5.0 for t in payload["temperature"])
    assert set(payload["abstention_thresholds"]) == {"choice:3-5", "noul:2", "score:3-5"}
    lines = stdout.splitlines()
    assert "%d labelled answers" % (3 * ROWS - 1) in lines[0]
    assert "1 invalid label" in lines[0] and "1 row not scored" in lines[0]
    table = [line.split()[0] for line in lines[1:6]]
    assert table == ["bucket", "all", "choice:3-5", "noul:2", "score:3-5"]
    assert "ECE before" in lines[1] and "ECE after" in lines[1]
    if importlib.util.find_spec("matplotlib"):
        assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # its fixture runs kime calibrate in a subprocess
def test_kime_loads_it_and_answers_with_it(calibrated, tiny_path):
    out, _, _ = calibrated
    payload = json.loads(out.read_text())
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # a file for another checkpoint would warn
        warnings.simplefilter("ignore", RuntimeWarning)
        agent = kime.load(str(tiny_path), calibration=str(out), threads=1)
    assert agent.temperature == payload["temperature"]
    assert agent.temperature_by_options == payload["temperature_by_options"]
    result = agent.predict("where is my parcel", QUESTIONS,
                           min_confidence=payload["abstention_thresholds"])
    assert set(result["answers"]) == set(QUESTIONS)
    assert all("abstention" in a for a in result["answers"].values())


@pytest.mark.slow  # Laya itself in the oracle venv, a subprocess
@pytest.mark.skipif(not ORACLE.exists(), reason="no oracle venv with laya 0.4.15 (.oracle)")
def test_laya_loads_it_and_fits_the_same_numbers(calibrated, labeled, tiny_path):
    """laya 0.4.15 loads the file, and fitting on laya's own logits (its torch forward, its
    `records_from_labeled`, its fitters) gives what kime wrote, within 1e-3."""
    out, _, _ = calibrated
    path, qpath = labeled
    script = r'''
import json, sys, warnings
warnings.simplefilter("ignore")
import laya
from laya.calibrate import (records_from_labeled, fit_temperature_map, fit_binning_map,
                            fit_abstention_thresholds)
ck, qpath, labeled, cal = sys.argv[1:5]
qs = json.load(open(qpath))
agent = laya.Agent(ck, device="cpu", calibration=cal)  # the forward ignores calibration
loaded = [agent.temperature, agent.temperature_by_options, agent.binning_map]
pairs = []
for line in open(labeled):
    try:
        row = json.loads(line)
    except ValueError:
        continue
    targets = {}
    for qid, d in qs.items():
        exp = row["expected"][qid]
        keys = [str(k) for k in (d.get("criteria") or ["false", "true"])]
        if d["type"] == "noul":
            t = [0.0, 1.0] if exp else [1.0, 0.0]
        elif d["type"] == "choice":
            if exp not in keys:
                continue
            t = [1.0 if k == exp else 0.0 for k in keys]
        else:
            t = [1.0 if i == exp else 0.0 for i in range(len(keys))]
        gold = (row.get("gold") or {}).get(qid)
        if gold:
            t = [gold["probabilities"].get(str(i), 0.0) for i in range(len(keys))]
        targets[qid] = t
    pairs.append((row["state"], {q: qs[q] for q in targets}, targets))
recs = records_from_labeled(agent, pairs)
fitted = fit_temperature_map(recs)
t, tb = fitted["temperature"], fitted["temperature_by_options"]
binning = fit_binning_map(recs, t, tb)
print(json.dumps({"loaded": loaded, "temperature": t, "temperature_by_options": tb,
                  "binning_map": binning,
                  "thresholds": fit_abstention_thresholds(recs, t, tb, binning_map=binning)}))
'''
    done = subprocess.run([str(ORACLE), "-c", script, str(tiny_path), str(qpath), str(path),
                           str(out)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    laya_said = json.loads(done.stdout.strip().splitlines()[-1])
    ours = json.loads(out.read_text())
    assert laya_said["loaded"] == [ours["temperature"], ours["temperature_by_options"],
                                   ours.get("binning_map")]
    assert ours["temperature"] == pytest.approx(laya_said["temperature"], abs=1e-3)
    assert ours["temperature_by_options"] == pytest.approx(laya_said["temperature_by_options"],
                                                           abs=1e-3)
    assert ours["abstention_thresholds"] == pytest.approx(laya_said["thresholds"], abs=1e-3)
    assert sorted(ours["binning_map"]) == sorted(laya_said["binning_map"])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_no_pytorch_involved(labeled, tiny_path, tmp_path):
    path, qpath = labeled
    assert calibrate_job(EngineOptions(model=str(tiny_path), threads=1),
                         json.loads(qpath.read_text()), str(path),
                         str(tmp_path / "cal.json"), out=open(os.devnull, "w"),
                         err=open(os.devnull, "w")) == 0
    assert "torch" not in sys.modules


def test_targets_read_labels_as_laya_does():
    choice = to_question("c", {"type": "choice", "instructions": "x", "criteria": {1: "one",
                                                                                    "b": None}})
    assert target_from_expected(choice, 1) == [1.0, 0.0]
    assert target_from_expected(choice, "1") == [1.0, 0.0]
    assert target_from_expected(choice, "b") == [0.0, 1.0]
    noul = to_question("n", {"type": "noul", "instructions": "x",
                             "labels": {"false": "nope", "true": "yep"}})
    for value in (True, 1, "yes", "TRUE", " 1", "yep"):
        assert target_from_expected(noul, value) == [0.0, 1.0]
    for value in (False, 0, "no", "false", "nope"):
        assert target_from_expected(noul, value) == [1.0, 0.0]
    score = to_question("s", {"type": "score", "instructions": "x", "criteria": ["a", "b", "c"]})
    assert target_from_expected(score, 2) == [0.0, 0.0, 1.0]
    assert target_from_expected(score, "1") == [0.0, 1.0, 0.0]
    assert np.allclose(target_from_expected(score, 0.25), [0.75, 0.25, 0.0])
    assert target_from_gold(score, {"probabilities": {"0": 1, "2": 3}}) == [0.25, 0.0, 0.75]
    assert target_from_gold(noul, {"probabilities": {}}) == [0.5, 0.5]
    for q, bad in ((choice, "c"), (noul, "maybe"), (noul, 2), (score, 3), (score, True),
                   (score, "high")):
        with pytest.raises(ValueError):
            target_from_expected(q, bad)
    with pytest.raises(ValueError):
        target_from_gold(score, {"probabilities": {"0": -1}})
