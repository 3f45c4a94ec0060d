"""`LayaDecision`: a schema-driven LangChain runnable, `kime.decide` in a chain or a graph node
(laya 0.4.15's, in `laya/integrations/langchain.py`).

A JSON schema or a pydantic model in, its values out (an enum's choice, an integer level, a
boolean), or a `DecisionResult` with `return_details=True`. The schema is planned when the
runnable is built, so a property no fixed option set can answer (a free string, an array) is a
`SchemaError` there, before a chain has run. On a server (`base_url`) the decision is one POST
and the projection the same as in process. `lang` and `min_confidence` are not among its
arguments (laya's are not): passed, they are kept as extra attributes and not used.

`batch` plans once and decides every input in one engine pass (`decide_batch`) where the
runner has `predict_batch` and no hooks are set; otherwise input by input, as laya does.

No `from __future__ import annotations`: see `base`, LangGraph reads these hints.
"""
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ...laya.structured import (decide, decide_batch, questions_from_json_schema,
                                questions_from_pydantic)
from ..caller import Caller, Predicting, takes_controls
from .base import LayaRunnable, RunnableConfig, fields_of
from .text import StateKey


UNREAD = ("lang", "min_confidence")
"""The controls laya's `LayaDecision` does not take."""


def validate_schema(schema: Any) -> None:
    """Plan `schema` into questions for its errors alone (a pydantic model, else JSON)."""
    if hasattr(schema, "model_json_schema") or hasattr(schema, "schema"):
        questions_from_pydantic(schema)
    else:
        questions_from_json_schema(schema)


class LayaDecision(LayaRunnable):
    """Decides an input against `decision_schema` (a JSON schema dict or a pydantic model) and
    returns its values, or a `DecisionResult` with `return_details=True`. The runner and the
    per-call arguments are `LayaRouter`'s, but for `lang` and `min_confidence`."""

    decision_schema: Any
    return_details: bool = False

    @takes_controls(omit=UNREAD)
    def __init__(self, decision_schema: Any, return_details: bool = False,
                 state_key: StateKey = None, *, controls: Dict[str, Any],
                 **kwargs: Any) -> None:
        validate_schema(decision_schema)
        super().__init__(**fields_of(locals()))

    @property
    def caller(self) -> Caller:
        """Who answers, with the options this class forwards (not `lang` nor `min_confidence`,
        which it keeps as extra attributes when given, as laya's does)."""
        caller = Caller.of(self)
        return replace(caller, options=caller.options.without(*UNREAD))

    def _runner(self) -> Tuple[Any, Dict[str, Any]]:
        """What `decide` calls (the answerer, behind `predict`) and the options it forwards."""
        caller = self.caller
        return Predicting(caller.decider()), caller.options.given()

    def invoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Any:
        """The schema's values for one input, or its `DecisionResult`."""
        runner, overrides = self._runner()
        return decide(runner, self._state(input), schema=self.decision_schema,
                      return_details=self.return_details, **overrides)

    def batch(self, inputs: Sequence[Any],
              config: Optional[Union[RunnableConfig, List[RunnableConfig]]] = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> List[Any]:
        """Every input's values in one engine pass, in input order (see the module docstring
        for when it goes input by input)."""
        inputs = list(inputs)
        caller = self.caller
        if not inputs or return_exceptions or caller.options.hooked or not caller.batches():
            return super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        runner, overrides = self._runner()
        return decide_batch(runner, [self._state(item) for item in inputs],
                            schema=self.decision_schema, return_details=self.return_details,
                            **overrides)
