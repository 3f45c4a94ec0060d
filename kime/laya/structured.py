"""Structured decisions, as Laya 0.4.15's `laya.structured`: a JSON Schema (or a pydantic model)
becomes Laya questions, a runner answers them, and the answers come back shaped like the schema.

The mapping is Laya's documented subset. Each property of a top-level object is one question:
`enum` / `const` -> choice (an enum of exactly the two booleans -> noul), `boolean` -> noul,
`integer` / `number` with integer `minimum` and `maximum` -> score (at most 10 levels), the
property's `description` -> the question's instructions. Local `$ref`s are inlined, a one-item
`allOf` and an `Optional[...]` union are unwrapped. Anything with no fixed option set (free
strings, arrays, nested objects) raises `SchemaError`, naming the property.

A runner is anything with Laya's `predict(state, questions, **kw)` (and `predict_batch` for
`decide_batch`): a `kime.load(...)` agent, or Laya's own. Nothing here imports pydantic: a model
is read through its own `model_json_schema()` (v2) or `schema()` (v1), so pydantic is loaded only
by the caller that passes one.
"""
from __future__ import annotations

import math
from collections.abc import Sequence as SequenceABC
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import InvalidArgument, InvalidRequest, Problem, problem
from .confidence import (MinConfidence, answer_confidence_value, apply_confidence_gate,
                         check_min_confidence, min_confidence_problems)

MAX_PROPERTIES = 32
MAX_OPTIONS = 32
MAX_SCORE_LEVELS = 10


class SchemaError(InvalidRequest):
    """A schema that cannot be asked as Laya questions. A `ValueError`, as Laya's is; each
    problem's message names the property path (`properties.<name>: ...`), and `problems` lists
    every bad property, not just the first."""

    def __init__(self, problems: Union[str, Sequence[Problem]]):
        if isinstance(problems, str):
            problems = [problem(["schema"], problems, "value_error.schema", None)]
        super().__init__(problems)


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


@dataclass
class _Field:
    """One property planned as one question, and how to read its answer back."""

    name: str
    kind: str                                                     # choice | score | noul
    question: Dict[str, Any]
    options: List[Tuple[str, Any]] = field(default_factory=list)  # choice: (label, value)
    minimum: Optional[int] = None                                 # score: the value of level 0


class _Bad(Exception):
    """One property's problem, raised inside the planner and collected per property."""


# ------------------------------------------------------------------------------ schema -> questions

def _schema_of(model: Any) -> Dict[str, Any]:
    """The JSON Schema of a pydantic model (v2 or v1), or the dict itself."""
    if hasattr(model, "model_json_schema"):
        return model.model_json_schema()
    if hasattr(model, "schema"):
        return model.schema()
    if isinstance(model, dict):
        return model
    raise SchemaError("expected a JSON schema dict or a pydantic model, got %s"
                      % type(model).__name__)


def _noul(name: str, description: Any) -> _Field:
    return _Field(name, "noul",
                  {"type": "noul", "instructions": description or "Is `%s` true?" % name})


def _choice(path: str, name: str, values: Any, description: Any) -> _Field:
    # a bare string is iterable: refuse it before it splits into one option per character
    if not isinstance(values, (list, tuple)):
        raise _Bad("%s: 'enum' must be an array of values, got %s" % (path, type(values).__name__))
    if len(values) > MAX_OPTIONS:
        raise _Bad("%s: %d options exceeds MAX_OPTIONS=%d" % (path, len(values), MAX_OPTIONS))
    if not values:
        raise _Bad("%s: 'enum' must not be empty" % path)
    if all(isinstance(v, bool) for v in values) and len(set(values)) == 2:
        return _noul(name, description)
    options = [("null" if v is None else str(v), v) for v in values]
    labels = [label for label, _ in options]
    if len(set(labels)) != len(labels):
        raise _Bad("%s: enum values produce duplicate choice labels" % path)
    question = {"type": "choice", "instructions": description or "What is `%s`?" % name,
                "criteria": dict.fromkeys(labels)}
    return _Field(name, "choice", question, options=options)


def _score(path: str, name: str, prop: Dict[str, Any], description: Any) -> _Field:
    lo, hi = prop.get("minimum"), prop.get("maximum")
    # a boolean bound is a yes/no, not a number, even though bool subclasses int
    if not all(isinstance(b, int) and not isinstance(b, bool) for b in (lo, hi)):
        raise _Bad("%s: a numeric field needs integer 'minimum' and 'maximum' to become a score"
                   % path)
    assert isinstance(lo, int) and isinstance(hi, int)
    if hi < lo:
        raise _Bad("%s: 'maximum' %d is below 'minimum' %d" % (path, hi, lo))
    if hi - lo + 1 > MAX_SCORE_LEVELS:
        raise _Bad("%s: %d levels exceeds MAX_SCORE_LEVELS=%d; narrow the range or use an enum"
                   % (path, hi - lo + 1, MAX_SCORE_LEVELS))
    question = {"type": "score",
                "instructions": description or "Score `%s` from %d to %d" % (name, lo, hi),
                "criteria": [str(v) for v in range(lo, hi + 1)]}
    return _Field(name, "score", question, minimum=lo)


