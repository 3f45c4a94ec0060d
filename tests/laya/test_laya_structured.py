"""Structured decisions, as Laya 0.4.15's `laya.structured`: JSON Schemas (enum, boolean,
integer ranges, `$ref`, descriptions, const, Optional unions) and a pydantic model, through
`agent.decide` / `agent.decide_batch` and the module's `decide` / `decide_batch` with the agent as
runner, `return_details=True`, `min_confidence`, and every `SchemaError` and argument refusal with
Laya's message, replayed from `tests/goldens/structured.json` (`tools/goldens_confidence.py`).
Then kime's own additions: every bad property listed, and pydantic never imported for a dict."""
from __future__ import annotations

import dataclasses
import subprocess
import sys
from typing import Any, Dict, List

import pytest

import kime
from kime.laya import structured
from kime.laya.structured import DecisionResult, SchemaError

from ..laya_replay import load_agents, load_cases, replay

CASES = load_cases("structured.json")


@pytest.fixture(scope="module")
def agents() -> Dict[str, Any]:
    return load_agents()


def test_goldens_are_sizeable():
    assert len(CASES) >= 25
    through_agent = [c for c in CASES if c["checkpoint"]]
    assert {c["checkpoint"] for c in through_agent} == {"tiny", "multilingual-tiny"}
    assert {c["call"] for c in through_agent} == {"decide", "decide_batch", "structured.decide",
                                                  "structured.decide_batch"}
    assert sum(1 for c in CASES if c["error"] and c["error"]["type"] == "SchemaError") >= 20


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case(agents, case):
    replay(agents, case)


def test_decision_result_has_layas_fields():
    assert [f.name for f in dataclasses.fields(DecisionResult)] == [
        "values", "confidence", "probabilities", "answers", "usage", "routing", "answer_confidence"]
    r = DecisionResult({}, {}, {}, {})
    assert r.usage is None and r.routing is None and r.answer_confidence == {}


def test_schema_error_is_a_value_error_and_takes_a_message():
    assert issubclass(SchemaError, ValueError)
    err = SchemaError("properties.x: nope")
    assert str(err) == "properties.x: nope" and err.problems[0]["loc"] == ["schema"]


def test_every_bad_property_is_listed_by_name():
    schema = {"properties": {"a": {"type": "string"}, "ok": {"type": "boolean"},
                             "b": {"type": "integer", "minimum": 0, "maximum": 20},
                             "c": {"$ref": "#/$defs/Nowhere"}}}
    with pytest.raises(SchemaError) as info:
        structured.questions_from_json_schema(schema)
    problems = info.value.problems
    assert [p["loc"] for p in problems] == [["schema", "properties", name]
                                            for name in ("a", "b", "c")]
    assert [p["msg"].split(":")[0] for p in problems] == ["properties.a", "properties.b",
                                                          "properties.c"]
    assert str(info.value).startswith("3 problems")


def test_a_bad_threshold_lists_the_schema_problems_too():
    runner = _Recorder()
    with pytest.raises(kime.InvalidRequest) as info:
        structured.decide(runner, "s", {"properties": {"a": {"type": "string"}}}, min_confidence=2)
    assert not isinstance(info.value, SchemaError)  # Laya raises the threshold's ValueError
    assert [p["loc"] for p in info.value.problems] == [["min_confidence"],
                                                       ["schema", "properties", "a"]]
    assert runner.calls == []


class _Recorder:
    """A runner answering every question with a fixed answer, keeping the calls it got."""

    def __init__(self, with_min_confidence: bool = True):
        self.calls: List[Any] = []
        self.with_min_confidence = with_min_confidence

    def _result(self, questions: Dict[str, Any]) -> Dict[str, Any]:
        answers = {}
        for qid, q in questions.items():
            if q["type"] == "noul":
                answers[qid] = {"type": "noul", "noul": 0.7, "confidence": 0.7,
                                "answer_confidence": 0.7}
            else:
                labels = (list(q["criteria"]) if q["type"] == "choice"
                          else [str(i) for i in range(len(q["criteria"]))])
                probs = {label: (0.6 if i == len(labels) - 1 else 0.4 / max(1, len(labels) - 1))
                         for i, label in enumerate(labels)}
                answers[qid] = {"type": q["type"], "probabilities": probs, "confidence": 0.3,
                                "answer_confidence": 0.6}
                if q["type"] == "choice":
                    answers[qid]["choice"] = labels[-1]
        return {"model": "laya-rl-agent", "answers": answers, "usage": {"input_tokens": 1}}

    def predict(self, state: Any, questions: Dict[str, Any], **kw: Any) -> Dict[str, Any]:
        if "min_confidence" in kw and not self.with_min_confidence:
            raise TypeError("predict() got an unexpected keyword argument 'min_confidence'")
        self.calls.append(("predict", state, kw))
        return self._result(questions)

    def predict_batch(self, states: Any, questions: Any = None, **kw: Any) -> List[Dict[str, Any]]:
        self.calls.append(("predict_batch", states, kw))
        if questions is None:  # the Router convention: one request per state
            return [self._result(r["questions"]) for r in states]
        return [self._result(questions) for _ in states]


class _Router(_Recorder):
    def route_batch(self) -> None:  # only its presence matters
        raise AssertionError


SCHEMA = {"properties": {"level": {"type": "integer", "minimum": 3, "maximum": 5},
                         "pick": {"enum": ["a", 2, None]}, "flag": {"type": "boolean"}}}


