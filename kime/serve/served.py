"""What the server answers with: one checkpoint (`One`), or a Router over several (`Routed`).

Both give the app's single pipeline the same few steps: check a body, answer it, and describe
themselves to `/health`, `/ready`, `/v1/models` and `/metrics`. `One` is the single-model server:
one `Agent`, taking a body's controls as a Router does (`min_confidence`, `lang`, the bundle id).
`Routed` is laya serve's Router: each state is routed, its checkpoint is leased for the call,
and a response carries `routing`; a checkpoint that cannot be loaded is a 503 naming it. Both
answer through Laya's call pipeline (`kime.laya.call`), the rows going to each checkpoint's own
engine and scheduler; both narrow wide choices by elimination with `tournament_group`
(`narrowing`) and chunk a batch to `max_batch_tokens` (`limits.chunk_size`). A client that hangs
up drops its queued rows.
"""
from __future__ import annotations

import asyncio
import logging
import time
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple, Union,
                    cast)

from ..errors import InvalidRequest
from ..laya import Agent, limits
from ..laya.call import Routing, router_batch, router_one
from ..laya.driver import run_async
from ..laya.options import CallOptions
from ..laya.routing import repo_str
from . import narrowing
from .limits import chunk_size, refuse
from .metrics import Lifecycle, Metrics
from .routing import Ask, check_routed_body, check_single_body, route_all
from .settings import Settings

if TYPE_CHECKING:
    from ..engine import Kime

Engines = List[Tuple[Optional[str], "Kime"]]
"""(model label, engine) pairs, what `metrics.EngineCollector` reads; the label is None for the
single-model server."""


_log = logging.getLogger("kime.serve")


class Shaping:
    """What both servers take from the settings to shape an answer: the option cap and group
    size of the tournament, and the token budget a batch's forward pass is chunked to."""

    def __init__(self, settings: Settings):
        self.group = settings.tournament_group
        self.max_choice_options = (limits.TOURNAMENT_CHOICE_OPTIONS if self.group
                                   else limits.CHOICE_OPTIONS)
        self.max_token_budget = settings.max_token_budget
        self.max_batch_tokens = settings.max_batch_tokens

    def plan(self, ask: Ask) -> Optional[Dict[Any, List[Any]]]:
        """The choices to narrow (`narrowing.plan`), None when off or none is wide."""
        return narrowing.plan(ask.body.questions, self.group) if self.group else None

    def batch_size(self, ask: Ask) -> Optional[int]:
        """The caller's `batch_size`, never wider than `max_batch_tokens` allows (when set)."""
        body = ask.body
        if self.max_batch_tokens is None:
            return body.batch_size
        n_questions = len(body.questions) if isinstance(body.questions, dict) else 0
        planned = chunk_size(len(body.states), n_questions, ask.options.max_len,
                             self.max_batch_tokens)
        if body.batch_size is None:
            return planned
        return body.batch_size if planned is None else min(body.batch_size, planned)


class One:
    """One checkpoint, the server `--model SOURCE` runs, answered by its `Agent`."""

    registered = None  # metrics carry no model label

    def __init__(self, agent: Agent, settings: Settings, name: Optional[str] = None):
        self.agent = agent
        self.engine = agent.engine
        self.name = name or agent.model_id
        self.shaping = Shaping(settings)

    def check(self, raw: Any, batch: bool) -> Ask:
        return check_single_body(raw, batch, self.name, self.shaping.max_token_budget,
                                 self.shaping.max_choice_options)

    async def answer(self, ask: Ask, batch: bool) -> List[Dict[str, Any]]:
        """`Agent.predict` for one state, `Agent.predict_batch` for a batch, with the body's
        language, budgets and gate; each state narrowed by elimination when `plan` says so."""
        controls = ask.options.given("lang", "max_len", "head_max_len", "min_confidence")
        large = self.shaping.plan(ask)
        body = ask.body
        if large is not None:
            return list(await asyncio.gather(*(narrowing.answer(
                self.agent.predict_async, state, body.questions, large, self.shaping.group,
                **controls) for state in body.states)))
        if batch:
            return await self.agent.predict_batch_async(
                body.states, body.questions, batch_size=self.shaping.batch_size(ask),
                **controls)
        return [await self.agent.predict_async(body.states[0], body.questions, **controls)]

    def depth(self) -> int:
        return self.engine.scheduler.depth()

    def engines(self) -> Engines:
        return [(None, self.engine)]

    def watch(self, metrics: Metrics) -> None:
        """Nothing loads or unloads after startup."""

    def health(self) -> Dict[str, Any]:
        """laya serve's `/health` for the one checkpoint, and its name as `model`."""
        device = self.agent.device.type
        return {"status": "ok", "model": self.name, "loaded": [self.name],
                "revisions": {self.name: self.agent.revision}, "device": device,
                "device_is_preference": False, "checkpoint_devices": {self.name: device},
                "cpu_fallbacks": {self.name: {"count": self.agent.cpu_fallback_count,
                                              "last_reason": self.agent.last_fallback_reason}}}

    def ready(self) -> Dict[str, Any]:
        return {"loaded": [self.name], "device": self.engine.device}

    def listing(self) -> List[Dict[str, Any]]:
        return [{"id": self.name, "object": "model", "owned_by": "kime",
                 "device": self.engine.device, "max_row_tokens": self.engine.max_row_tokens}]

    async def idle_unloads(self) -> None:
        """Nothing to unload: the one engine stays."""

    def close(self) -> None:
        self.engine.close()


