"""What the six LangChain classes share: the langchain-core import (with the extra to install
when it is missing), the controls every class keeps as pydantic fields (its constructor takes
them through `caller.takes_controls`), and the runnable that decides one input per `invoke` and
a list of them in one engine pass per `batch` (laya 0.4.15's `_BatchedRunnable`).

No `from __future__ import annotations` here nor in the class modules, on purpose: LangGraph 1.2
reads a conditional edge's type hints with `typing.get_type_hints(router)`, which evaluates
string annotations with no module namespace, and laya's (`"Dict[str, str]"`, ...) fail there
with `NameError: name 'Dict' is not defined` while the graph is built. Real annotations need no
namespace.
"""
from typing import Any, Dict, List, Optional, Sequence, Union

from ..caller import Caller
from .text import StateKey, extract_text

EXTRA = "pip install 'kime[langchain]'"

try:
    from langchain_core.runnables import RunnableConfig, RunnableSerializable
    from langchain_core.runnables.config import run_in_executor
    from pydantic import ConfigDict
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError("kime's LangChain integration needs langchain-core: %s (%s)"
                      % (EXTRA, exc), name=exc.name) from exc

def fields_of(values: Dict[str, Any]) -> Dict[str, Any]:
    """A constructor's `locals()` as pydantic field values: its named arguments, the controls
    `takes_controls` gathered, and whatever came in `**kwargs` (kept as extra attributes, as
    laya does)."""
    extra = values.pop("kwargs", {})
    controls = values.pop("controls")
    named = {k: v for k, v in values.items() if k not in ("self", "__class__")}
    return dict(named, **controls, **extra)


def per_input_config(config: Any, n: int) -> List[Any]:
    """One config per input: `batch` is given one config, a list of them, or None."""
    if config is None:
        return [None] * n
    if isinstance(config, list):
        return list(config)
    return [config] * n


class LayaRunnable(RunnableSerializable):
    """The fields every class has, and `__call__` for use as a bare LangGraph callable."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="allow")

    state_key: StateKey = None
    agent: Optional[Any] = None
    base_url: Optional[str] = None
    api_key: Optional[str] = None
    model: Optional[str] = None
    max_len: Optional[int] = None
    head_max_len: Optional[int] = None
    task: Optional[str] = None
    lang_guess: Optional[Any] = None
    hooks: Optional[Any] = None
    on_predict_start: Optional[Any] = None
    on_predict_end: Optional[Any] = None
    hooks_raise: Optional[bool] = None
    hooks_timeout: Optional[float] = None

    @property
    def caller(self) -> Caller:
        """Who answers, with which options: the fields as they are now."""
        return Caller.of(self)

    def _state(self, value: Any) -> Any:
        return extract_text(value, self.state_key)

    def __call__(self, state: Any) -> Any:
        """`invoke(state)`: the callable form LangGraph also accepts as a node or an edge."""
        return self.invoke(state)

    async def abatch(self, inputs: Sequence[Any],
                     config: Optional[Union[RunnableConfig, List[RunnableConfig]]] = None, *,
                     return_exceptions: bool = False, **kwargs: Any) -> List[Any]:
        """`batch` (one engine pass where it can be) on the executor LangChain runs sync work
        on, the first config's."""
        inputs = list(inputs)
        first = per_input_config(config, max(len(inputs), 1))[0]
        return await run_in_executor(first, self.batch, inputs, config,
                                     return_exceptions=return_exceptions, **kwargs)


class BatchedRunnable(LayaRunnable):
    """One decision per `invoke`; a `batch` of inputs in one engine pass where the runner has
    `predict_batch` (LangChain's own `batch` would run `invoke` per input on a thread pool:
    N passes over the same questions). Outputs equal `invoke`'s, in input order.

    A subclass names its questions (`_questions`) and turns a decision into its output
    (`_finish`)."""

    lang: Optional[str] = None
    min_confidence: Optional[float] = None

    def _questions(self) -> Dict[str, Any]:
        raise NotImplementedError

    def _finish(self, result: Dict[str, Any], input: Any) -> Any:
        raise NotImplementedError

    def _decide(self, state: Any, questions: Dict[str, Any]) -> Dict[str, Any]:
        result: Dict[str, Any] = self.caller.decide(state, questions)
        return result

    def invoke(self, input: Any, config: Optional[RunnableConfig] = None, **kwargs: Any) -> Any:
        """Decide one input: on `agent`, on the server at `base_url`, or on the default Router."""
        return self._finish(self._decide(self._state(input), self._questions()), input)

    def batch(self, inputs: Sequence[Any],
              config: Optional[Union[RunnableConfig, List[RunnableConfig]]] = None, *,
              return_exceptions: bool = False, **kwargs: Any) -> List[Any]:
        """Every input in one batched call, outputs in input order. `return_exceptions` answers
        input by input (a shared pass fails as a whole); a server, or a Router with hooks, gets
        LangChain's per-input `batch`."""
        inputs = list(inputs)
        if not inputs:
            return []
        configs = per_input_config(config, len(inputs))
        if return_exceptions:
            outcomes: List[Any] = []
            for item, one in zip(inputs, configs):
                try:
                    outcomes.append(self.invoke(item, one, **kwargs))
                except Exception as exc:  # returned, per the Runnable contract
                    outcomes.append(exc)
            return outcomes
        caller = self.caller
        if not caller.batches():
            return super().batch(inputs, config, **kwargs)
        results = caller.decide_batch([self._state(item) for item in inputs], self._questions())
        return [self._finish(result, item) for result, item in zip(results, inputs)]