_LOCAL_REFS = (("#/$defs/", "$defs"), ("#/definitions/", "definitions"))


def _inline(path: str, prop: Dict[str, Any], root: Dict[str, Any],
            seen: Tuple[Any, ...]) -> Tuple[Dict[str, Any], Tuple[Any, ...]]:
    """`prop` with its local `$ref` replaced by the definition, the property's own keys on top.

    The definition's `description` is dropped (pydantic fills it from the enum's docstring, which
    describes the type, not this field). Only this schema's `$defs` / `definitions` are looked
    up, never fetched; a ref met twice on one path is a cycle."""
    ref = prop["$ref"]
    if ref in seen:
        raise _Bad("%s: $ref %r is recursive; flatten the schema" % (path, ref))
    target = None
    for prefix, key in _LOCAL_REFS:
        defs = root.get(key)
        if isinstance(ref, str) and ref.startswith(prefix) and isinstance(defs, dict):
            target = defs.get(ref[len(prefix):])
    if not isinstance(target, dict):
        raise _Bad("%s: $ref %r does not resolve to an entry of this schema's '$defs' or "
                   "'definitions'" % (path, ref))
    merged = {k: v for k, v in target.items() if k != "description"}
    merged.update((k, v) for k, v in prop.items() if k != "$ref")
    return merged, seen + (ref,)


def _plan_field(path: str, name: str, prop: Any, root: Dict[str, Any],
                seen: Tuple[Any, ...] = ()) -> _Field:
    """One property as one question, or `_Bad` naming what cannot be asked."""
    if not isinstance(prop, dict):
        raise _Bad("%s: property must be an object, got %s" % (path, type(prop).__name__))
    while "$ref" in prop:
        prop, seen = _inline(path, prop, root, seen)
    description = prop.get("description")
    if not {"const", "enum", "type"} & set(prop):
        # pydantic v1 wraps a described `$ref` as a one-item allOf: that item, outer keys on top
        wrapped = prop.get("allOf")
        if isinstance(wrapped, list) and len(wrapped) == 1 and isinstance(wrapped[0], dict):
            branch = dict(wrapped[0])
            branch.update((k, v) for k, v in prop.items() if k != "allOf")
            return _plan_field(path, name, branch, root, seen)
        # Optional[X] (pydantic v2: anyOf [X, null]) is X; a union of two real types is ambiguous
        union = prop.get("anyOf") or prop.get("oneOf")
        if union is not None:
            branches = [b for b in (union if isinstance(union, (list, tuple)) else ())
                        if isinstance(b, dict) and b.get("type") != "null"]
            if len(branches) != 1:
                raise _Bad("%s: only 'Optional[...]' unions (one non-null branch) are supported, "
                           "got %d" % (path, len(branches)))
            branch = dict(branches[0])
            branch.setdefault("description", description)
            return _plan_field(path, name, branch, root, seen)
    if "const" in prop:
        return _choice(path, name, [prop["const"]], description)
    if "enum" in prop:
        return _choice(path, name, prop["enum"], description)
    jtype = prop.get("type")
    if isinstance(jtype, list):  # nullable: ["integer", "null"]
        real = [t for t in jtype if t != "null"]
        if len(real) > 1:
            raise _Bad("%s: 'type' has multiple non-null types; unions are not supported" % path)
        jtype = real[0] if real else None
    if jtype == "boolean":
        return _noul(name, description)
    if jtype in ("integer", "number"):
        return _score(path, name, prop, description)
    if jtype == "string":
        raise _Bad("%s: a free string cannot be a fixed option set; use 'enum' or a boolean" % path)
    if jtype == "array":
        raise _Bad("%s: arrays are not supported; ask one field per element" % path)
    if jtype == "object":
        raise _Bad("%s: nested objects are not supported; flatten the schema" % path)
    raise _Bad("%s: unsupported schema %r" % (path, prop))


