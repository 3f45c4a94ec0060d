"""Record Laya 0.4.15's `min_confidence` gate and structured decisions: `tests/goldens/confidence.json`
and `tests/goldens/structured.json`.

Like `tools/make_goldens.py` (whose encoding, texts and questions it reuses), this runs ONLY in
the oracle environment with the real `laya` (and pydantic), which kime never imports:

    .oracle/bin/python tools/goldens_confidence.py

It loads the committed `tiny` and `multilingual-tiny` checkpoints with `laya.Agent(path,
device="cpu")` and records, for every case, Laya's return value or its error (type + message)
and the warnings the call raised. Each file holds `laya_version`, `pydantic_version` and `cases`:

    {"id", "checkpoint" (null for a pure helper), "about", "call", "args",
     "result", "error": null | {"type", "message"}, "warnings": [...]}

`call` is an Agent method (`predict`, `predict_batch`, `decide`, `decide_batch`), a
`laya.structured` function called with the agent as runner (`structured.decide`,
`structured.decide_batch`), or a pure helper (`check_min_confidence`, `resolve_min_confidence`,
`flag_low_confidence`, `apply_confidence_gate`, `questions_from_json_schema`, ...); the helpers
that work in place record the mutated `results` as their result. A `DecisionResult` is recorded
as `{"__dataclass__": "DecisionResult", "fields": {...}}` (fields in declaration order). A
pydantic schema is carried as source (`args["model"] = {"name", "source"}`) that the oracle and
kime's test both execute. Agent cases are checked to sit at least `MARGIN` away from every gate
threshold, so float32 noise on kime's side cannot flip a gate decision.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("make_goldens", ROOT / "tools" / "make_goldens.py")
assert _spec is not None and _spec.loader is not None
mg = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mg)

import laya  # noqa: E402
import laya.structured  # noqa: E402
import pydantic  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
MARGIN = 5e-4
T, M = "tiny", "multilingual-tiny"

EMAIL, GERMAN, LONG_TEXT, CONVERSATION, DICT_STATE = (mg.EMAIL, mg.GERMAN, mg.LONG_TEXT,
                                                      mg.CONVERSATION, mg.DICT_STATE)
BASIC, ALL_SIZES = mg.BASIC, {
    "c2": mg.LANG2, "c4": {"type": "choice", "instructions": "Channel?",
                           "criteria": ["email", "phone", "chat", "letter"]},
    "c7": mg.TOPIC7, "c12": mg.TOPIC12, "s2": mg.SENTIMENT2, "s5": mg.URGENCY5,
    "s7": mg.SATISFACTION7, "s11": mg.SCALE11, "n": mg.FORMAL}


def case(id: str, checkpoint: Optional[str], about: str, call: str, **args: Any) -> Dict[str, Any]:
    return {"id": id, "checkpoint": checkpoint, "about": about, "call": call, "args": args}


# ------------------------------------------------------------------------------ confidence

def _a(qtype: str, n: Optional[int] = None, **fields: Any) -> Dict[str, Any]:
    """A hand-made answer: a type, `n` probabilities (none for a bare noul) and fields."""
    out: Dict[str, Any] = {"type": qtype}
    if n is not None:
        out["probabilities"] = {str(i): round(1.0 / n, 4) for i in range(n)}
    out.update(fields)
    return out


HAND_RESULTS = [
    {"model": "laya-rl-agent", "answers": {
        "c2": _a("choice", 2, confidence=0.2, answer_confidence=0.61),
        "c4": _a("choice", 4, confidence=0.5, answer_confidence=0.4),
        "c12": _a("choice", 12, confidence=0.1, answer_confidence=0.3),
        "s7": _a("score", 7, score=3.0, confidence=0.4, answer_confidence=0.5),
        "s11": _a("score", 11, score=5.0, confidence=0.3, answer_confidence=0.95),
        "n": _a("noul", None, noul=0.8, confidence=0.8, answer_confidence=0.8),
        "only_conf": _a("noul", None, noul=0.3, confidence=0.7),
        "nan": _a("choice", 3, confidence=float("nan"), answer_confidence=float("nan")),
        "boolean": _a("score", 3, confidence=True, answer_confidence=False),
        "nothing": _a("choice", 5),
        "stale": _a("choice", 2, confidence=0.9, answer_confidence=0.99, low_confidence=True,
                    abstention="abstained", abstention_threshold=1.0),
        "odd_type": {"type": "ranking", "answer_confidence": 0.2},
        "not_a_dict": 0.5,
    }, "usage": {"input_tokens": 1}},
    {"model": "laya-rl-agent", "answers": "not a dict"},
    "not a result",
    {"model": "laya-rl-agent", "answers": {}},
]

MAP = {"choice:2": 0.6, "choice:3-5": 0.45, "score:11+": 0.99, "noul:2": 0.5, "default": 0.35}


def confidence_cases() -> List[Dict[str, Any]]:
    pure: List[Dict[str, Any]] = []
    for i, value in enumerate([0.0, 1.0, 0.5, 1, 0, 0.25, True, False, -0.01, 1.0001, float("nan"),
                               float("inf"), "0.5", None, [0.5], {}, {"default": 0.3},
                               {"choice:3-5": 0.5, "noul:2": 1},
                               {"choice:3": 0.5}, {"choice:2": 0.5, "default": 1.5},
                               {1: 0.5}, {"Choice:2": 0.1}, {"default": True},
                               {"score:11+": "0.9"}, {"noul:2": 0.4, "bogus": 2.0, "choice:2": -1}]):
        pure.append(case("check_min_confidence_%02d" % i, None, "check_min_confidence(%r)" % (value,),
                         "check_min_confidence", value=value))
    for i, value in enumerate([{"choice:6-10": 0.2}, ["default", 0.5], {}, "default", {"x": 0.1}]):
        pure.append(case("check_min_confidence_map_%d" % i, None, "check_min_confidence_map(%r)" % (value,),
                         "check_min_confidence_map", value=value))
    answers = HAND_RESULTS[0]["answers"]
    for qid in ("c2", "c4", "c12", "s7", "s11", "n", "odd_type", "nothing"):
        pure.append(case("resolve_%s" % qid, None, "resolve_min_confidence on a %s answer" % qid,
                         "resolve_min_confidence", answer=answers[qid], thresholds=MAP))
    pure += [
        case("resolve_no_default", None, "a bucket the map omits, no 'default': the default argument",
             "resolve_min_confidence", answer=answers["c12"], thresholds={"choice:2": 0.5}, default=0.125),
        case("resolve_no_default_zero", None, "a bucket the map omits: 0.0", "resolve_min_confidence",
             answer=answers["s7"], thresholds={"choice:2": 0.5}),
        case("bucket_keys", None, "every bucket key, sorted", "bucket_keys"),
        case("gate_states", None, "GATE_STATES", "GATE_STATES"),
    ]
    for name, mc in [("float", 0.5), ("zero", 0.0), ("one", 1.0), ("map", MAP), ("int", 1)]:
        pure.append(case("flag_low_confidence_%s" % name, None, "flag_low_confidence(%r) on hand-made results" % (mc,),
                         "flag_low_confidence", results=HAND_RESULTS, min_confidence=mc))
    for name, mc in [("none", None), ("float", 0.5), ("zero", 0.0), ("one", 1.0), ("map", MAP),
                     ("map_default_only", {"default": 0.45}), ("map_no_default", {"choice:2": 0.7})]:
        pure.append(case("apply_confidence_gate_%s" % name, None,
                         "apply_confidence_gate(%r) on hand-made results (stale flags, no numbers, NaN)" % (mc,),
                         "apply_confidence_gate", results=HAND_RESULTS, min_confidence=mc))
    pure += [
        case("answer_confidence_value", None, "answer_confidence_value on each hand-made answer",
             "answer_confidence_value", answers=answers),
        case("jev_confidence", None, "jev_confidence on each hand-made answer", "jev_confidence",
             answers=answers),
    ]

    agent = [
        case("predict_float_tiny", T, "predict with min_confidence=0.6", "predict",
             state=EMAIL, questions=BASIC, min_confidence=0.6),
        case("predict_float_ml", M, "predict with min_confidence=0.5, every bucket", "predict",
             state=GERMAN, questions=ALL_SIZES, min_confidence=0.5),
        case("predict_zero", T, "min_confidence=0.0: every answer passes, threshold echoed", "predict",
             state=EMAIL, questions=ALL_SIZES, min_confidence=0.0),
        case("predict_one_int", T, "min_confidence=1 (an int): everything below 1 abstains", "predict",
             state=LONG_TEXT, questions=BASIC, min_confidence=1),
        case("predict_map_tiny", T, "a per-bucket map with default over every bucket", "predict",
             state=EMAIL, questions=ALL_SIZES,
             min_confidence={"choice:2": 0.55, "choice:3-5": 0.3, "choice:6-10": 0.2, "choice:11+": 0.95,
                             "score:2": 0.9, "score:3-5": 0.25, "score:6-10": 0.15, "noul:2": 0.6,
                             "default": 0.4}),
        case("predict_map_no_default_ml", M, "a map naming two buckets: the rest gated at 0.0", "predict",
             state=CONVERSATION, questions=ALL_SIZES, min_confidence={"choice:11+": 0.5, "noul:2": 0.99}),
        case("predict_map_default_only", M, "a map with only 'default'", "predict",
             state=DICT_STATE, questions=BASIC, min_confidence={"default": 0.5}),
        case("predict_none", T, "min_confidence=None: no gate fields at all", "predict",
             state=EMAIL, questions=BASIC, min_confidence=None),
        case("predict_empty_questions_gated", T, "no questions: nothing to gate", "predict",
             state=EMAIL, questions={}, min_confidence=0.5),
        case("predict_int_ids_gated", M, "int question ids keep their keys under the gate", "predict",
             state=GERMAN, questions={1: mg.INTENT3, 2: mg.ANGRY}, min_confidence=0.5),
        case("batch_float_tiny", T, "predict_batch with a float over three states", "predict_batch",
             states=[EMAIL, "short", CONVERSATION], questions=BASIC, min_confidence=0.45),
        case("batch_map_ml", M, "predict_batch with a map and batch_size=2", "predict_batch",
             states=[GERMAN, EMAIL, LONG_TEXT], questions=ALL_SIZES, batch_size=2,
             min_confidence={"choice:3-5": 0.5, "score:3-5": 0.3, "default": 0.6}),
        case("batch_empty_states_gated", T, "no states: []", "predict_batch",
             states=[], questions=BASIC, min_confidence=0.5),
    ]
    bad = [True, -0.5, 1.5, float("nan"), "0.9", [0.5], {}, {"choice:3": 0.5}, {"default": 2},
           {1: 0.5}, {"noul:2": None}, {"bogus": 0.1, "default": 7}]
    for i, value in enumerate(bad):
        checkpoint = (T, M)[i % 2]
        if i % 3 == 2:
            agent.append(case("error_batch_min_confidence_%02d" % i, checkpoint,
                              "predict_batch refuses min_confidence=%r" % (value,), "predict_batch",
                              states=[EMAIL], questions=BASIC, min_confidence=value))
        else:
            agent.append(case("error_predict_min_confidence_%02d" % i, checkpoint,
                              "predict refuses min_confidence=%r" % (value,), "predict",
                              state=EMAIL, questions=BASIC, min_confidence=value))
    agent += [
        case("error_min_confidence_before_state", T, "a bad threshold and a None state: the threshold first",
             "predict", state=None, questions=BASIC, min_confidence=2.0),
        case("error_min_confidence_before_questions", M,
             "a bad map and an invalid question: the map first", "predict_batch",
             states=[EMAIL], questions={"q": {"type": "bogus"}}, min_confidence={"x": 1}),
        case("error_min_confidence_before_states_type", T,
             "a bad threshold and states a string: the threshold first", "predict_batch",
             states="text", questions=BASIC, min_confidence=-1),
        case("error_min_confidence_empty_states", M, "a bad threshold with no states is still refused",
             "predict_batch", states=[], questions=BASIC, min_confidence="high"),
    ]
    return pure + agent


# ------------------------------------------------------------------------------ structured

TICKET = {
    "type": "object",
    "properties": {
        "department": {"enum": ["billing", "support", "sales"],
                       "description": "Which department should handle this email?"},
        "urgency": {"type": "integer", "minimum": 1, "maximum": 5},
        "refund": {"type": "boolean", "description": "The customer asks for money back."},
        "stars": {"enum": [1, 2, 3]},
    },
}
REFS = {
    "$defs": {"Dept": {"enum": ["billing", "support"], "description": "docstring of the enum"},
              "Alias": {"$ref": "#/$defs/Dept"},
              "Level": {"type": "integer", "minimum": 0, "maximum": 3}},
    "definitions": {"Flag": {"type": "boolean"}},
    "properties": {
        "dept": {"$ref": "#/$defs/Dept"},
        "dept_described": {"$ref": "#/$defs/Dept", "description": "Who owns the ticket?"},
        "alias": {"$ref": "#/$defs/Alias"},
        "level": {"$ref": "#/$defs/Level", "description": "How bad is it?"},
        "flag": {"$ref": "#/definitions/Flag"},
        "wrapped": {"allOf": [{"$ref": "#/$defs/Dept"}], "description": "pydantic v1's wrapping"},
    },
}
ODD = {
    "properties": {
        "fixed": {"const": "yes"},
        "bools": {"enum": [True, False]},
        "one_bool": {"enum": [True]},
        "nullable_enum": {"enum": ["a", None, 3, 2.5]},
        "opt": {"anyOf": [{"enum": ["x", "y"]}, {"type": "null"}], "description": "Optional pick"},
        "opt_int": {"oneOf": [{"type": "null"}, {"type": "integer", "minimum": -2, "maximum": 2}]},
        "typelist": {"type": ["boolean", "null"]},
        "number": {"type": "number", "minimum": 0, "maximum": 9},
        "single": {"type": "integer", "minimum": 4, "maximum": 4},
    },
}
PYDANTIC_SOURCE = '''
from enum import Enum
from typing import Literal, Optional
from pydantic import BaseModel, Field

class Department(str, Enum):
    """Where a ticket goes."""
    billing = "billing"
    support = "support"
    sales = "sales"

class Ticket(BaseModel):
    department: Department = Field(description="Which department should handle it?")
    plain_department: Department
    urgency: Literal[0, 1, 2]
    severity: int = Field(ge=1, le=5, description="How severe is the problem?")
    needs_human: bool
    channel: Optional[Literal["email", "phone"]] = None

class Address(BaseModel):
    street: Literal["a", "b"]

class Bad(BaseModel):
    name: str
    tags: list
    address: Address
    score: float
'''


def schema_error(id: str, about: str, prop: Any = None, schema: Any = None,
                 call: str = "structured.decide", **extra: Any) -> Dict[str, Any]:
    if schema is None:
        schema = {"properties": {"ok": {"type": "boolean"}, "bad": prop}}
    checkpoint = T if len(id) % 2 else M
    if call == "questions_from_json_schema":
        return case("error_schema_" + id, None, about, call, schema=schema)
    if call.endswith("decide_batch"):
        return case("error_schema_" + id, checkpoint, about, call, states=[EMAIL], schema=schema, **extra)
    return case("error_schema_" + id, checkpoint, about, call, state=EMAIL, schema=schema, **extra)


def structured_cases() -> List[Dict[str, Any]]:
    good = [
        case("questions_ticket", None, "the questions a schema asks", "questions_from_json_schema", schema=TICKET),
        case("questions_refs", None, "$ref ($defs, definitions, alias, allOf) inlined", "questions_from_json_schema",
             schema=REFS),
        case("questions_odd", None, "const, boolean enums, null label, Optional unions, type lists, number",
             "questions_from_json_schema", schema=ODD),
        case("answers_to_json", None, "answers projected: flagged -> None, score argmax + minimum, label values",
             "answers_to_json", schema=TICKET, answers={
                 "department": {"type": "choice", "choice": "sales", "probabilities": {"billing": 0.1}},
                 "urgency": {"type": "score", "score": 2.4, "probabilities": {"0": 0.1, "1": 0.2, "2": 0.2, "3": 0.5}},
                 "refund": {"type": "noul", "noul": 0.5, "low_confidence": True},
                 "stars": {"type": "choice", "choice": "9"}}),
        case("answers_to_json_score_no_probs", None, "a score without probabilities rounds `score`",
             "answers_to_json", schema=TICKET,
             answers={"urgency": {"type": "score", "score": 2.6}, "refund": {"type": "noul", "noul": 0.5}}),
        case("decide_ticket_tiny", T, "agent.decide with a JSON schema: enum, integer range, boolean, int enum",
             "decide", state=EMAIL, schema=TICKET),
        case("decide_ticket_ml", M, "the same on the multilingual checkpoint", "decide", state=GERMAN, schema=TICKET),
        case("decide_refs_details", T, "$refs and return_details=True", "decide", state=EMAIL, schema=REFS,
             return_details=True),
        case("decide_odd_details_ml", M, "odd mappings with details", "decide", state=GERMAN, schema=ODD,
             return_details=True),
        case("decide_min_confidence", T, "min_confidence=0.6: low fields come back None", "decide",
             state=EMAIL, schema=TICKET, min_confidence=0.6, return_details=True),
        case("decide_min_confidence_map_ml", M, "a per-bucket map on decide", "structured.decide",
             state=CONVERSATION, schema=TICKET,
             min_confidence={"choice:3-5": 0.4, "score:3-5": 0.3, "default": 0.55}),
        case("decide_questions", T, "questions= instead of a schema: the raw answers", "structured.decide",
             state=EMAIL, questions=BASIC),
        case("decide_questions_details_int_ids", M, "questions= with int ids and details", "decide",
             state=GERMAN, questions={1: mg.INTENT3, "angry": mg.ANGRY}, return_details=True,
             min_confidence=0.5),
        case("decide_forwards_kwargs", T, "max_len and head_max_len are forwarded to predict", "decide",
             state=LONG_TEXT, schema=TICKET, max_len=48, head_max_len=24, return_details=True),
        case("decide_pydantic", T, "a pydantic model: Enum ($ref), Literal, Field(ge, le), bool, Optional",
             "structured.decide", state=EMAIL, model={"name": "Ticket", "source": PYDANTIC_SOURCE},
             return_details=True),
        case("decide_pydantic_ml", M, "a pydantic model on the multilingual checkpoint", "decide",
             state=GERMAN, model={"name": "Ticket", "source": PYDANTIC_SOURCE}, min_confidence=0.5),
        case("decide_batch_ticket", T, "decide_batch with a schema over three states", "decide_batch",
             states=[EMAIL, "short", CONVERSATION], schema=TICKET),
        case("decide_batch_details_map_ml", M, "decide_batch with details, a map and batch_size",
             "structured.decide_batch", states=[GERMAN, EMAIL, LONG_TEXT], schema=REFS, batch_size=2,
             return_details=True, min_confidence={"choice:2": 0.55, "default": 0.5}),
        case("decide_batch_questions_float", T, "decide_batch with questions= and a float", "decide_batch",
             states=[EMAIL, DICT_STATE], questions=BASIC, min_confidence=0.5),
        case("decide_batch_pydantic", M, "decide_batch with a pydantic model", "structured.decide_batch",
             states=[GERMAN, EMAIL], model={"name": "Ticket", "source": PYDANTIC_SOURCE}),
        case("decide_batch_empty", T, "no states: []", "decide_batch", states=[], schema=TICKET),
        case("decide_batch_tuple", M, "a tuple of states is a sequence", "structured.decide_batch",
             states=[EMAIL, GERMAN], states_tuple=True, schema=ODD),
    ]
    nine = {"enum": ["o%d" % i for i in range(33)]}
    errors = [
        schema_error("string", "a free string", {"type": "string"}),
        schema_error("array", "an array", {"type": "array", "items": {"type": "boolean"}}),
        schema_error("object", "a nested object", {"type": "object", "properties": {"x": {"type": "boolean"}}},
                     call="decide"),
        schema_error("number_unbounded", "a number without bounds", {"type": "number"}),
        schema_error("float_bounds", "float bounds", {"type": "integer", "minimum": 0, "maximum": 1.5},
                     call="decide"),
        schema_error("bool_bounds", "a boolean bound", {"type": "integer", "minimum": True, "maximum": 3}),
        schema_error("max_below_min", "maximum below minimum", {"type": "integer", "minimum": 3, "maximum": 1}),
        schema_error("too_many_levels", "11 levels", {"type": "integer", "minimum": 0, "maximum": 10}),
        schema_error("too_many_options", "33 options", nine, call="decide"),
        schema_error("enum_empty", "an empty enum", {"enum": []}),
        schema_error("enum_string", "an enum that is a string", {"enum": "abc"}),
        schema_error("enum_duplicates", "1 and '1' are the same label", {"enum": [1, "1"]}),
        schema_error("ref_recursive", "a $ref cycle", None, schema={
            "$defs": {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
            "properties": {"loop": {"$ref": "#/$defs/A"}}}),
        schema_error("ref_unresolved", "a $ref to nowhere", {"$ref": "#/$defs/Missing"}),
        schema_error("ref_remote", "a remote $ref is not fetched", {"$ref": "https://example.com/s.json"}),
        schema_error("union_two", "a union of two real types",
                     {"anyOf": [{"type": "boolean"}, {"enum": ["a"]}]}),
        schema_error("type_list_union", "two non-null types", {"type": ["boolean", "integer"]}),
        schema_error("type_null_only", "only null", {"type": ["null"]}),
        schema_error("not_object_prop", "a property that is a list", ["boolean"]),
        schema_error("unsupported", "a property with only a title", {"title": "What"}),
        schema_error("several", "several bad properties: Laya names the first", None, schema={
            "properties": {"a": {"type": "string"}, "b": {"type": "boolean"}, "c": {"type": "array"}}}),
        schema_error("top_not_object", "the top level is a list", None, schema=["a"]),
        schema_error("top_type_array", "type: array at the top", None,
                     schema={"type": "array", "properties": {"a": {"type": "boolean"}}}),
        schema_error("no_properties", "no properties", None, schema={"type": "object"},
                     call="questions_from_json_schema"),
        schema_error("empty_properties", "empty properties", None, schema={"properties": {}}),
        schema_error("too_many_properties", "33 properties", None,
                     schema={"properties": {"p%d" % i: {"type": "boolean"} for i in range(33)}}),
        schema_error("batch_string", "decide_batch with a bad schema", {"type": "string"},
                     call="decide_batch"),
        case("error_schema_pydantic", T, "a pydantic model with str, list, nested model and float fields",
             "structured.decide", state=EMAIL, model={"name": "Bad", "source": PYDANTIC_SOURCE}),
        case("error_both_schema_and_questions", T, "schema= and questions= together", "decide",
             state=EMAIL, schema=TICKET, questions=BASIC),
        case("error_neither_schema_nor_questions", M, "neither schema= nor questions=", "structured.decide",
             state=EMAIL),
        case("error_batch_neither", T, "decide_batch with neither", "decide_batch", states=[EMAIL]),
        case("error_batch_states_string", M, "decide_batch with a string for states", "structured.decide_batch",
             states="one state", schema=TICKET),
        case("error_batch_states_dict", T, "decide_batch with a dict for states", "decide_batch",
             states={"a": 1}, schema=TICKET),
        case("error_decide_bad_min_confidence", M, "decide refuses min_confidence=1.5 before the schema",
             "decide", state=EMAIL, schema={"properties": {"a": {"type": "string"}}}, min_confidence=1.5),
        case("error_decide_batch_bad_map", T, "decide_batch refuses a bad map", "structured.decide_batch",
             states=[EMAIL], schema=TICKET, min_confidence={"choice:7": 0.5}),
        case("error_decide_schema_not_dict", M, "a schema that is neither a dict nor a model",
             "structured.decide", state=EMAIL, schema="Ticket"),
        case("error_decide_batch_no_predict_batch", None, "a runner without predict_batch",
             "structured.decide_batch", runner="object", states=[EMAIL], schema=TICKET),
        case("error_decide_bad_state", T, "the runner's own refusal (a None state) comes through",
             "decide", state=None, schema=TICKET),
    ]
    return good + errors


# ------------------------------------------------------------------------------ running

def encode(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {"__dataclass__": type(obj).__name__,
                "fields": {f.name: encode(getattr(obj, f.name)) for f in dataclasses.fields(obj)}}
    if isinstance(obj, dict):
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    return obj


def _model(spec: Dict[str, Any]) -> Any:
    scope: Dict[str, Any] = {"__name__": "goldens_models"}
    # dont_inherit: this file's `from __future__ import annotations` would leave the model's
    # annotations as strings pydantic cannot resolve
    exec(compile(spec["source"], "<pydantic models>", "exec", dont_inherit=True), scope)
    return scope[spec["name"]]


def call(agents: Dict[str, Any], spec: Dict[str, Any]) -> Any:
    args = copy.deepcopy(spec["args"])
    kind = spec["call"]
    conf = laya.confidence
    if kind == "check_min_confidence":
        return conf.check_min_confidence(args["value"])
    if kind == "check_min_confidence_map":
        return conf.check_min_confidence_map(args["value"])
    if kind == "resolve_min_confidence":
        return conf.resolve_min_confidence(args.pop("answer"), args.pop("thresholds"), **args)
    if kind == "bucket_keys":
        return sorted(conf.bucket_keys())
    if kind == "GATE_STATES":
        return list(conf.GATE_STATES)
    if kind in ("flag_low_confidence", "apply_confidence_gate"):
        getattr(conf, kind)(args["results"], args["min_confidence"])
        return args["results"]
    if kind == "answer_confidence_value":
        return {k: conf.answer_confidence_value(a) if isinstance(a, dict) else None
                for k, a in args["answers"].items()}
    if kind == "jev_confidence":
        return {k: conf.jev_confidence(a) if isinstance(a, dict) else None for k, a in args["answers"].items()}
    if kind == "questions_from_json_schema":
        return laya.structured.questions_from_json_schema(args["schema"])
    if kind == "answers_to_json":
        return laya.structured.answers_to_json(args["answers"], args["schema"])
    if "model" in args:
        args["schema"] = _model(args.pop("model"))
    runner = object() if args.pop("runner", None) == "object" else agents[spec["checkpoint"]]
    if args.pop("states_tuple", False):
        args["states"] = tuple(args["states"])
    if kind == "predict":
        return runner.predict(args.pop("state"), args.pop("questions"), **args)
    if kind == "predict_batch":
        return runner.predict_batch(args.pop("states"), args.pop("questions"), **args)
    if kind == "decide":
        return runner.decide(args.pop("state"), **args)
    if kind == "decide_batch":
        return runner.decide_batch(args.pop("states"), **args)
    if kind == "structured.decide":
        return laya.structured.decide(runner, args.pop("state"), **args)
    if kind == "structured.decide_batch":
        return laya.structured.decide_batch(runner, args.pop("states"), **args)
    raise AssertionError("unknown call %r" % kind)


def run(agents: Dict[str, Any], spec: Dict[str, Any]) -> Dict[str, Any]:
    result, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            result = encode(call(agents, spec))
        except (ValueError, TypeError) as exc:
            error = {"type": type(exc).__name__, "message": str(exc)}
    should_fail = spec["id"].startswith("error_")
    either = spec["call"].startswith("check_min_confidence")  # valid and invalid values alike
    if not either and should_fail != (error is not None):
        raise AssertionError("case %s: expected %s, got %r" % (spec["id"], "an error" if should_fail else
                                                               "success", error))
    return dict(spec, result=result, error=error, warnings=[str(w.message) for w in caught])


def _gated(obj: Any) -> List[Dict[str, Any]]:
    """Every answer dict in a recorded result that carries a gate threshold."""
    out: List[Dict[str, Any]] = []
    if isinstance(obj, dict):
        if "abstention_threshold" in obj:
            out.append(obj)
        for v in obj.values():
            out += _gated(v)
    elif isinstance(obj, list):
        for v in obj:
            out += _gated(v)
    return out


def check_margins(cases: List[Dict[str, Any]]) -> None:
    """No recorded Agent answer sits within MARGIN of its threshold (kime is float32 noise away)."""
    for c in cases:
        if c["checkpoint"] is None:
            continue
        for a in _gated(c["result"]):
            conf = a.get("answer_confidence")
            if isinstance(conf, float) and abs(conf - a["abstention_threshold"]) < MARGIN \
                    and a["abstention_threshold"] not in (0.0, 1.0):
                raise AssertionError("case %s: answer_confidence %r is within %g of its threshold %r"
                                     % (c["id"], conf, MARGIN, a["abstention_threshold"]))


def write(name: str, cases: List[Dict[str, Any]]) -> None:
    payload = mg.to_json({"laya_version": laya.__version__, "pydantic_version": pydantic.VERSION,
                          "cases": cases})
    text = json.dumps(payload)  # NaN != NaN, so the text is what must round-trip
    if json.dumps(json.loads(text)) != text:
        raise AssertionError("%s does not round-trip" % name)
    with open(GOLDENS / name, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")


def main() -> int:
    agents = {}
    for name in (T, M):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            agents[name] = laya.Agent(str(GOLDENS / "checkpoints" / name), device="cpu")
    out = {}
    for name, specs in (("confidence.json", confidence_cases()), ("structured.json", structured_cases())):
        ids = [s["id"] for s in specs]
        assert len(set(ids)) == len(ids), "case ids must be unique in %s" % name
        cases = [run(agents, s) for s in specs]
        check_margins(cases)
        write(name, cases)
        out[name] = cases
        print("%s: %d cases (%d errors, %d through an agent)"
              % (name, len(cases), sum(c["error"] is not None for c in cases),
                 sum(c["checkpoint"] is not None for c in cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
