"""A JSON Schema (or a pydantic model) as Laya questions, as Laya 0.4.15's `laya.structured`
plans them: one question per property of a top-level object, and how to read each answer back.

The mapping is Laya's documented subset. `enum` / `const` -> choice (an enum of exactly the two
booleans -> noul), `boolean` -> noul, `integer` / `number` with integer `minimum` and `maximum`
-> score (at most 10 levels), the property's `description` -> the question's instructions.
Local `$ref`s are inlined, a one-item `allOf` and an `Optional[...]` union are unwrapped.
Anything with no fixed option set (free strings, arrays, nested objects) raises `SchemaError`,
naming the property; every bad property is listed at once. Nothing here imports pydantic: a
model is read through its own `model_json_schema()` (v2) or `schema()` (v1).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ..errors import InvalidRequest, Problem, problem
from . import limits

# laya.structured's names for the planner's limits (`kime.laya.limits` holds them)
MAX_PROPERTIES = limits.SCHEMA_PROPERTIES
MAX_OPTIONS = limits.SCHEMA_OPTIONS
MAX_SCORE_LEVELS = limits.SCHEMA_SCORE_LEVELS


class SchemaError(InvalidRequest):
    """A schema that cannot be asked as Laya questions. A `ValueError`, as Laya's is; each
    problem's message names the property path (`properties.<name>: ...`), and `problems` lists
    every bad property, not just the first."""

    def __init__(self, problems: Union[str, Sequence[Problem]]):
        if isinstance(problems, str):
            problems = [problem(["schema"], problems, "value_error.schema", None)]
        super().__init__(problems)


@dataclass
class Field:
    """One property planned as one question, and how to read its answer back."""

    name: str
    kind: str                                                     # choice | score | noul
    question: Dict[str, Any]
    options: List[Tuple[str, Any]] = field(default_factory=list)  # choice: (label, value)
    minimum: Optional[int] = None                                 # score: the value of level 0


class _Bad(Exception):
    """One property's problem, raised inside the planner and collected per property."""


# ------------------------------------------------------------------------------ schema -> questions

def schema_of(model: Any) -> Dict[str, Any]:
    """The JSON Schema of a pydantic model (v2 or v1), or the dict itself."""
    if hasattr(model, "model_json_schema"):
        return model.model_json_schema()
    if hasattr(model, "schema"):
        return model.schema()
    if isinstance(model, dict):
        return model
    raise SchemaError("expected a JSON schema dict or a pydantic model, got %s"
                      % type(model).__name__)


def _noul(name: str, description: Any) -> Field:
    return Field(name, "noul",
                  {"type": "noul", "instructions": description or "Is `%s` true?" % name})


def _choice(path: str, name: str, values: Any, description: Any) -> Field:
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
    return Field(name, "choice", question, options=options)


def _score(path: str, name: str, prop: Dict[str, Any], description: Any) -> Field:
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
    return Field(name, "score", question, minimum=lo)


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
                seen: Tuple[Any, ...] = ()) -> Field:
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


def plan_problems(schema: Any) -> Tuple[List[Field], List[Problem]]:
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
    fields: List[Field] = []
    problems: List[Problem] = []
    for name, prop in properties.items():
        try:
            fields.append(_plan_field("properties.%s" % name, name, prop, schema))
        except _Bad as bad:
            problems.append(problem(["schema", "properties", name], str(bad),
                                    "value_error.schema", prop))
    return fields, problems


def plan_from_json_schema(schema: Dict[str, Any]) -> List[Field]:
    """Validate a JSON schema and plan one question per property; `SchemaError` lists every
    property that cannot be asked."""
    fields, problems = plan_problems(schema)
    if problems:
        raise SchemaError(problems)
    return fields


def questions_from_json_schema(schema: Dict[str, Any]) -> Dict[str, Dict[str, Any]]:
    """The Laya questions a JSON schema asks, keyed by property name."""
    return {f.name: f.question for f in plan_from_json_schema(schema)}


def require_pydantic() -> None:
    try:
        import pydantic  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError("pydantic is required for the typed-model helpers; install it "
                          "(pip install pydantic)") from exc


def questions_from_pydantic(model: Any) -> Dict[str, Dict[str, Any]]:
    """The Laya questions a pydantic model asks. Requires pydantic."""
    require_pydantic()
    return questions_from_json_schema(schema_of(model))


__all__ = ["Field", "MAX_OPTIONS", "MAX_PROPERTIES", "MAX_SCORE_LEVELS", "SchemaError",
           "plan_from_json_schema", "plan_problems", "questions_from_json_schema",
           "questions_from_pydantic", "require_pydantic", "schema_of"]
