"""Structured decisions, as Laya 0.4.15's `laya.structured`: a JSON Schema (or a pydantic model)
becomes Laya questions (`kime.laya.schemas` plans them), a runner answers them, and the answers
come back shaped like the schema. A reply that leaves an asked question unanswered, or gives an
answer without its field or with a non-finite number, is refused, every problem at once.

A runner is anything with Laya's `predict(state, questions, **kw)` (and `predict_batch` for
`decide_batch`): a `kime.load(...)` agent, or Laya's own. Nothing here imports pydantic: a model
is read through its own `model_json_schema()` (v2) or `schema()` (v1), so pydantic is loaded only
by the caller that passes one.
"""
from __future__ import annotations

import math
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ..errors import InvalidArgument, InvalidRequest, Problem, problem
from .confidence import (MinConfidence, answer_confidence_value, apply_confidence_gate,
                         check_min_confidence, min_confidence_problems)
from .schemas import (Field, SchemaError, plan_from_json_schema, plan_problems,
                      questions_from_json_schema, questions_from_pydantic, require_pydantic,
                      schema_of)

@dataclass
class DecisionResult:
    """What `decide(..., return_details=True)` returns, field for field Laya's.

    `values` is the schema-shaped output; the others are keyed by field: `confidence` (the
    answer's own `confidence`: normalised entropy for choice and score, max(p, 1 - p) for a
    noul), `probabilities` (a noul's as `{"false", "true"}`), `answers` (the raw answers),
    `usage` and `routing` (as the runner reported them), and `answer_confidence` (max(p), the
    number the `min_confidence` gate compares; None where the answer carried none)."""

    values: Dict[str, Any]
    confidence: Dict[str, float]
    probabilities: Dict[str, Dict[str, Any]]
    answers: Dict[str, Any]
    usage: Optional[Dict[str, Any]] = None
    routing: Optional[Dict[str, Any]] = None
    answer_confidence: Dict[str, Optional[float]] = field(default_factory=dict)


# ------------------------------------------------------------------------------ answers -> values

def _project(answers: Dict[Any, Any], fields: Sequence[Field]) -> Dict[str, Any]:
    """Each field's value from its answer: a choice's enum value, a score's integer (minimum +
    the most probable level), a noul's boolean (P(true) >= 0.5), None for an answer the gate
    flagged; a field with no answer is left out, as Laya's `answers_to_json` leaves it (a
    decision refuses such a reply first, in `answered`). An answer that lacks its
    field or gives a non-finite number is refused (every such field listed at once) rather than
    read as False, level 0 or the text "None", as Laya reads it: a malformed reply must not
    become a plausible value. A choice label outside the options passes through as its text
    (Laya's golden)."""
    values: Dict[str, Any] = {}
    problems: List[Problem] = []

    def bad(name: str, key: str, msg: str, got: Any) -> None:
        problems.append(problem(["answers", name, key], msg, "value_error.answer", got))

    for f in fields:
        answer = answers.get(f.name)
        if answer is None:  # `answers_to_json` on partial answers, as Laya's (decide refused it)
            continue
        if answer.get("low_confidence"):
            values[f.name] = None
        elif f.kind == "noul":
            p = _finite(answer.get("noul"))
            if p is None:
                bad(f.name, "noul", "a noul answer needs a finite 'noul' probability",
                    answer.get("noul"))
            else:
                values[f.name] = p >= 0.5
        elif f.kind == "score":
            probs = answer.get("probabilities") or {}
            if probs:
                weights = [_finite(probs.get(str(i), probs.get(i))) for i in range(len(probs))]
                if any(w is None for w in weights):
                    bad(f.name, "probabilities", "a score answer's probabilities must be finite "
                        "numbers for levels 0..%d" % (len(probs) - 1), probs)
                    continue
                level = max(range(len(weights)), key=lambda i: weights[i] or 0.0)
            else:  # `score` is already a 0-based level index, not a field value
                raw = _finite(answer.get("score"))
                if raw is None:
                    bad(f.name, "score", "a score answer needs 'probabilities' or a finite "
                        "'score'", answer.get("score"))
                    continue
                level = int(round(raw))
            values[f.name] = int(f.minimum or 0) + level
        else:
            label = answer.get("choice")
            if label is None:
                bad(f.name, "choice", "a choice answer needs its 'choice'", label)
            else:  # a label outside the options passes through as its text, as Laya's does
                values[f.name] = next((value for lbl, value in f.options if lbl == str(label)),
                                      str(label))
    if problems:
        raise InvalidRequest(problems)
    return values


