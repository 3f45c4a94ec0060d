"""Laya's `predict_long` through `kime.load`: windows, stride, the window cap and its warnings,
per-type aggregation, `answer["window"]`, `usage["windows"]`, conversation states, a state that
fits, and the refusals, replayed against Laya 0.4.15's record (`tests/goldens/calibration.json`,
which also holds the window texts Laya scored); plus what only kime promises: every window in
one engine call, in unpadded batches."""
from __future__ import annotations

import warnings

import pytest

import kime
from kime.laya import long

from ..calibration_replay import CASES, GOLDENS, cases, replay

TINY = str(GOLDENS / "checkpoints" / "tiny")
TEXT = " ".join("Sentence %d says the parcel was late and the customer is unhappy." % i
                for i in range(40))
QUESTIONS = {"angry": {"type": "noul", "instructions": "The customer is angry."},
             "intent": {"type": "choice", "instructions": "What does the customer want?",
                        "criteria": ["refund", "information", "cancel"]}}


@pytest.fixture(scope="module")
def agent():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = kime.load(TINY, device="cpu", threads=1)
    yield a
    a.close()


def test_goldens_are_sizeable():
    ours = [c for c in CASES if c["id"].startswith("long_")]
    assert len(ours) >= 15
    calls = [s for c in ours for s in c["steps"] if s["op"] == "predict_long"]
    assert len(calls) >= 40 and sum(1 for s in calls if s["error"]) >= 10


# slow: these replay many long states, a forward pass per window
SLOW = ("long_tiny_scripts", "long_crowded_questions", "long_window_capped_tiny",
        "long_lang_binning_tiny", "long_window_stride_tiny", "long_conversation_tiny")


@pytest.mark.parametrize("case", cases(long_ones=True, slow=SLOW))
def test_case(case, tmp_path):
    replay(case, tmp_path)


@pytest.mark.parametrize("field,value", [("window", "wide"), ("window", 40.0), ("stride", True),
                                         ("stride", [3]), ("batch_size", "4")])
def test_window_stride_and_batch_size_must_be_integers(agent, field, value):
    with pytest.raises(TypeError) as info:
        agent.predict_long(TEXT, QUESTIONS, **{field: value})
    assert isinstance(info.value, kime.InvalidRequest)
    assert info.value.problems[0]["loc"] == [field]


def test_aggregate_refusal_names_the_field(agent):
    with pytest.raises(ValueError) as info:
        agent.predict_long(TEXT, QUESTIONS, aggregate="max")
    assert info.value.problems[0]["loc"] == ["aggregate"]  # type: ignore[attr-defined]


@pytest.mark.slow  # a long state, many windows
def test_every_window_goes_to_the_engine_in_one_call(agent, monkeypatch):
    calls = []
    real = agent.engine.decide_batch

    def counting(reqs, *args, **kwargs):
        calls.append(len(reqs))
        return real(reqs, *args, **kwargs)

    monkeypatch.setattr(agent.engine, "decide_batch", counting)
    out = agent.predict_long(TEXT, QUESTIONS, window=40, stride=20)
    assert calls == [out["usage"]["windows"]] and out["usage"]["windows"] > 10
    calls.clear()
    chunked = agent.predict_long(TEXT, QUESTIONS, window=40, stride=20, batch_size=4)
    assert len(calls) > 1 and chunked == out  # batch_size bounds a pass, never an answer


def test_windows_cover_the_state(agent):
    p = long.plan(agent, TEXT, QUESTIONS, window=40, stride=25)
    assert p.starts[0] == 0 and p.starts[-1] + p.window >= p.state_tokens
    assert all(b - a == 25 for a, b in zip(p.starts, p.starts[1:]))


def test_a_state_that_fits_is_predict(agent):
    short = "The parcel was late."
    single = agent.predict_long(short, QUESTIONS)
    assert single["usage"].pop("windows") == 1
    assert single == agent.predict(short, QUESTIONS)
