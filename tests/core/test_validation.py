"""Bad input: every problem listed at once, in FastAPI's 422 format, with Laya's wording, and
the engine keeps working afterwards. Exact messages per problem are checked against Laya itself
in test_golden.py; here the structure: all problems, their locations, their types."""
from __future__ import annotations

import json

import pytest

import kime
from kime.request import check_question

CHOICE = {"type": "choice", "instructions": "Which team?", "criteria": ["billing", "tech"]}


def test_every_problem_of_one_question_is_listed(agent):
    bad = {"type": "choise", "instructions": "  ", "labels": {"false": "x"}}
    with pytest.raises(kime.InvalidRequest) as info:
        agent.predict("text", {"q": bad})
    problems = info.value.problems
    assert [p["loc"] for p in problems] == [["questions", "q", "type"],
                                            ["questions", "q", "instructions"]]
    assert problems[0]["msg"] == ("question 'q': unknown type 'choise'; use one of "
                                  "['choice', 'noul', 'score']")
    assert problems[0]["input"] == "choise"
    assert "must not be empty" in problems[1]["msg"]
    assert isinstance(info.value, ValueError)
    # One message per line, so a log shows all of them.
    assert str(info.value).count("\n") == 2


def test_problems_across_questions_in_request_order(agent):
    questions = {
        "a": {"type": "score", "instructions": "x", "criteria": ["low", None]},
        "ok": CHOICE,
        "b": {"type": "choice", "instructions": "x", "criteria": ["a", "b"],
              "option_order": [0, 0]},
        "c": {"type": "noul", "instructions": "x", "criteria": {"maybe": "?"}},
        "d": {"type": "choice", "instructions": "x", "criteria": [1, 1.0, ["n"], None]},
    }
    with pytest.raises(kime.InvalidRequest) as info:
        agent.predict("text", questions)
    locs = [tuple(p["loc"]) for p in info.value.problems]
    assert locs == [("questions", "a", "criteria"), ("questions", "b", "option_order"),
                    ("questions", "c", "criteria"), ("questions", "d", "criteria"),
                    ("questions", "d", "criteria")]
    msgs = [p["msg"] for p in info.value.problems]
    assert msgs[0] == ("question 'a': score level 1 is null; give every level a description, "
                       "index 0 first")
    assert "choice label 2 is a list" in msgs[3] and "choice label 3 is null" in msgs[4]
    # The body a server sends with a 422 serialises.
    json.dumps(info.value.to_json())


def test_repeated_labels_are_reported_when_labels_are_scalars():
    problems = check_question("q", {"type": "choice", "instructions": "x",
                                    "criteria": [1, "a", 1.0, True]})
    assert [p["msg"].split(";")[0] for p in problems] == [
        "question 'q': choice label 2 (1.0) repeats label 0",
        "question 'q': choice label 3 (True) repeats label 0"]


@pytest.mark.parametrize("states, questions, locs", [
    ("one state", {"q": CHOICE}, [["states"]]),
    (["a", None, "b", None], {"q": CHOICE}, [["states", 1], ["states", 3]]),
    (["a"], [CHOICE], [["questions"]]),
    ({"state": 1}, "nope", [["states"], ["questions"]]),
])
def test_argument_errors_are_type_errors_and_all_listed(agent, states, questions, locs):
    with pytest.raises(TypeError) as info:
        agent.predict_batch(states, questions)
    assert isinstance(info.value, kime.InvalidArgument)
    assert isinstance(info.value, ValueError)
    assert [p["loc"] for p in info.value.problems] == locs


def test_empty_calls_answer_without_validating_questions(agent):
    assert agent.predict_batch([], {"q": {"type": "bogus"}}) == []
    assert agent.predict("x", {}) == {"model": "laya-rl-agent", "answers": {},
                                      "usage": {"input_tokens": 0, "output_tokens": 0}}


def test_too_long_names_every_question_that_does_not_fit(agent):
    many = {"type": "choice", "instructions": "pick",
            "criteria": {"option %d" % i: "a long description of option %d" % i for i in range(40)}}
    questions = {"fits": CHOICE, "big1": many, "big2": dict(many, instructions="again")}
    with pytest.raises(kime.TooLong) as info:
        agent.predict("state", questions, max_len=100)
    assert [p["loc"][-1] for p in info.value.problems] == ["big1", "big2"]
    assert info.value.problems[0]["msg"].startswith(
        "question 'big1': only ") and "option markers fit in max_len=100" in str(info.value)
    assert isinstance(info.value, ValueError)


def test_wire_request_lists_every_problem(engine):
    with pytest.raises(kime.InvalidArgument) as info:
        engine.decide({"questions": [], "max_len": -3, "colour": "red"})
    assert [p["loc"] for p in info.value.problems] == [["state"], ["questions"], ["max_len"],
                                                       ["colour"]]


def test_decide_batch_locates_problems_by_request(engine):
    good = {"state": "fine", "questions": {"q": CHOICE}}
    bad1 = {"state": "x", "questions": {"q": {"type": "noul"}}}
    bad2 = {"state": "y",
            "questions": {"r": {"type": "score", "instructions": "x", "criteria": []}}}
    with pytest.raises(kime.InvalidRequest) as info:
        engine.decide_batch([good, bad1, bad2])
    assert [p["loc"] for p in info.value.problems] == [[1, "questions", "q", "instructions"],
                                                       [2, "questions", "r", "criteria"]]
    lines = str(info.value).splitlines()[1:]
    assert lines[0].startswith("- request 1: question 'q'")
    assert lines[1].startswith("- request 2: question 'r'")


def test_bad_input_loses_nothing(agent):
    before = agent.predict("the same state", {"q": CHOICE})
    with pytest.raises(kime.InvalidRequest):
        agent.predict("the same state", {"q": CHOICE, "bad": {"type": "noul", "instructions": ""}})
    with pytest.raises(TypeError):
        agent.predict_batch("not a list", {"q": CHOICE})
    assert agent.predict("the same state", {"q": CHOICE}) == before


def test_unserialisable_state_is_a_clear_error(agent):
    with pytest.raises(kime.InvalidArgument) as info:
        agent.predict({"when": object()}, {"q": CHOICE})
    assert "JSON-serializable" in info.value.problems[0]["msg"]