def _finite(value: Any) -> Optional[float]:
    """`value` as a finite float, or None (missing, not a number, NaN or infinite; a bool is not
    a probability)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def answers_to_json(answers: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    """Laya answers projected onto a schema's values (choice value, integer level, boolean)."""
    return _project(answers, plan_from_json_schema(schema))


def answer_to_pydantic(model: Any, answers: Dict[str, Any]) -> Any:
    """Laya answers as an instance of a pydantic model. Requires pydantic."""
    require_pydantic()
    return model(**answers_to_json(answers, schema_of(model)))


def _details(values: Dict[str, Any], answers: Dict[Any, Any],
             result: Dict[str, Any]) -> DecisionResult:
    confidence: Dict[Any, float] = {}
    answer_confidence: Dict[Any, Optional[float]] = {}
    probabilities: Dict[Any, Dict[str, Any]] = {}
    problems: List[Problem] = []
    for name, answer in answers.items():
        # no usable confidence reads as none at all: it meets no threshold (fails closed)
        confidence[name] = _finite(answer.get("confidence")) or 0.0
        answer_confidence[name] = answer_confidence_value(answer)
        if answer.get("type") == "noul":
            p = _finite(answer.get("noul"))
            if p is None:
                problems.append(problem(["answers", name, "noul"], "a noul answer needs a "
                                        "finite 'noul' probability", "value_error.answer",
                                        answer.get("noul")))
                continue
            probabilities[name] = {"false": round(1.0 - p, 4), "true": round(p, 4)}
        else:
            probabilities[name] = dict(answer.get("probabilities") or {})
    if problems:
        raise InvalidRequest(problems)
    return DecisionResult(values=values, confidence=confidence, probabilities=probabilities,
                          answers=dict(answers), usage=result.get("usage"),
                          routing=result.get("routing"), answer_confidence=answer_confidence)


# ------------------------------------------------------------------------------ decide

def _check_pair(schema: Any, questions: Any) -> None:
    if (schema is None) == (questions is None):
        raise InvalidRequest([problem(["schema"], "pass exactly one of schema= or questions=",
                                      "value_error.schema", None)])


def _prepare(schema: Any, questions: Optional[Dict[Any, Any]], min_confidence: Any
             ) -> Tuple[Optional[List[Field]], Dict[Any, Any], Optional[MinConfidence]]:
    """`min_confidence` and the schema checked (after `_check_pair`), in Laya's order and each
    stage's problems in one error: a bad `min_confidence` raises first, the schema's problems
    listed after its own; then the schema. Returns the fields, the questions and the gate."""
    fields: Optional[List[Field]] = None
    plan: List[Problem] = []
    if schema is not None:
        try:
            fields, plan = plan_problems(schema_of(schema))
        except SchemaError as exc:
            plan = exc.problems
    mc_problems = min_confidence_problems(min_confidence)
    if mc_problems:
        raise InvalidRequest(mc_problems + plan)
    if plan:
        raise SchemaError(plan)
    mc = check_min_confidence(min_confidence) if min_confidence is not None else None
    if fields is not None:
        questions = {f.name: f.question for f in fields}
    assert questions is not None
    return fields, questions, mc


def answered(result: Any, questions: Dict[Any, Any]) -> Dict[Any, Dict[str, Any]]:
    """A runner's result's `answers`, refused (every problem at once) unless it is an object
    holding an answer object for every question asked: a reply that drops a question must not
    come back as a decision without that field."""
    answers = result.get("answers") if isinstance(result, dict) else None
    if not isinstance(answers, dict):
        raise InvalidRequest([problem(["answers"], "the result must carry an 'answers' object",
                                      "value_error.answer", answers)])
    problems = [problem(["answers", qid], "no answer to this question" if qid not in answers
                        else "the answer must be an object", "value_error.answer",
                        answers.get(qid))
                for qid in questions if not isinstance(answers.get(qid), dict)]
    if problems:
        raise InvalidRequest(problems)
    return answers


