"""The request bodies of laya serve's two POST routes as JSON Schema, for `/openapi.json`.

The handlers read raw JSON and check it themselves (laya serve's order of checks and texts), so
FastAPI cannot derive these; they are written out here so the OpenAPI document tells clients
and generators (and the schemathesis run in the tests) what a body holds. The bounds are the
handlers' own (`kime.laya.limits`), so the document cannot promise more than the server takes.
"""
from __future__ import annotations

from typing import Any, Dict

from ..laya import limits

STATE: Dict[str, Any] = {
    "description": "The text, JSON object or conversation (a list of turns) to decide about.",
    "type": ["string", "object", "array"],
}
QUESTION: Dict[str, Any] = {
    "type": "object",
    "required": ["type", "instructions"],
    "properties": {
        "type": {"enum": ["choice", "score", "noul"]},
        "instructions": {"type": ["string", "object", "array"]},
        "criteria": {"description": "choice: label -> description, or a list of labels; score: "
                                    "level descriptions, index 0 first; noul: optional "
                                    "'true'/'false' descriptions",
                     "type": ["object", "array"]},
        "labels": {"type": "object", "properties": {"false": {"type": "string"},
                                                    "true": {"type": "string"}}},
        "option_order": {"type": "array", "items": {"type": "integer", "minimum": 0}},
    },
}
QUESTIONS: Dict[str, Any] = {"type": "object", "additionalProperties": QUESTION,
                             "maxProperties": limits.QUESTIONS}
BUDGET: Dict[str, Any] = {"type": "integer", "minimum": 1}
COMMON: Dict[str, Any] = {
    "questions": QUESTIONS,
    "max_len": BUDGET,
    "head_max_len": BUDGET,
    "model": {"type": "string", "description": "the checkpoint to answer with: the served "
              "model's id; over a Router, a served name, an alias or a published Hub id (omit "
              "it to let the Router choose)"},
    "task": {"type": ["string", "null"], "description": "over a Router: the task's checkpoint "
             "(typed-decisions)"},
    "lang": {"type": ["string", "null"], "description": "the state's language code; over a "
             "Router it routes"},
    "lang_guess": {"type": ["string", "null"], "description": "over a Router: a soft language "
                   "hint, checked after lang and before detection"},
    "min_confidence": {"type": ["number", "object", "null"], "description": "over a Router: "
                       "mark answers below this confidence (a float in [0, 1] or a per-bucket "
                       "map) low_confidence"},
}
SYSTEMONE: Dict[str, Any] = {
    "type": "object", "required": ["state", "questions"],
    "properties": dict(COMMON, state=STATE),
}
BATCH: Dict[str, Any] = {
    "type": "object", "required": ["states", "questions"],
    "properties": dict(COMMON, states={"type": "array", "items": STATE,
                                       "maxItems": limits.BATCH_STATES},
                       batch_size={"type": "integer", "minimum": 1},
                       sort_by_length={"type": "boolean"}),
}


def request_body(schema: Dict[str, Any]) -> Dict[str, Any]:
    """`openapi_extra` for a route whose JSON body follows `schema`."""
    return {"requestBody": {"required": True,
                            "content": {"application/json": {"schema": schema}}}}
