"""Who answers an integration's decision, with which options: laya 0.4.15's per-call controls
(`_controls`, `_get_default_router`, `_execute_decision`, `_can_batch`, `_execute_batch`, which
laya repeats in each integration) kept once, as data.

Every framework class takes the same fifteen controls after its own arguments (`CONTROLS`):
where the decision runs (`agent`, `base_url`, `api_key`) and Laya's call options
(`kime.laya.options.CallOptions`). `takes_controls` appends them to a constructor's signature,
so each class writes only its own arguments, and keeps them as the attributes laya's classes
have. `Caller.of(adapter)` reads them back into who answers (a `Decider`: `agent` when it is a
kime `Agent` or `Router`, a `kime.client.Client` for `base_url`, the shared default
`kime.Router()` for neither, or any other object with `predict` through `Foreign`) and the
call's options, and makes the one call.

Laya's refusals, by name and before any work: hooks or a callable `lang_guess` aimed at a
server (`kime.client`), a routing hint or a `model` pin given to one `Agent` (`Agent.answer`),
and a routing hint an object's `predict` cannot read (`Foreign`).
"""
from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from ..laya.decider import Decider
from ..laya.options import NO_OPTIONS, PER_REQUEST, CallOptions, refuse_unread
from .reading import where_of

WHERE = ("agent", "base_url", "api_key")
"""Where a decision runs: a local answerer, or a server and its bearer key."""
CONTROLS = WHERE + ("model", "max_len", "head_max_len", "lang", "min_confidence", "task",
                    "lang_guess", "hooks", "on_predict_start", "on_predict_end", "hooks_raise",
                    "hooks_timeout")
"""The controls every framework class takes after its own arguments, in laya's order."""
TIMEOUT_S = 10.0
"""laya's integrations' HTTP timeout."""

_DEFAULT_ROUTER: Optional[Any] = None
_DEFAULT_ROUTER_LOCK = threading.Lock()


def default_router() -> Any:
    """The shared `kime.Router()` for an integration given neither `agent` nor `base_url`."""
    global _DEFAULT_ROUTER
    if _DEFAULT_ROUTER is None:
        with _DEFAULT_ROUTER_LOCK:
            if _DEFAULT_ROUTER is None:
                from ..laya.router import Router
                _DEFAULT_ROUTER = Router()
    return _DEFAULT_ROUTER


class Foreign:
    """An `agent=` that is neither a kime `Agent` nor a `Router` (laya's own, or any object with
    `predict`): called with the options it is given as keywords, a routing hint refused where
    the method's signature cannot read it."""

    def __init__(self, runner: Any):
        self.runner = runner

    def _kwargs(self, options: CallOptions, entry: str) -> Dict[str, Any]:
        method = getattr(self.runner, entry, None)
        refuse_unread(options, method, "%s.%s" % (type(self.runner).__name__, entry))
        return options.given()

    def answer(self, state: Any, questions: Dict[Any, Any], options: CallOptions) -> Any:
        return self.runner.predict(state, questions, **self._kwargs(options, "predict"))

    def answer_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                     options: CallOptions) -> List[Any]:
        """A Router-like object (it has `route_batch`) takes one request per state carrying
        the routing and budgets, the gate call-level; anything else the states and every
        option call-level."""
        if hasattr(self.runner, "route_batch"):
            carried = self._kwargs(options, "route")
            requests = [dict({k: v for k, v in carried.items() if k in PER_REQUEST},
                             state=state, questions=questions) for state in states]
            routed: List[Any] = self.runner.predict_batch(requests,
                                                          **options.given("min_confidence"))
            return routed
        results: List[Any] = self.runner.predict_batch(
            list(states), questions, **self._kwargs(options, "predict_batch"))
        return results


class Predicting:
    """A `Decider` behind Laya's `predict` / `predict_batch` keywords, for code written against
    those (`kime.laya.structured`'s decisions): the keywords become the call's options."""

    def __init__(self, decider: Any):
        self.decider = decider

    def predict(self, state: Any, questions: Dict[Any, Any], **options: Any) -> Any:
        return self.decider.answer(state, questions, CallOptions(**options))

    def predict_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                      **options: Any) -> List[Any]:
        results: List[Any] = self.decider.answer_batch(list(states), questions,
                                                       CallOptions(**options))
        return results


