"""Laya's calibration surface through `kime.load`: `calibration=` at load, `load_calibration`,
`save_calibration` (atomic, Laya's payload), the binning map, `lang_temperatures` and per-call
`lang=`, each replayed against Laya 0.4.15's own record (`tests/goldens/calibration.json`), plus
the refusals and file-handling properties a golden cannot show."""
from __future__ import annotations

import json
import os
import stat
import warnings

import pytest

import kime
from kime.laya.calibration import Calibration, apply_binning_map, normalise_lang

from ..calibration_replay import CASES, GOLDENS, cases, replay

TINY = str(GOLDENS / "checkpoints" / "tiny")
EMAIL = "Hi, I was charged twice for my subscription. Please refund the duplicate payment."
QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the customer want?",
                        "criteria": ["refund", "information", "cancel"]},
             "angry": {"type": "noul", "instructions": "The customer is angry."}}


@pytest.fixture(scope="module")
def agent():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = kime.load(TINY, device="cpu", threads=1)
    yield a
    a.close()


def test_goldens_are_sizeable():
    ours = [c for c in CASES if not c["id"].startswith("long_")]
    assert len(CASES) >= 25 and len(ours) >= 15
    checkpoints = {s["checkpoint"] for c in ours for s in c["steps"] if s["op"] == "load"}
    assert checkpoints == {"tiny", "multilingual-tiny"}
    assert sum(1 for c in ours for s in c["steps"] if s["error"]) >= 20


@pytest.mark.parametrize("case", cases(long_ones=False))
def test_case(case, tmp_path):
    replay(case, tmp_path)


def test_normalise_lang():
    assert normalise_lang("FR-ca") == "fr"
    assert normalise_lang("de") == "de"
    assert normalise_lang(None) is None and normalise_lang("") is None


@pytest.mark.parametrize("lang", [5, ["fr"], 1.5])
def test_lang_not_a_string_is_refused_naming_it(agent, lang):
    # Laya fails mid-decode with AttributeError from `.split`; kime refuses up front.
    with pytest.raises(TypeError) as info:
        agent.predict(EMAIL, QUESTIONS, lang=lang)
    assert isinstance(info.value, kime.InvalidRequest)
    assert info.value.problems[0]["loc"] == ["lang"]
    assert "lang must be a language code string" in str(info.value)


@pytest.mark.parametrize("bad", ["de", ["de"], 3])
def test_lang_temperatures_not_a_mapping_is_refused(bad):
    # Laya fails on `.items()` with AttributeError; kime refuses the shape like Laya's others.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="lang_temperatures must be a mapping"):
            kime.load(TINY, device="cpu", threads=1, lang_temperatures=bad)


def test_save_is_atomic_and_keeps_the_mode(agent, tmp_path):
    path = tmp_path / "cal.json"
    path.write_text("old")
    os.chmod(path, 0o640)
    agent.save_calibration(str(path))
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
    assert json.loads(path.read_text())["version"] == 2
    assert path.read_text().endswith("}\n")
    assert [p.name for p in tmp_path.iterdir()] == ["cal.json"]  # no temporary left behind


def test_failed_save_leaves_the_old_file_and_no_temporary(agent, tmp_path, monkeypatch):
    path = tmp_path / "cal.json"
    path.write_text("old")

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("kime.laya.calibration.os.replace", broken)
    with pytest.raises(OSError, match="disk full"):
        agent.save_calibration(str(path))
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["cal.json"]


def test_save_through_a_symlink_replaces_the_target(agent, tmp_path):
    target = tmp_path / "real.json"
    target.write_text("{}")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    agent.save_calibration(str(link))
    assert link.is_symlink() and json.loads(target.read_text())["version"] == 2


def test_refused_file_changes_nothing(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = kime.load(TINY, device="cpu", threads=1)
    before = a.predict(EMAIL, QUESTIONS)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"temperature": [2, 2, 2],
                               "binning_map": {"noul:2": {"bins": 1, "values": [1.5]}}}))
    with pytest.raises(ValueError, match=r"binning_map\['noul:2'\] values must be in \[0, 1\]"):
        a.load_calibration(str(bad))
    assert a.binning_map is None and a.temperature == [1.2, 0.8, 1.1]
    assert a.predict(EMAIL, QUESTIONS) == before
    a.close()


def test_assigned_temperatures_take_effect(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = kime.load(TINY, device="cpu", threads=1)
    base = a.predict(EMAIL, QUESTIONS)["answers"]["intent"]["probabilities"]
    a.temperature = [5.0, 5.0, 5.0]
    a.temperature_by_options = {}
    soft = a.predict(EMAIL, QUESTIONS)["answers"]["intent"]["probabilities"]
    assert max(soft.values()) < max(base.values())
    a.close()


def test_binning_rule():
    table = {"noul:2": {"bins": 4, "values": [0.1, 0.2, 0.3, 0.4]}}
    assert apply_binning_map(0.0, "noul:2", table) == 0.1
    assert apply_binning_map(0.5, "noul:2", table) == 0.3
    assert apply_binning_map(1.0, "noul:2", table) == 0.4  # the top edge is the last bin
    assert apply_binning_map(0.37, "choice:2", table) == 0.37  # no entry: unchanged


def test_calibration_builds_on_the_engine_temperatures(agent):
    cal = Calibration(agent.engine, {"fr": {"temperature": [2, 2, 2]}})
    assert cal.temperatures() is agent.engine.temperatures  # nothing changed: the engine's own
    assert cal.temperatures("FR-ca").by_type == [2.0, 2.0, 2.0]
    assert cal.answer_conf("fr") is None and cal.answer_conf() is None