def _shape(result: Any, fields: Optional[List[Field]], questions: Dict[Any, Any],
           return_details: bool) -> Any:
    answers = answered(result, questions)
    values = _project(answers, fields) if fields is not None else dict(answers)
    return _details(values, answers, result) if return_details else values


def decide(runner: Any, state: Any, schema: Any = None, *,
           questions: Optional[Dict[Any, Any]] = None, return_details: bool = False,
           min_confidence: Optional[MinConfidence] = None, **predict_kwargs: Any) -> Any:
    """Answer one state against a schema (JSON Schema dict or pydantic model) or explicit
    `questions`, through `runner.predict`; return the values (schema-shaped, or the raw answers
    for `questions`), or a `DecisionResult` with `return_details=True`.

    `min_confidence` (a float or per-bucket map) gates the answers: a field below it comes back
    None, its answer kept in the details. Other keywords (`lang=`, `max_len=`, hooks, ...) go to
    `runner.predict`; a runner whose `predict` takes no `min_confidence` is gated here instead."""
    _check_pair(schema, questions)
    fields, qs, mc = _prepare(schema, questions, min_confidence)
    if mc is not None:
        predict_kwargs["min_confidence"] = mc
    try:
        result = runner.predict(state, qs, **predict_kwargs)
    except TypeError as exc:
        if mc is None or "unexpected keyword argument 'min_confidence'" not in str(exc):
            raise
        predict_kwargs.pop("min_confidence")
        result = runner.predict(state, qs, **predict_kwargs)
    if isinstance(result, dict):
        apply_confidence_gate([result], mc)
    return _shape(result, fields, qs, return_details)


# What a Router reads off each request rather than taking as a predict_batch keyword.
_ROUTER_REQUEST_KEYS = ("model", "task", "lang", "lang_guess", "max_len", "head_max_len")


def decide_batch(runner: Any, states: Sequence[Any], schema: Any = None, *,
                 questions: Optional[Dict[Any, Any]] = None, return_details: bool = False,
                 min_confidence: Optional[MinConfidence] = None,
                 **predict_kwargs: Any) -> List[Any]:
    """`decide` over many states in one `runner.predict_batch` call (shared forward passes), one
    item per state in input order. The schema is planned once.

    An Agent-like runner gets `(states, questions, **predict_kwargs)`; a Router-like one (it has
    `route_batch`) gets one `{"state", "questions"}` request per state, with the routing pins
    and token budgets (`model`, `task`, `lang`, `lang_guess`, `max_len`, `head_max_len`) copied
    onto each. The gate is applied here, so a runner whose `predict_batch` predates
    `min_confidence` is gated the same. A runner with no `predict_batch` is refused rather than
    silently looped."""
    _check_pair(schema, questions)
    if isinstance(states, (str, bytes)) or not isinstance(states, SequenceABC):
        raise InvalidArgument([problem(["states"], "states must be a sequence of states, not %s"
                                       % type(states).__name__, "type_error.list", states)])
    fields, qs, mc = _prepare(schema, questions, min_confidence)
    predict_batch = getattr(runner, "predict_batch", None)
    if predict_batch is None:
        raise InvalidArgument([problem(["runner"], "%s has no predict_batch; loop decide() over "
                                       "the states instead" % type(runner).__name__,
                                       "type_error", None)])
    if hasattr(runner, "route_batch"):
        pins = {key: predict_kwargs.pop(key) for key in _ROUTER_REQUEST_KEYS
                if key in predict_kwargs}
        results = predict_batch([dict({"state": s, "questions": qs}, **pins) for s in states],
                                **predict_kwargs)
    else:
        results = predict_batch(list(states), qs, **predict_kwargs)
    apply_confidence_gate([r for r in results if isinstance(r, dict)], mc)
    return [_shape(r, fields, qs, return_details) for r in results]


__all__ = [
    "DecisionResult", "SchemaError", "answers_to_json", "answer_to_pydantic", "decide",
    "decide_batch", "plan_from_json_schema", "questions_from_json_schema",
    "questions_from_pydantic",
]
