"""LlamaIndex on kime: laya 0.4.15's `LayaSingleSelector`, `LayaMultiSelector` and
`LayaQueryRouter` (`laya.integrations.llamaindex`), with laya's arguments, defaults, outputs and
errors.

The two selectors replace LlamaIndex's `LLMSingleSelector` / `LLMMultiSelector`: one choice
question over the candidates' names and descriptions, answered in one forward pass. They are
LlamaIndex `BaseSelector`s returning LlamaIndex's own `SelectorResult` of `SingleSelection`s, so
`RouterQueryEngine(selector=LayaSingleSelector(...))` routes by them (laya 0.4.15 falls back to
stand-in classes under llama-index-core 0.14, whose result has no `inds`, and the engine fails).
They live in `llamaindex_selectors`, which imports llama-index-core; this module imports it only
when a selector is first asked for, and names `pip install 'kime[llamaindex]'` when it is missing.
`LayaQueryRouter` dispatches a query to one of a dict of engines or callables and needs no
LlamaIndex at all.

Every class takes `agent=` (a `kime.load` agent or a `kime.Router`), or `base_url=` / `api_key=`
for a laya-serve-compatible server, or neither (the shared default `kime.Router()`), and the
per-call controls (`kime.integrations.caller`).
"""
from __future__ import annotations

import asyncio
import importlib
import inspect
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Dict, Optional

from .caller import takes_controls
from .llamaindex_common import DecisionControls, query_text
from .reading import Unanswered, pick

if TYPE_CHECKING:  # at run time, module __getattr__ below (they import llama-index-core)
    from .llamaindex_selectors import LayaMultiSelector, LayaSingleSelector

INSTALL = "pip install 'kime[llamaindex]'"

_SELECTORS = ("LayaSingleSelector", "LayaMultiSelector")


class LayaQueryRouter(DecisionControls):
    """Send a query straight to one of several query engines (or callables), picked by one
    choice question over their keys and descriptions; no LlamaIndex router in between.

    `route` answers the key; `query` / `aquery` call that engine's `query` / `aquery` (or the
    engine itself when it is a callable). Below `confidence_threshold` the route is
    `fallback_key` (default: the first key), as is a choice that names no engine.
    """

    @takes_controls()
    def __init__(self, query_engines: Dict[str, Any],
                 descriptions: Optional[Dict[str, str]] = None,
                 instructions: str = "Which query engine should handle this request?",
                 confidence_threshold: float = 0.0, fallback_key: Optional[str] = None, *,
                 controls: Dict[str, Any]) -> None:
        # laya reads `.keys()` off whatever it is given and fails with AttributeError; a clear
        # refusal naming the argument instead.
        if not isinstance(query_engines, Mapping):
            raise TypeError("query_engines must be a dict of key -> query engine, got %s"
                            % type(query_engines).__name__)
        self.query_engines = query_engines
        self.descriptions = descriptions or {}
        self.instructions = instructions
        self.confidence_threshold = confidence_threshold
        self.fallback_key = fallback_key or next(iter(query_engines.keys()), None)
        self._keep_controls(controls)

    def route(self, query: Any) -> str:
        """The key of the engine that should answer `query` (a `str` or `QueryBundle`): the
        reply's pick, or `fallback_key` under the threshold, or for a reply that answers
        without naming an engine (laya's rule; a reply that cannot be read is refused)."""
        criteria = {key: self.descriptions.get(key, "Engine for %s" % key)
                    for key in self.query_engines}
        decision = self._decide(query_text(query), {"route": {
            "type": "choice", "instructions": self.instructions, "criteria": criteria}})
        try:
            chosen = pick(decision, "route", list(criteria), self._where(),
                          self.confidence_threshold)
        except Unanswered:
            return self.fallback_key or next(iter(self.query_engines))
        if chosen.low and self.fallback_key:
            return self.fallback_key
        return chosen.key

    def query(self, query: Any, **kwargs: Any) -> Any:
        """Route `query`, then answer it with that engine's `query` (or by calling it)."""
        key = self.route(query)
        engine = self.query_engines[key]
        if hasattr(engine, "query"):
            return engine.query(query, **kwargs)
        if callable(engine):
            return engine(query, **kwargs)
        raise _not_an_engine(key)

    async def aquery(self, query: Any, **kwargs: Any) -> Any:
        """`query` without blocking the event loop: the decision runs in a worker thread, then
        the engine's `aquery`, its `query` in a thread, or the callable (awaited when async)."""
        key = await asyncio.to_thread(self.route, query)
        engine = self.query_engines[key]
        if hasattr(engine, "aquery"):
            return await engine.aquery(query, **kwargs)
        if hasattr(engine, "query"):
            return await asyncio.to_thread(engine.query, query, **kwargs)
        if callable(engine):
            if inspect.iscoroutinefunction(engine):
                return await engine(query, **kwargs)
            return await asyncio.to_thread(engine, query, **kwargs)
        raise _not_an_engine(key)


def _not_an_engine(key: str) -> TypeError:
    return TypeError("Engine registered for key %r is not callable and has no .query() method."
                     % key)


def __getattr__(name: str) -> Any:
    # The selectors subclass LlamaIndex's BaseSelector, so their module imports llama-index-core:
    # loaded on first use, with the extra to install when it is missing.
    if name not in _SELECTORS:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    try:
        module = importlib.import_module(__name__ + "_selectors")
    except ImportError as e:
        if not (e.name or "").startswith("llama_index"):
            raise
        raise ImportError("%s needs llama-index-core, which is not installed: %s"
                          % (name, INSTALL), name=e.name) from e
    value = getattr(module, name)
    globals()[name] = value
    return value


__all__ = ["LayaSingleSelector", "LayaMultiSelector", "LayaQueryRouter"]