class Unavailable(Exception):
    """A checkpoint a request was routed to could not be loaded."""

    def __init__(self, key: str, cause: BaseException):
        super().__init__(key)
        self.key = key
        self.cause = cause


class Leasing:
    """The Router as the call pipeline sees it, except that a checkpoint that fails to load
    raises `Unavailable` naming it (the server's 503) instead of the loader's own error."""

    def __init__(self, router: ServedRouter):
        self._router = router

    def acquire(self, key: str) -> Any:
        try:
            return self._router.acquire(key)
        except InvalidRequest:
            raise
        except Exception as e:
            raise Unavailable(key, e) from e

    def __getattr__(self, name: str) -> Any:
        return getattr(self._router, name)


def unavailable(e: Unavailable) -> Exception:
    """The 503 a request routed to a checkpoint that cannot be loaded gets; the cause goes to
    the log only (it names paths and caches)."""
    _log.error("checkpoint %r could not be loaded: %s: %s", e.key, type(e.cause).__name__,
               e.cause)
    return refuse(503, "checkpoint %r cannot be loaded on this server (%s); the server log has "
                  "the cause" % (e.key, type(e.cause).__name__))


class ServedRouter(Routing, Protocol):
    """What the server needs from a `kime.Router`: the call pipeline's part (`Routing`), and
    the registry and residents it reports and unloads."""

    @property
    def models(self) -> Dict[str, Any]: ...
    @property
    def loaded(self) -> List[str]: ...
    @property
    def loaded_revisions(self) -> Dict[str, Optional[str]]: ...
    def resident(self) -> Dict[str, Any]: ...
    def add_hook(self, hook: Any) -> Any: ...
    def unload(self, name: Optional[str] = None) -> None: ...


