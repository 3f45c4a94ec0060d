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
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from ...laya.structured import (decide, decide_batch, questions_from_json_schema,
                                questions_from_pydantic)
from ..controls import (predict_kwargs, reject_remote_hooks, reject_remote_lang_guess,
                        require_router_controls, router_kwargs)
from ..remote import call_remote
from ..runner import can_batch, default_router
from .base import LayaRunnable, RunnableConfig, fields_of
from .text import StateKey


def validate_schema(schema: Any) -> None:
    """Plan `schema` into questions for its errors alone (a pydantic model, else JSON)."""
    if hasattr(schema, "model_json_schema") or hasattr(schema, "schema"):
        questions_from_pydantic(schema)
    else:
        questions_from_json_schema(schema)


class RemoteRunner:
    """A laya-serve-compatible server behind the `predict` that `decide` calls, so a remote
    decision shares the in-process projection."""

    def __init__(self, base_url: str, api_key: Optional[str] = None) -> None:
        self.base_url = base_url
        self.api_key = api_key

    def predict(self, state: Any, questions: Dict[str, Any], **overrides: Any) -> Dict[str, Any]:
        """One POST to `/v1/systemone`; `overrides` holds only the controls that were set."""
        return call_remote(self.base_url, state, questions, api_key=self.api_key, **overrides)


class LayaDecision(LayaRunnable):
    """Decides an input against `decision_schema` (a JSON schema dict or a pydantic model) and
    returns its values, or a `DecisionResult` with `return_details=True`. The runner and the
    per-call arguments are `LayaRouter`'s, but for `lang` and `min_confidence`."""

    decision_schema: Any
    return_details: bool = False

    def __init__(self, decision_schema: Any, return_details: bool = False,
                 state_key: StateKey = None, agent: Optional[Any] = None,
                 base_url: Optional[str] = None, api_key: Optional[str] = None,
                 model: Optional[str] = None, max_len: Optional[int] = None,
                 head_max_len: Optional[int] = None, task: Optional[str] = None,
                 lang_guess: Optional[Any] = None, hooks: Optional[Any] = None,
                 on_predict_start: Optional[Any] = None, on_predict_end: Optional[Any] = None,
                 hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None,
                 **kwargs: Any) -> None:
        validate_schema(decision_schema)
        super().__init__(**fields_of(locals()))

    def _runner(self) -> Tuple[Any, Dict[str, Any]]:
        """The runner `decide` calls and the overrides it forwards: the server, with hooks and
        a callable `lang_guess` refused by name; else the agent or the default Router, with
        the routing hints refused where its `predict` cannot read them."""
        hooked = self._hook_kwargs()
        overrides = predict_kwargs(self.model, self.max_len, self.head_max_len)
        routing = router_kwargs(self.task, self.lang_guess)
        runner: Any
        if self.base_url:
            reject_remote_hooks(hooked, self.base_url)
            reject_remote_lang_guess(routing, self.base_url)
            runner = RemoteRunner(self.base_url, self.api_key)
            overrides.update(routing)
        else:
            runner = self.agent if self.agent is not None else default_router()
            overrides.update(require_router_controls(runner, "predict", routing))
            overrides.update(hooked)
        return runner, overrides

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
        if (not inputs or return_exceptions or self._hook_kwargs()
                or not can_batch(self.agent, self.base_url)):
            return super().batch(inputs, config, return_exceptions=return_exceptions, **kwargs)
        runner, overrides = self._runner()
        return decide_batch(runner, [self._state(item) for item in inputs],
                            schema=self.decision_schema, return_details=self.return_details,
                            **overrides)
