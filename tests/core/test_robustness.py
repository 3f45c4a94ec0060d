"""Every input gets an answer or a clear error through the engine API and Laya's API: random
requests (tests/request_strategies.py) and Laya's per-call arguments at any value. An answer
answers every question asked; an error is a `KimeError` (`InvalidRequest` for a request) listing
problems in FastAPI's format. The same requests against a real `kime serve`:
tests/serve/test_server_robustness.py.

A few hundred examples per surface run by default; `--hypothesis-profile=long` runs 10,000.
"""
from __future__ import annotations

import json
import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kime

from .. import paths
from ..request_strategies import (BUDGET, JSON, ODD, QUESTION_OK, QUESTIONS, RUN, TEXT, WELL_FORMED,
                                  WORDS, nested, questions_answered, requests, well_formed)

TINY = str(paths.TINY)


@pytest.fixture(scope="module")
def engine() -> kime.Kime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)


@pytest.mark.slow  # hypothesis: a few hundred requests
@RUN
@given(requests())
def test_engine_answers_or_refuses_clearly(engine, request):
    try:
        response = engine.decide(request, cache=False)
    except kime.InvalidRequest as e:
        well_formed(e)
    else:
        questions_answered(request, response.answers)
        for answer in response.answers.values():
            assert all(math.isfinite(float(p)) for p in answer.probabilities)


@pytest.mark.slow  # hypothesis: a few hundred requests
@RUN
@given(st.one_of(TEXT, ODD), QUESTIONS, BUDGET, BUDGET)
def test_laya_api_answers_or_refuses_clearly(engine, state, questions, max_len, head_max_len):
    agent = kime.Agent(engine)
    try:
        result = agent.predict(state, questions, max_len=max_len, head_max_len=head_max_len)
    except kime.InvalidRequest as e:
        well_formed(e)
    else:
        questions_answered({"questions": questions}, result["answers"])
        json.dumps(result)


@pytest.mark.slow  # hypothesis: a few hundred batches
@RUN
@given(st.one_of(st.lists(st.one_of(TEXT, ODD), max_size=4), JSON), QUESTIONS)
def test_laya_batch_api_answers_or_refuses_clearly(engine, states, questions):
    agent = kime.Agent(engine)
    try:
        results = agent.predict_batch(states, questions)
    except kime.InvalidRequest as e:
        well_formed(e)
    else:
        assert len(results) == len(states)


@pytest.mark.parametrize("depth", [2000, 50_000])
def test_a_state_nested_past_the_recursion_limit_is_refused(engine, depth):
    """Regression: a state too deep for JSON serialisation escaped as a raw RecursionError."""
    request = {"state": nested(depth), "questions": {"q": {"type": "noul", "instructions": "x"}}}
    with pytest.raises(kime.InvalidRequest) as info:
        engine.decide(request)
    assert info.value.problems[0]["loc"] == ["state"]
    assert "nested too deeply" in info.value.problems[0]["msg"]


@pytest.mark.parametrize("request_", [
    {"state": "\ud800", "questions": QUESTION_OK},
    {"state": {"a": ["fine", "x\udfff"]}, "questions": QUESTION_OK},
    {"state": "ok", "questions": {"q": {"type": "noul", "instructions": "\udc00"}}},
    {"state": "ok", "questions": {"q": {"type": "choice", "instructions": "Pick",
                                        "criteria": {"a\ud834": "x"}}}},
])
def test_a_lone_surrogate_is_refused_naming_the_field(engine, request_):
    """Regression (issue 14): a lone surrogate reached the tokenizer ('TextInputSequence must be
    str', a raw TypeError)."""
    with pytest.raises(kime.InvalidRequest) as info:
        engine.decide(request_)
    assert all("unpaired surrogate" in p["msg"] for p in info.value.problems)
    assert info.value.problems[0]["loc"][0] in ("state", "questions")


@pytest.mark.parametrize("key, value", [("max_len", "64"), ("head_max_len", 1.5),
                                        ("max_len", True), ("max_len", 0),
                                        ("head_max_len", False)])
def test_a_budget_that_is_not_a_positive_int_is_refused_naming_it(engine, key, value):
    """Regression (issue 14): a string max_len raised "'<' not supported between 'int' and
    'str'". A `head_max_len` of zero or below is answered, as Laya answers it
    (tests/goldens/limits.json)."""
    agent = kime.Agent(engine)
    with pytest.raises(kime.InvalidRequest) as info:
        agent.predict("ok", QUESTION_OK, **{key: value})
    assert info.value.problems[0]["loc"] == [key] and key in info.value.problems[0]["msg"]


LANG = st.one_of(st.none(), st.sampled_from(["de", "FR-ca", "en", "", "zz", "x" * 300]), TEXT, JSON)
MIN_CONFIDENCE = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 3),
    st.dictionaries(st.one_of(st.sampled_from(["default", "choice:2", "choice:3-5", "score:6-10",
                                               "noul:2", "choice:99"]), TEXT),
                    st.one_of(st.floats(allow_nan=True), st.integers(-1, 2), JSON), max_size=4),
    JSON)
COUNT = st.one_of(st.none(), st.integers(-3, 40), JSON)


@pytest.mark.slow  # hypothesis: a few hundred batches
@RUN
@given(st.one_of(st.lists(st.one_of(WORDS, TEXT), min_size=1, max_size=3), JSON),
       st.dictionaries(WORDS, WELL_FORMED, min_size=1, max_size=3), LANG, MIN_CONFIDENCE, COUNT,
       st.one_of(st.booleans(), JSON))
def test_laya_call_arguments_answer_or_refuse_clearly(engine, states, questions, lang,
                                                      min_confidence, batch_size, sort):
    """Laya's per-call arguments (lang, min_confidence, batch_size, sort_by_length) at any value:
    an answer per state, or a KimeError naming what was wrong."""
    agent = kime.Agent(engine)
    try:
        results = agent.predict_batch(states, questions, batch_size=batch_size, lang=lang,
                                      sort_by_length=sort, min_confidence=min_confidence)
    except kime.KimeError as e:
        assert str(e)
        if isinstance(e, kime.InvalidRequest):
            well_formed(e)
    else:
        assert len(results) == len(states)
        json.dumps(results)


@pytest.mark.slow  # hypothesis: long states, many windows each
@settings(RUN, max_examples=max(60, RUN.max_examples // 50))  # a long state is many windows
@given(st.one_of(WORDS.map(lambda w: (w + " ") * 60), TEXT, JSON,  # not ODD's 120,000 chars:
                 st.integers(1, 200).map(nested)),                # hundreds of windows each
       st.dictionaries(WORDS, WELL_FORMED, min_size=1, max_size=2), COUNT, COUNT, LANG)
def test_predict_long_answers_or_refuses_clearly(engine, state, questions, window, stride, lang):
    agent = kime.Agent(engine)
    try:
        result = agent.predict_long(state, questions, window=window, stride=stride, lang=lang)
    except kime.KimeError as e:
        assert str(e)
        if isinstance(e, kime.InvalidRequest):
            well_formed(e)
    else:
        assert list(result["answers"]) == list(questions) and result["usage"]["windows"] >= 1