class Routed:
    """A `kime.laya.Router`, the server laya serve runs: each loaded checkpoint has its own
    engine and scheduler, and at most `max_loaded` are resident."""

    def __init__(self, router: ServedRouter, settings: Settings):
        self.router = router
        self.leasing = cast(Routing, Leasing(router))
        self.shaping = Shaping(settings)
        self.idle_unload_seconds = settings.idle_unload_seconds
        self._asked_device = settings.device
        self._preference: Optional[str] = None
        self._in_flight = 0
        self._last_request = time.monotonic()

    def check(self, raw: Any, batch: bool) -> Ask:
        self._last_request = time.monotonic()
        return check_routed_body(raw, batch, self.router.resolve, self.shaping.max_token_budget,
                                 self.shaping.max_choice_options)

    async def answer(self, ask: Ask, batch: bool) -> List[Dict[str, Any]]:
        """laya serve's answer: `Router.predict` for one state, `Router.predict_batch` for a
        batch, through the call pipeline on the event loop (the Router's hooks fire per
        request, as laya serve's do). The states are routed first, on a worker thread
        (detection reads the text), so a control the Router refuses is laya serve's 422. A
        request with a choice to narrow is answered per state, each round routed as a
        `Router.predict` call is."""
        self._in_flight += 1
        try:
            return await self._answer(ask, batch)
        except Unavailable as e:
            raise unavailable(e) from None
        finally:
            self._in_flight -= 1
            self._last_request = time.monotonic()

    async def _answer(self, ask: Ask, batch: bool) -> List[Dict[str, Any]]:
        body = ask.body
        large = self.shaping.plan(ask)
        if large is not None:
            controls = ask.options.given()
            return list(await asyncio.gather(*(narrowing.answer(
                self._predict, state, body.questions, large, self.shaping.group, **controls)
                for state in body.states)))
        decisions = await asyncio.get_running_loop().run_in_executor(
            None, route_all, self.router, ask)
        if not batch:
            return [await run_async(router_one(
                self.leasing, body.states[0], body.questions,
                ask.options.without("model", "task", "lang_guess"), decision=decisions[0]))]
        controls = ask.options.given("lang", "max_len", "head_max_len")
        requests = [dict(state=state, questions=body.questions, **controls)
                    for state in body.states]
        return await run_async(router_batch(
            self.leasing, requests, CallOptions(min_confidence=ask.options.min_confidence),
            batch_size=self.shaping.batch_size(ask), decisions=decisions))

    async def _predict(self, state: Any, questions: Any, **controls: Any) -> Dict[str, Any]:
        """One `Router.predict` call of a tournament: routed, then answered."""
        return await run_async(router_one(self.leasing, state, questions, CallOptions(**controls)))

    def resident(self) -> Dict[str, Agent]:
        """The loaded agents by name, least recently used first, without touching the LRU."""
        agents = self.router.resident()
        return {name: agents[name] for name in self.router.loaded if name in agents}

    def depth(self) -> int:
        return sum(agent.engine.scheduler.depth() for agent in self.resident().values())

    def engines(self) -> Engines:
        return [(name, agent.engine) for name, agent in self.resident().items()]

    def registered(self) -> List[str]:
        """Every checkpoint name the Router serves, loaded or not (the metrics' `model`s)."""
        return list(self.router.models)

    def watch(self, metrics: Metrics) -> None:
        """Count loads and evictions from now on, and the checkpoints preloaded before."""
        for name in self.router.loaded:
            metrics.loads.labels(name).inc()
        self.router.add_hook(Lifecycle(metrics))

    def preference(self) -> str:
        """The device checkpoints are asked to load on, as a type (`cpu`, `cuda`), for
        `/health` when none is loaded."""
        if self._preference is None:
            asked = str(self._asked_device).strip().lower()
            if asked in ("", "auto"):
                from ..factory import auto_device_kind

                asked = auto_device_kind()
            self._preference = asked.split(":", 1)[0]
        return self._preference

    def health(self) -> Dict[str, Any]:
        """laya serve's `/health`: what is loaded, at which revisions and where it computes."""
        resident = self.resident()
        devices = {name: agent.device.type for name, agent in resident.items()}
        actual = next(iter(devices.values()), None)
        body: Dict[str, Any] = {
            "status": "ok", "loaded": list(resident),
            "revisions": self.router.loaded_revisions,
            "device": actual or self.preference(), "device_is_preference": actual is None,
            "checkpoint_devices": devices,
            "cpu_fallbacks": {name: {"count": agent.cpu_fallback_count,
                                     "last_reason": agent.last_fallback_reason}
                              for name, agent in resident.items()}}
        if self.idle_unload_seconds:
            body.update(idle_unload_seconds=self.idle_unload_seconds,
                        idle_seconds=round(time.monotonic() - self._last_request, 1))
        return body

    def ready(self) -> Dict[str, Any]:
        resident = self.resident()
        return {"loaded": list(resident),
                "device": {name: agent.engine.device for name, agent in resident.items()}}

    def listing(self) -> List[Dict[str, Any]]:
        """Every registered checkpoint, loaded or not."""
        resident = self.resident()
        out = []
        for name, spec in list(self.router.models.items()):
            entry: Dict[str, Any] = {"id": name, "object": "model", "owned_by": "kime",
                                     "source": repo_str(spec), "loaded": name in resident}
            if name in resident:
                engine = resident[name].engine
                entry.update(device=engine.device, max_row_tokens=engine.max_row_tokens)
            out.append(entry)
        return out

    async def idle_unloads(self) -> None:
        """laya serve's idle reaper: once no request has been seen for `idle_unload_seconds`
        and none is in flight, unload every checkpoint; the next request loads its own again."""
        seconds = self.idle_unload_seconds
        if not seconds:
            return
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(max(0.05, min(seconds / 4.0, 5.0)))
            if self._in_flight or time.monotonic() - self._last_request < seconds:
                continue
            if self.router.loaded:
                await loop.run_in_executor(None, self.router.unload)

    def close(self) -> None:
        self.router.unload()


def model_of(result: Dict[str, Any]) -> Optional[str]:
    """The checkpoint that answered a routed result (None for the single-model server's)."""
    routing = result.get("routing")
    return routing.get("model") if isinstance(routing, dict) else None


class Served(Protocol):
    """What the app asks of `One` or `Routed`. What `check` returns (a `Body` or an `Ask`) goes
    back to the same object's `answer` untouched, so the app holds it as an opaque value."""

    @property
    def registered(self) -> Optional[Callable[[], List[str]]]: ...
    def check(self, raw: Any, batch: bool) -> Any: ...
    async def answer(self, checked: Any, batch: bool) -> List[Dict[str, Any]]: ...
    def depth(self) -> int: ...
    def engines(self) -> Engines: ...
    def watch(self, metrics: Metrics) -> None: ...
    def health(self) -> Dict[str, Any]: ...
    def ready(self) -> Dict[str, Any]: ...
    def listing(self) -> List[Dict[str, Any]]: ...
    async def idle_unloads(self) -> None: ...
    def close(self) -> None: ...


def served_for(model: Union[Kime, Agent, ServedRouter], settings: Settings,
               name: Optional[str] = None) -> Served:
    """`One` for a `kime.Kime` or an `Agent` (served as `name`, else its model id), `Routed`
    for a Router."""
    from ..engine import Kime

    if isinstance(model, Kime):
        return One(Agent(model), settings, name or model.model_id)
    if isinstance(model, Agent):
        return One(model, settings, name)
    return Routed(model, settings)


__all__ = ["One", "Routed", "Unavailable", "model_of", "served_for"]
