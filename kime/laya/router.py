"""Laya 0.4.15's `Router`: several checkpoints behind one object, each request sent to the one
suited to it (by explicit model, task, workflow, language hint or detected language; see
`kime.laya.routing`), with Laya's constructor, methods, hooks, results (`routing` on every
result) and refusals.

Engines are kime `Agent`s kept in an LRU of `max_loaded` (`kime.laya.residents`): loaded on first
use, one build shared by concurrent callers, and a model evicted mid-call finishes that call.
Answering is the call pipeline's (`kime.laya.call`): this module keeps the registry, the
engines and routing; `router_config` checks what a Router is built from.

kime's own, keyword-only: `idle_unload_seconds` unloads a checkpoint nobody has used for that
long (off by default; `laya serve`'s `LAYA_IDLE_UNLOAD_SECONDS` is the server's counterpart).
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import routing, structured
from .agent import Agent
from .call import batch_requests, check_requests, router_batch, router_one
from .confidence import MinConfidence
from .decider import Answers
from .driver import Step, run, run_async
from .options import PER_REQUEST, CallOptions
from .hooks import (HookArg, HookRegistry, PredictContext, PredictHookArg, compose_hooks, dispatch,
                    normalise_hooks, validate_timeout)
from .long import LongScan
from .residents import Residents, start_reaper
from .scope import open_scope
from .router_config import (ABSENT, agent_options, check_agent_kwargs, checked_registration,
                            count_loaded, digests_from_env, idle_seconds, pin)
from .routing import RouteDecision, canonical_name, refusal, repo_str, split_spec

State = Union[str, Dict[Any, Any], List[Any]]
Questions = Dict[Any, Any]


class Router(HookRegistry, Answers):
    """Several Laya checkpoints behind Laya's `Router` API.

        router = kime.Router(models={"english": "/ckpt/en", "multilingual": "/ckpt/ml"})
        router.predict({"message": "Mein Konto wurde zweimal belastet"}, questions)  # multilingual
        router.predict("I was charged twice", questions)                             # english
        router.predict(state, questions, model="typed-decisions")                    # explicit

    `models` adds or re-points checkpoints (name -> repo id, local directory or (repo,
    subfolder)); the built-ins are `english`, `multilingual` and `typed-decisions` of the bundle
    repo (`standalone_repos=True`: their own repos). `default` takes text detection cannot
    decide. `max_loaded` bounds the resident engines (least recently used evicted); `preload`
    builds them all now. `revision` pins every Hub checkpoint, `revisions` one by one;
    `sha256_digests` and `agent_kwargs` reach every `Agent` built. `lang_guess` is a language
    code or a callable `state -> code` consulted before detection. Hooks: `on_route`, `on_load`,
    `on_evict`, and `on_predict_start` / `on_predict_end` / `on_error` around each call.
    """

    def __init__(self, models: Optional[Dict[str, Any]] = None, device: Optional[str] = None,
                 token: Optional[str] = None, revision: Optional[str] = None,
                 revisions: Optional[Dict[str, Optional[str]]] = None, max_loaded: int = 2,
                 default: str = "multilingual", auto_task_detection: bool = False,
                 standalone_repos: bool = False, preload: bool = False, lang_guess: Any = None,
                 hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                 on_predict_end: PredictHookArg = None, hooks_raise: bool = True,
                 hooks_concurrent: bool = True, hooks_timeout: Optional[float] = None,
                 agent_kwargs: Optional[Dict[str, Any]] = None,
                 sha256_digests: Optional[Dict[str, Optional[Dict[str, str]]]] = None, *,
                 idle_unload_seconds: Optional[float] = None):
        self.hooks = normalise_hooks(hooks, on_predict_start, on_predict_end)
        self.hooks_raise = bool(hooks_raise)
        self.hooks_concurrent = bool(hooks_concurrent)
        self.hooks_timeout = validate_timeout(hooks_timeout)
        self._hooks_lock: Any = None if hooks_concurrent else threading.RLock()
        self._hooks_mutex = threading.Lock()
        self.models: Dict[str, Any] = dict(routing.STANDALONE_MODELS if standalone_repos
                                           else routing.DEFAULT_MODELS)
        self.descriptions: Dict[str, str] = {}
        for name, source in (models or {}).items():
            self._add(name, source)
        self.device = device
        self.token = token or os.environ.get("HF_TOKEN")
        self.revision = revision
        self.revisions = {self.resolve(k): v for k, v in (revisions or {}).items()}
        self.agent_kwargs = dict(agent_kwargs or {})
        if self.agent_kwargs:
            check_agent_kwargs(self.agent_kwargs)
        self.sha256_digests: Dict[str, Optional[Dict[str, str]]] = digests_from_env(
            self.models, self.resolve)
        self.sha256_digests.update({self.resolve(k): v for k, v in (sha256_digests or {}).items()})
        self._residents = Residents(count_loaded(max_loaded))
        self.default = self.resolve(default)
        self.auto_task_detection = bool(auto_task_detection)
        self.lang_guess = lang_guess
        self._lock = self._residents.lock
        idle = idle_seconds(idle_unload_seconds)
        if idle:
            start_reaper(self, idle, Router._unload_idle)
        if preload:
            self.preload()

    @property
    def max_loaded(self) -> int:
        """How many engines stay resident (least recently used evicted first)."""
        return self._residents.max_loaded

    @max_loaded.setter
    def max_loaded(self, value: int) -> None:
        with self._lock:
            self._residents.max_loaded = count_loaded(value)
            evicted = self._residents.evict_locked()
        self._evicted(evicted)

    # --- the registry -----------------------------------------------------------------------

    def resolve(self, name: Any) -> str:
        """The registered key `name` names (a built-in, an alias, or a checkpoint registered
        here); refused, listing what is known, otherwise."""
        key = canonical_name(name)
        if key not in self.models:
            raise routing.unknown_model(name, self.models)
        return key

    def register(self, name: str, source: Any, description: Optional[str] = None) -> str:
        """Serve the checkpoint at `source` (a repo id, a local directory, or (repo, subfolder))
        under `name`, beside the built-ins; nothing loads until it is used. Re-registering a
        name replaces its source and unloads its engine. Returns the canonical name."""
        missing = object()
        with self._lock:
            key = canonical_name(name)
            tables: List[Dict[str, Any]] = [self.models, self.sha256_digests, self.descriptions]
            before = [(table, table.get(key, missing)) for table in tables]
            try:
                key = self._add(name, source)
                if key not in self.sha256_digests:
                    from_env = digests_from_env([key], canonical_name).get(key)
                    if from_env is not None:
                        self.sha256_digests[key] = from_env
                if description is not None:
                    self.descriptions[key] = str(description)
            except BaseException:  # a refused registration leaves the router as it was
                for table, old in before:
                    if old is missing:
                        table.pop(key, None)
                    else:
                        table[key] = old
                raise
            replaced = before[0][1] is not missing and before[0][1] != self.models[key]
        if replaced:
            self._evicted(self._residents.remove(key))
        return key

    def unregister(self, name: str) -> None:
        """Remove a registered checkpoint and its engine (a call holding it finishes first).
        Built-ins and the default cannot be removed."""
        key = self.resolve(name)
        if key in routing.DEFAULT_MODELS:
            raise refusal(
                ["model"], "%r is a built-in checkpoint and cannot be unregistered" % key, name)
        if key == self.default:
            raise refusal(
                ["model"], "%r is this Router's default checkpoint; set another default "
                "before unregistering it" % key, name)
        with self._lock:
            self.models.pop(key, None)
        freed = self._residents.remove(key)
        with self._lock:
            for table in (self.descriptions, self.sha256_digests, self.revisions):
                table.pop(key, None)
        self._evicted(freed)

    @property
    def registered(self) -> Dict[str, Dict[str, Any]]:
        """The checkpoints registered beside the built-ins: name -> source and description."""
        with self._lock:
            return {name: {"source": repo_str(spec), "description": self.descriptions.get(name)}
                    for name, spec in self.models.items() if name not in routing.DEFAULT_MODELS}

    def _add(self, name: Any, source: Any) -> str:
        key, checked = checked_registration(name, source)
        self.models[key] = checked
        return key

    # --- engines ----------------------------------------------------------------------------

    def load(self, name: str) -> Any:
        """The engine (`Agent`) for `name`, built on first use; concurrent callers share one
        build."""
        return self._load(self.resolve(name), lease=False)

    def _load(self, key: str, lease: bool) -> Any:
        agent, built, evicted = self._residents.acquire(key, lambda: self._build(key), lease)
        self._evicted(evicted)
        if built:
            self._lifecycle("on_load", key, agent)
        return agent

    @contextmanager
    def lease(self, name: str) -> Iterator[Any]:
        """The engine (`Agent`) for `name`, loaded if need be and held for the block: an
        eviction or `unload` meanwhile takes it out of the LRU but lets it go only after the
        block (kime's own; the server answers asynchronously through it)."""
        agent = self.acquire(self.resolve(name))
        try:
            yield agent
        finally:
            self.release(agent)

    def acquire(self, key: str) -> Any:
        """The agent for the registered `key`, loaded if need be and held until `release`: an
        eviction meanwhile takes it out of the LRU but lets it go only after (what `lease`
        and the call pipeline hold an agent with)."""
        return self._load(key, lease=True)

    def release(self, agent: Any) -> None:
        """Give back an agent `acquire` returned."""
        self._residents.release(agent)

    def resident(self) -> Dict[str, Any]:
        """The resident engines by name, a snapshot (reading it does not count as a use)."""
        with self._lock:
            return dict(self._residents.agents)

    def _build(self, key: str) -> Any:
        with self._lock:
            if self.models.get(key) is None:
                raise refusal(
                    ["model"], "checkpoint %r has no source to load from: it was attached as a "
                    "built Agent and is no longer resident; attach it again, or register a path "
                    "or repo" % key, key)
            repo, sub = split_spec(self.models[key])
            options = agent_options(self.device, self.token, sub,
                                    pin(self.revisions.get(key)) or pin(self.revision),
                                    self.agent_kwargs,
                                    self.sha256_digests.get(key, ABSENT))
        return Agent(repo, **options)

    def _evicted(self, evicted: List[Tuple[str, Any]]) -> None:
        for name in self._residents.let_go(evicted):
            self._lifecycle("on_evict", name)

    def _lifecycle(self, event: str, name: str, agent: Any = None) -> None:
        dispatch(compose_hooks(self.hooks), event,
                 PredictContext(states=[], questions={}, model=name, agent=agent, router=self),
                 raise_errors=self.hooks_raise, lock=self._hooks_lock, timeout=self.hooks_timeout)

    def _unload_idle(self, seconds: float) -> None:
        self._evicted(self._residents.idle(seconds))

    def attach(self, name: str, agent: Any) -> Any:
        """Serve an already-built agent under `name` (registered without a source when new), so
        the process holds one copy; `max_loaded` grows to keep it resident."""
        with self._lock:
            try:
                key = self.resolve(name)
            except ValueError:
                key = self._add(name, None)
            replaced = self._residents.attach(key, agent)
        self._residents.let_go(replaced)  # Laya fires no on_evict for a replaced agent
        return agent

    def preload(self, names: Optional[List[str]] = None) -> "Router":
        """Build checkpoints now (every one with a source, by default), raising `max_loaded` so
        none evicts another: a load costs seconds, routing microseconds."""
        with self._lock:
            if names is None:
                names = [n for n, source in self.models.items() if source is not None]
        keys = [self.resolve(n) for n in names]
        with self._lock:
            self._residents.max_loaded = max(self.max_loaded,
                                             len(set(keys) | set(self._residents.agents)))
        for key in keys:
            with self._lock:
                resident = key in self._residents.agents
            if not resident:
                self.load(key)
        return self

    def unload(self, name: Optional[str] = None) -> None:
        """Free one engine, or all; a call holding one finishes first."""
        self._evicted(self._residents.remove(None if name is None else self.resolve(name)))

    @property
    def loaded(self) -> List[str]:
        """The resident checkpoints, least recently used first."""
        with self._lock:
            return list(self._residents.order)

    @property
    def loaded_revisions(self) -> Dict[str, Optional[str]]:
        """The Hub commit each resident engine was loaded at (None for a local directory)."""
        with self._lock:
            return {name: getattr(agent, "revision", None)
                    for name, agent in self._residents.agents.items()}

    # --- routing ----------------------------------------------------------------------------

    def route(self, state: Any, questions: Optional[Questions] = None, model: Optional[str] = None,
              task: Optional[str] = None, lang: Optional[str] = None, lang_guess: Any = None,
              hooks: HookArg = None, hooks_raise: Optional[bool] = None,
              hooks_timeout: Optional[float] = None, *, explain: bool = False) -> RouteDecision:
        """Which checkpoint `state` goes to and why, loading nothing; `on_route` hooks see the
        decision and may replace it. `explain=True` adds detection's diagnostic."""
        if questions is not None and not isinstance(questions, dict):
            raise refusal(
                ["questions"], "questions must be a dict of question id -> definition, got %s"
                % type(questions).__name__, repr(questions), "type_error")
        decision = routing.decide(
            state, questions, models=self.models, resolve=self.resolve, default=self.default,
            auto_task_detection=self.auto_task_detection, installed_guess=self.lang_guess,
            model=model, task=task, lang=lang, lang_guess=lang_guess, explain=explain)
        scope = open_scope(self, CallOptions(hooks=hooks, hooks_raise=hooks_raise,
                                             hooks_timeout=hooks_timeout), None)
        ctx = PredictContext(states=[state], questions=questions or {}, decision=decision,
                             router=self)
        scope.dispatch("on_route", ctx)
        return ctx.decision  # type: ignore[return-value]  # as Laya: what on_route hooks left

    def route_batch(self, requests: Sequence[Dict[str, Any]],
                    hooks_timeout: Optional[float] = None, *, hooks: HookArg = None,
                    hooks_raise: Optional[bool] = None, explain: bool = False
                    ) -> List[RouteDecision]:
        """Route every request (`state`, `questions`, optional `model`, `task`, `lang`,
        `lang_guess`) without loading anything; decisions in input order. Every malformed
        request is reported at once."""
        check_requests(requests)
        return [self.route(r["state"], r["questions"], model=r.get("model"), task=r.get("task"),
                           lang=r.get("lang"), lang_guess=r.get("lang_guess"), hooks=hooks,
                           hooks_raise=hooks_raise, hooks_timeout=hooks_timeout, explain=explain)
                for r in requests]

    # --- answering --------------------------------------------------------------------------

    def predict(self, state: State, questions: Questions, model: Optional[str] = None,
                task: Optional[str] = None, lang: Optional[str] = None, lang_guess: Any = None,
                hooks: HookArg = None, on_predict_start: PredictHookArg = None,
                on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                hooks_timeout: Optional[float] = None, max_len: Optional[int] = None,
                head_max_len: Optional[int] = None,
                min_confidence: Optional[MinConfidence] = None) -> Dict[str, Any]:
        """Route, then answer every question in one forward pass on the chosen checkpoint:
        `Agent.predict`'s result plus `routing` (the decision). Hooks on the Router wrap the
        whole call and see `ctx.decision`."""
        return run(router_one(self, state, questions, CallOptions.take(locals())))

    async def predict_async(self, state: State, questions: Questions, model: Optional[str] = None,
                            task: Optional[str] = None, lang: Optional[str] = None,
                            lang_guess: Any = None, hooks: HookArg = None,
                            on_predict_start: PredictHookArg = None,
                            on_predict_end: PredictHookArg = None,
                            hooks_raise: Optional[bool] = None,
                            hooks_timeout: Optional[float] = None, max_len: Optional[int] = None,
                            head_max_len: Optional[int] = None,
                            min_confidence: Optional[MinConfidence] = None) -> Dict[str, Any]:
        """`predict` for asyncio (kime's own): routing, loading and hooks run off the loop."""
        return await run_async(router_one(self, state, questions, CallOptions.take(locals())))

    system_one = predict

    def predict_long(self, state: State, questions: Questions, model: Optional[str] = None,
                     task: Optional[str] = None, lang: Optional[str] = None,
                     lang_guess: Any = None, window: Optional[int] = None,
                     stride: Optional[int] = None, aggregate: str = "auto",
                     batch_size: Optional[int] = None, hooks: HookArg = None,
                     on_predict_start: PredictHookArg = None,
                     on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                     hooks_timeout: Optional[float] = None) -> Dict[str, Any]:
        """Route as `predict` does, then scan every window of the state with the chosen
        agent's `predict_long` (`usage["windows"]` counts them), after the start hooks."""
        options = CallOptions.take(locals()).but(
            hooks=normalise_hooks(hooks, on_predict_start, on_predict_end),
            on_predict_start=None, on_predict_end=None)
        return run(router_one(self, state, questions, options,
                              long=LongScan(window, stride, aggregate, batch_size, lang)))

    def predict_batch(self, requests: Sequence[Dict[str, Any]], batch_size: Optional[int] = None,
                      hooks_timeout: Optional[float] = None,
                      min_confidence: Optional[MinConfidence] = None,
                      sort_by_length: bool = False, *, hooks: HookArg = None,
                      on_predict_start: PredictHookArg = None,
                      on_predict_end: PredictHookArg = None, hooks_raise: Optional[bool] = None,
                      diagnostics: Optional[Dict[str, Any]] = None) -> List[Dict[str, Any]]:
        """Route every request, then answer them grouped by checkpoint, question schema and
        token budget, one shared `Agent.predict_batch` per group; results (with `routing`) in
        the caller's order. Each request may carry `model`, `task`, `lang`, `lang_guess`,
        `max_len` and `head_max_len`; Router hooks run per request, as in `predict`."""
        return run(router_batch(self, requests, CallOptions.take(locals()),
                                batch_size=batch_size, sort_by_length=sort_by_length,
                                diagnostics=diagnostics))

    async def predict_batch_async(self, requests: Sequence[Dict[str, Any]],
                                  batch_size: Optional[int] = None,
                                  hooks_timeout: Optional[float] = None,
                                  min_confidence: Optional[MinConfidence] = None,
                                  sort_by_length: bool = False, *, hooks: HookArg = None,
                                  on_predict_start: PredictHookArg = None,
                                  on_predict_end: PredictHookArg = None,
                                  hooks_raise: Optional[bool] = None,
                                  diagnostics: Optional[Dict[str, Any]] = None
                                  ) -> List[Dict[str, Any]]:
        """`predict_batch` for asyncio (kime's own), each checkpoint's hooks in Laya's order."""
        return await run_async(router_batch(self, requests, CallOptions.take(locals()),
                                            batch_size=batch_size, sort_by_length=sort_by_length,
                                            diagnostics=diagnostics))

    # --- the Decider protocol (`kime.laya.decider`) -----------------------------------------

    def _one(self, state: State, questions: Questions,
             options: CallOptions) -> "Step[Dict[str, Any]]":
        return router_one(self, state, questions, options)

    def _many(self, states: List[State], questions: Questions, options: CallOptions,
              batch_size: Optional[int]) -> "Step[List[Dict[str, Any]]]":
        """One request per state, each carrying the routing options and budgets; the gate and
        the hooks are the batch call's."""
        return router_batch(self, batch_requests(states, questions, options),
                            options.without(*PER_REQUEST), batch_size=batch_size)

    predict_many = predict_batch

    def decide(self, state: State, schema: Any = None, *, questions: Optional[Questions] = None,
               return_details: bool = False, min_confidence: Optional[MinConfidence] = None,
               **predict_kwargs: Any) -> Any:
        """Typed values for a JSON Schema or pydantic model (see `kime.laya.structured`);
        other keywords (`model=`, `task=`, hooks) go to `predict`."""
        return structured.decide(self, state, schema, questions=questions,
                                 return_details=return_details, min_confidence=min_confidence,
                                 **predict_kwargs)

    def decide_batch(self, states: Sequence[Any], schema: Any = None, *,
                     questions: Optional[Questions] = None, return_details: bool = False,
                     min_confidence: Optional[MinConfidence] = None,
                     **predict_kwargs: Any) -> List[Any]:
        """`decide` over many states through one `predict_batch`, in input order."""
        return structured.decide_batch(self, states, schema, questions=questions,
                                       return_details=return_details,
                                       min_confidence=min_confidence, **predict_kwargs)

    def __enter__(self) -> "Router":
        return self

    def __exit__(self, *exc: object) -> None:
        self.unload()

    def __repr__(self) -> str:
        return "Router(loaded=%s, max_loaded=%d, default=%r)" % (self.loaded, self.max_loaded,
                                                                 self.default)


__all__ = ["Router", "RouteDecision", "check_agent_kwargs"]
