"""`laya.structured` at kime's path (`from kime.structured import decide`): schema-driven
decisions, from `kime.laya.structured`."""
from .laya.schemas import MAX_OPTIONS, MAX_PROPERTIES, MAX_SCORE_LEVELS
from .laya.structured import (DecisionResult, SchemaError, answer_confidence_value,
                              answer_to_pydantic,
                              answers_to_json, apply_confidence_gate, check_min_confidence,
                              decide, decide_batch, plan_from_json_schema,
                              questions_from_json_schema, questions_from_pydantic)

__all__ = ["DecisionResult", "MAX_OPTIONS", "MAX_PROPERTIES", "MAX_SCORE_LEVELS", "SchemaError",
           "answer_confidence_value", "answer_to_pydantic", "answers_to_json",
           "apply_confidence_gate", "check_min_confidence", "decide", "decide_batch",
           "plan_from_json_schema", "questions_from_json_schema", "questions_from_pydantic"]