def test_values_are_projected_and_the_gate_applies_without_runner_support():
    runner = _Recorder(with_min_confidence=False)
    assert structured.decide(runner, "s", SCHEMA) == {"level": 5, "pick": None, "flag": True}
    gated = structured.decide(runner, "s", SCHEMA, min_confidence=0.65, return_details=True)
    assert gated.values == {"level": None, "pick": None, "flag": True}
    assert gated.answers["level"]["abstention"] == "abstained"
    assert gated.probabilities["flag"] == {"false": 0.3, "true": 0.7}
    assert runner.calls[-1] == ("predict", "s", {})  # retried without the keyword


def test_decide_batch_forwards_keywords_and_routes_requests():
    agent_like = _Recorder()
    structured.decide_batch(agent_like, ["a", "b"], SCHEMA, batch_size=1, lang="de")
    assert agent_like.calls == [("predict_batch", ["a", "b"], {"batch_size": 1, "lang": "de"})]
    router = _Router()
    out = structured.decide_batch(router, ["a"], SCHEMA, lang="de", model="m", batch_size=4)
    (kind, requests, kw), = router.calls
    assert kw == {"batch_size": 4} and requests[0]["lang"] == "de" and requests[0]["model"] == "m"
    assert out == [{"level": 5, "pick": None, "flag": True}]


def test_pydantic_is_not_imported_for_a_dict_schema():
    code = ("import sys, kime\n"
            "from kime.laya import structured\n"
            "structured.questions_from_json_schema({'properties': {'a': {'type': 'boolean'}}})\n"
            "print('pydantic' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


_SCHEMA = {"type": "object", "properties": {
    "department": {"enum": ["billing", "support"]},
    "urgency": {"type": "integer", "minimum": 1, "maximum": 3},
    "refund": {"type": "boolean"}}}


@pytest.mark.parametrize("bad", [
    {"refund": {"type": "noul"}},
    {"refund": {"type": "noul", "noul": float("nan")}},
    {"refund": {"type": "noul", "noul": True}},
    {"urgency": {"type": "score"}},
    {"urgency": {"type": "score", "probabilities": {"0": 0.2, "1": float("inf"), "2": 0.1}}},
    {"department": {"type": "choice", "probabilities": {"billing": 0.9}}},
])
def test_a_malformed_answer_is_refused_not_read_as_a_default(bad):
    """A reply missing its field, or with a non-finite number, must not become False, level 0
    or "None" (what reading it with a default gives, as Laya does): it is refused by name."""
    from kime.errors import InvalidRequest
    from kime.laya.structured import answers_to_json

    good = {"department": {"type": "choice", "choice": "support"},
            "urgency": {"type": "score", "probabilities": {"0": 0.1, "1": 0.7, "2": 0.2}},
            "refund": {"type": "noul", "noul": 0.8}}
    assert answers_to_json(good, _SCHEMA) == {"department": "support", "urgency": 2,
                                              "refund": True}
    with pytest.raises(InvalidRequest) as err:
        answers_to_json({**good, **bad}, _SCHEMA)
    (name,) = bad
    assert [p["loc"][:2] for p in err.value.problems] == [["answers", name]]


def test_every_malformed_answer_is_listed_at_once():
    from kime.errors import InvalidRequest
    from kime.laya.structured import answers_to_json

    with pytest.raises(InvalidRequest) as err:
        answers_to_json({"department": {}, "urgency": {"score": "x"}, "refund": {}}, _SCHEMA)
    assert sorted(p["loc"][1] for p in err.value.problems) == ["department", "refund", "urgency"]


class _Dropping(_Recorder):
    """A runner whose reply leaves out some asked questions, or every answer."""

    def __init__(self, drop: List[str], keep_answers: bool = True) -> None:
        super().__init__()
        self.drop, self.keep_answers = drop, keep_answers

    def _result(self, questions: Dict[str, Any]) -> Dict[str, Any]:
        result = super()._result(questions)
        if not self.keep_answers:
            del result["answers"]
        else:
            for qid in self.drop:
                del result["answers"][qid]
        return result


@pytest.mark.parametrize("via", ["decide", "decide_batch"])
@pytest.mark.parametrize("schema_or_questions", ["schema", "questions"])
def test_a_reply_that_drops_a_question_is_refused_not_returned_without_it(via,
                                                                           schema_or_questions):
    """Without this, `decide` came back without the dropped fields: a guard reading
    `values.get("flag")` saw None, not a refusal. Every missing question is named at once."""
    from kime.errors import InvalidRequest

    questions = structured.questions_from_json_schema(SCHEMA)
    kw = {"questions": questions} if schema_or_questions == "questions" else {"schema": SCHEMA}

    def ask(runner: Any) -> Any:
        if via == "decide":
            return structured.decide(runner, "s", **kw)
        return structured.decide_batch(runner, ["s"], **kw)[0]

    assert set(ask(_Dropping([]))) == set(questions)
    with pytest.raises(InvalidRequest) as err:
        ask(_Dropping(["flag", "level"]))
    assert sorted(p["loc"][1] for p in err.value.problems) == ["flag", "level"]
    assert all(p["msg"] == "no answer to this question" for p in err.value.problems)
    with pytest.raises(InvalidRequest, match="the result must carry an 'answers' object"):
        ask(_Dropping([], keep_answers=False))


def test_the_details_refuse_a_noul_answer_without_its_probability():
    """`return_details` reported P(true) = 0 for a noul answer without `noul` (read as 0.0)."""
    from kime.errors import InvalidRequest

    class NoProbability(_Recorder):
        def _result(self, questions: Dict[str, Any]) -> Dict[str, Any]:
            result = super()._result(questions)
            del result["answers"]["flag"]["noul"]
            return result

    questions = structured.questions_from_json_schema(SCHEMA)
    with pytest.raises(InvalidRequest) as err:
        structured.decide(NoProbability(), "s", questions=questions, return_details=True)
    assert [p["loc"] for p in err.value.problems] == [["answers", "flag", "noul"]]