def _plan_problems(schema: Any) -> Tuple[List[_Field], List[Problem]]:
    """The planned fields and every problem: one per bad property, in property order."""
    if not isinstance(schema, dict):
        return [], [problem(["schema"],
                            "expected a JSON schema object, got %s" % type(schema).__name__,
                            "value_error.schema", schema)]
    if schema.get("type") not in (None, "object") or "properties" not in schema:
        return [], [problem(["schema"], "the top level must be an object with 'properties'",
                            "value_error.schema", schema)]
    properties = schema["properties"]
    if not isinstance(properties, dict) or not properties:
        return [], [problem(["schema", "properties"], "'properties' must be a non-empty object",
                            "value_error.schema", properties)]
    if len(properties) > MAX_PROPERTIES:
        return [], [problem(["schema", "properties"], "%d properties exceeds MAX_PROPERTIES=%d"
                            % (len(properties), MAX_PROPERTIES), "value_error.schema",
                            len(properties))]
    fields: List[_Field] = []
    problems: List[Problem] = []
    for name, prop in properties.items():
        try:
            fields.append(_plan_field("properties.%s" % name, name, prop, schema))
        except _Bad as bad:
            problems.append(problem(["schema", "properties", name], str(bad),
                                    "value_error.schema", prop))
    return fields, problems


def plan_from_json_schema(schema: Dict[str, Any]) -> List[_Field]:
    """Validate a JSON schema and plan one question per property; `SchemaError` lists every
    property that cannot be asked."""
    fields, problems = _plan_problems(schema)
    if problems:
        raise SchemaError(problems)
    return fields


def questions_from_json_schema(schema: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The Laya questions a JSON schema asks, keyed by property name."""
    return {f.name: f.question for f in plan_from_json_schema(schema)}


def _require_pydantic() -> None:
    try:
        import pydantic  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("pydantic is required for the typed-model helpers; install it "
                          "(pip install pydantic)") from exc


def questions_from_pydantic(model: Any) -> Dict[str, Dict[str, Any]]:
    """The Laya questions a pydantic model asks. Requires pydantic."""
    _require_pydantic()
    return questions_from_json_schema(_schema_of(model))


# ------------------------------------------------------------------------------ answers -> values

def _project(answers: Dict[Any, Any], fields: Sequence[_Field]) -> Dict[str, Any]:
    """Each field's value from its answer: a choice's enum value, a score's integer (minimum +
    the most probable level), a noul's boolean (P(true) >= 0.5), None for an answer the gate
    flagged; a field with no answer is left out. An answer that lacks its field or gives a
    non-finite number is refused (every such field listed at once) rather than read as False,
    level 0 or the text "None", as Laya reads it: a malformed reply must not become a plausible
    value. A choice label outside the options passes through as its text (Laya's golden)."""
    values: Dict[str, Any] = {}
    problems: List[Problem] = []

    def bad(name: str, key: str, msg: str, got: Any) -> None:
        problems.append(problem(["answers", name, key], msg, "value_error.answer", got))

    for f in fields:
        answer = answers.get(f.name)
        if answer is None:
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
    _require_pydantic()
    return model(**answers_to_json(answers, _schema_of(model)))


def _details(values: Dict[str, Any], answers: Dict[Any, Any],
             result: Dict[str, Any]) -> DecisionResult:
    confidence: Dict[Any, float] = {}
    answer_confidence: Dict[Any, Optional[float]] = {}
    probabilities: Dict[Any, Dict[str, Any]] = {}
    for name, answer in answers.items():
        confidence[name] = float(answer.get("confidence", 0.0))
        answer_confidence[name] = answer_confidence_value(answer)
        if answer.get("type") == "noul":
            p = float(answer.get("noul", 0.0))
            probabilities[name] = {"false": round(1.0 - p, 4), "true": round(p, 4)}
        else:
            probabilities[name] = dict(answer.get("probabilities") or {})
    return DecisionResult(values=values, confidence=confidence, probabilities=probabilities,
                          answers=dict(answers), usage=result.get("usage"),
                          routing=result.get("routing"), answer_confidence=answer_confidence)


# ------------------------------------------------------------------------------ decide

def _check_pair(schema: Any, questions: Any) -> None:
    if (schema is None) == (questions is None):
        raise InvalidRequest([problem(["schema"], "pass exactly one of schema= or questions=",
                                      "value_error.schema", None)])


def _prepare(schema: Any, questions: Optional[Dict[Any, Any]], min_confidence: Any
             ) -> Tuple[Optional[List[_Field]], Dict[Any, Any], Optional[MinConfidence]]:
    """`min_confidence` and the schema checked (after `_check_pair`), in Laya's order and each
    stage's problems in one error: a bad `min_confidence` raises first, the schema's problems
    listed after its own; then the schema. Returns the fields, the questions and the gate."""
    fields: Optional[List[_Field]] = None
    plan: List[Problem] = []
    if schema is not None:
        try:
            fields, plan = _plan_problems(_schema_of(schema))
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


def _shape(result: Dict[str, Any], fields: Optional[List[_Field]], return_details: bool) -> Any:
    answers = result.get("answers", {}) or {}
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
    return _shape(result, fields, return_details)


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
    return [_shape(r, fields, return_details) for r in results]


__all__ = [
    "DecisionResult", "SchemaError", "answers_to_json", "answer_to_pydantic", "decide",
    "decide_batch", "plan_from_json_schema", "questions_from_json_schema",
    "questions_from_pydantic",
]
