"""Random requests for the robustness tests of every surface (tests/core/test_robustness.py: the
engine API and Laya's; tests/serve/test_server_robustness.py: a real `kime serve`): nested JSON,
wrong types, lone surrogates, NUL, NaN and infinity, huge numbers, deep nesting, huge strings,
mostly well-formed questions so that most requests reach the tokenizer and the model; and what
every refusal must look like."""
from __future__ import annotations

import json
from typing import Any, Dict

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

import kime

TEXT = st.one_of(
    st.text(st.characters(categories=("L", "N", "P", "S", "Z", "Cc", "Cs")), max_size=24),
    st.sampled_from(["", " ", "\x00", "\ud800", "\udfff x", "[MASK]", "<mask>", "true", "false",
                     "choice", "score", "noul", "é" * 300]),
)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                   st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=10)


def nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


# Depths past the interpreter's recursion limit are tested on their own below: hypothesis cannot
# print such a value when it reports a failure.
ODD = st.one_of(JSON, st.integers(1, 600).map(nested), st.just("x" * 120_000))
CRITERIA = st.one_of(
    st.lists(st.one_of(TEXT, st.integers(), st.none(), JSON), max_size=6),
    st.dictionaries(TEXT, st.one_of(TEXT, st.none(), JSON), max_size=6),
    JSON,
)
WORDS = st.text(st.characters(categories=("L", "N", "Zs", "Cs")), min_size=1, max_size=16)
# Mostly well-formed questions, so most requests reach the tokenizer and the model with odd text.
WELL_FORMED = st.one_of(
    st.fixed_dictionaries({"type": st.just("choice"), "instructions": WORDS,
                           "criteria": st.one_of(
                               st.lists(WORDS, min_size=1, max_size=6, unique=True),
                               st.dictionaries(WORDS, st.one_of(WORDS, st.none()), min_size=1,
                                               max_size=6))}),
    st.fixed_dictionaries({"type": st.just("score"), "instructions": WORDS,
                           "criteria": st.lists(WORDS, min_size=1, max_size=6)}),
    st.fixed_dictionaries({"type": st.just("noul"), "instructions": WORDS},
                          optional={"criteria": st.fixed_dictionaries({"true": WORDS}),
                                    "labels": st.fixed_dictionaries({"false": WORDS,
                                                                     "true": WORDS})}),
)
QUESTION = st.one_of(
    WELL_FORMED, WELL_FORMED, WELL_FORMED,
    st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(["choice", "score", "noul"]), JSON),
         "instructions": st.one_of(TEXT, JSON)},
        optional={"criteria": CRITERIA, "labels": st.one_of(JSON, st.fixed_dictionaries(
                      {"false": TEXT, "true": TEXT})),
                  "option_order": st.one_of(st.lists(st.integers(-2, 7), max_size=7), JSON)}),
    JSON,
)
QUESTIONS = st.one_of(
    st.dictionaries(st.one_of(WORDS, TEXT, st.integers(-3, 3)), QUESTION, min_size=0, max_size=4),
    st.dictionaries(WORDS, QUESTION, min_size=0, max_size=4),
    JSON,
)
BUDGET = st.one_of(st.none(), st.integers(-3, 3000), JSON)


@st.composite
def requests(draw: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"state": draw(st.one_of(WORDS, TEXT, ODD)),
                            "questions": draw(QUESTIONS)}
    for key in ("max_len", "head_max_len"):
        if draw(st.booleans()):
            body[key] = draw(BUDGET)
    if draw(st.integers(0, 9)) == 0:
        body[draw(TEXT)] = draw(SCALAR)  # an unknown field
    return body


RUN = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large,
                                                     HealthCheck.function_scoped_fixture])


QUESTION_OK = {"q": {"type": "noul", "instructions": "Is it spam?"}}


def well_formed(error: kime.InvalidRequest) -> None:
    """A refusal lists its problems in FastAPI's format, and its 422 body serialises."""
    assert error.problems, "an error lists its problems"
    for p in error.problems:
        assert set(p) == {"loc", "msg", "type", "input"} and p["msg"]
    json.dumps(error.to_json())  # the 422 body serialises, whatever the input held


def questions_answered(request: Dict[str, Any], answers: Dict[Any, Any]) -> None:
    """An answer answers every question asked, in the order asked."""
    assert list(answers) == list(request["questions"])