@dataclass(frozen=True)
class Caller:
    """One adapter's decision: who answers (`agent`, `base_url`, `api_key`) and the options."""

    agent: Any = None
    base_url: Optional[str] = None
    api_key: Optional[str] = None
    options: CallOptions = NO_OPTIONS

    @classmethod
    def of(cls, adapter: Any) -> "Caller":
        """The controls an adapter keeps (its attributes of `CONTROLS`' names)."""
        values = {name: getattr(adapter, name, None) for name in CONTROLS}
        return cls(values["agent"], values["base_url"], values["api_key"],
                   CallOptions.take(values))

    @property
    def where(self) -> str:
        """Who answers, as a malformed reply's error names it."""
        return where_of(self.base_url)

    def decider(self) -> Any:
        """The server's client, the agent (as itself, or `Foreign`), or the default Router."""
        if self.base_url:
            from ..client import Client, server_retry

            return Client(self.base_url, api_key=self.api_key, timeout=TIMEOUT_S,
                          retry=server_retry())
        runner = self.agent if self.agent is not None else default_router()
        return runner if isinstance(runner, Decider) else Foreign(runner)

    def decide(self, state: Any, questions: Dict[Any, Any]) -> Any:
        """One decision with every set option, where this caller says."""
        return self.decider().answer(state, questions, self.options)

    def batches(self) -> bool:
        """Whether one batched call can answer many inputs: not on a server (one POST a
        decision, as laya's), not without `predict_batch`, and not on a Router given per-call
        hooks (laya's `Router.predict_batch` takes none: the per-input loop runs them)."""
        if self.base_url:
            return False
        runner = self.agent if self.agent is not None else default_router()
        if self.options.hooked and hasattr(runner, "route_batch"):
            return False
        return getattr(runner, "predict_batch", None) is not None

    def decide_batch(self, states: Sequence[Any], questions: Dict[Any, Any]) -> List[Any]:
        """One question set over many states in shared forward passes, in input order."""
        results: List[Any] = self.decider().answer_batch(list(states), questions, self.options)
        return results


class Controlled:
    """What every framework class keeps of its controls (attributes named as laya's), and its
    one decision, kept as `last_decision`."""

    last_decision: Optional[Dict[str, Any]] = None
    agent: Any
    base_url: Optional[str]
    api_key: Optional[str]
    min_confidence: Any

    def _keep_controls(self, controls: Dict[str, Any]) -> None:
        for name, value in controls.items():
            setattr(self, name, value)
        self.last_decision = None

    @property
    def caller(self) -> Caller:
        """Who answers, with which options, read from the attributes as they are now."""
        return Caller.of(self)

    def _decide(self, state: Any, questions: Dict[str, Any]) -> Any:
        result = self.caller.decide(state, questions)
        self.last_decision = result
        return result


ANNOTATIONS: Dict[str, Any] = {
    "agent": Optional[Any], "base_url": Optional[str], "api_key": Optional[str],
    "model": Optional[str], "max_len": Optional[int], "head_max_len": Optional[int],
    "lang": Optional[str], "min_confidence": Optional[float], "task": Optional[str],
    "lang_guess": Optional[Any], "hooks": Optional[Any], "on_predict_start": Optional[Any],
    "on_predict_end": Optional[Any], "hooks_raise": Optional[bool],
    "hooks_timeout": Optional[float]}


def takes_controls(omit: Tuple[str, ...] = ()) -> Callable[[Callable[..., None]], Any]:
    """A constructor that takes the controls after its own arguments, as laya's do: the
    decorated `__init__(self, <own arguments>, *, controls[, **kwargs])` is called with the
    controls (all but `omit`, each defaulting to None) as one dict.

    The constructor is written out as a real function (as `dataclasses` writes `__init__`), so
    its signature and a wrong call's TypeError are laya's to the letter: own arguments, the
    controls, then `**kwargs`."""
    names = tuple(name for name in CONTROLS if name not in omit)

    def wrap(init: Callable[..., None]) -> Any:
        params = [p for p in inspect.signature(init).parameters.values()
                  if p.name != "controls"]
        head = [p for p in params if p.kind is p.POSITIONAL_OR_KEYWORD]
        tail = [p for p in params if p.kind is p.VAR_KEYWORD]
        defaults = {"_d_%s" % p.name: p.default for p in head if p.default is not p.empty}
        signature = ", ".join(
            [p.name if p.default is p.empty else "%s=_d_%s" % (p.name, p.name) for p in head]
            + ["%s=None" % name for name in names] + ["**%s" % p.name for p in tail])
        passed = ", ".join(["%s=%s" % (p.name, p.name) for p in head]
                           + ["controls={%s}" % ", ".join("%r: %s" % (n, n) for n in names)]
                           + ["**%s" % p.name for p in tail])
        source = "def __init__(%s):\n    _init(%s)\n" % (signature, passed)
        namespace: Dict[str, Any] = dict(defaults, _init=init)
        exec(source, namespace)
        made = namespace["__init__"]
        made.__qualname__ = init.__qualname__
        made.__module__ = init.__module__
        made.__doc__ = init.__doc__
        made.__annotations__ = dict(
            {p.name: p.annotation for p in head + tail if p.annotation is not p.empty},
            **{name: ANNOTATIONS[name] for name in names}, **{"return": None})
        return made
    return wrap


__all__ = ["CONTROLS", "Caller", "Controlled", "Foreign", "Predicting", "WHERE", "default_router",
           "takes_controls"]
