"""What the server answers with: one engine (`One`), or a Router over several (`Routed`).

Both give the app's single pipeline the same few steps: check a body, answer it, and describe
themselves to `/health`, `/ready`, `/v1/models` and `/metrics`. `One` is the single-model server
as it has always been. `Routed` is laya serve's Router. Both answer through Laya's call pipeline
(`kime.laya.call`): each state is routed, its checkpoint is leased for the call, and the rows go
to that checkpoint's own engine and scheduler. A response carries `routing`. A client that hangs
up drops its queued rows, as with one engine.
"""
from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Protocol, Tuple, Union

from ..laya import Agent
from ..laya.call import Routing, router_batch, router_one
from ..laya.driver import run_async
from ..laya.routing import repo_str
from .limits import Body, check_body
from .metrics import Lifecycle, Metrics
from .routing import Ask, check_routed_body, route_all
from .settings import Settings

if TYPE_CHECKING:
    from ..engine import Kime

Engines = List[Tuple[Optional[str], "Kime"]]
"""(model label, engine) pairs, what `metrics.EngineCollector` reads; the label is None for the
single-model server."""


class One:
    """One engine, the server `--model SOURCE` runs."""

    registered = None  # metrics carry no model label

    def __init__(self, engine: Kime):
        self.engine = engine
        self.agent = Agent(engine)

    def check(self, raw: Any, batch: bool, max_token_budget: int) -> Body:
        return check_body(raw, batch, self.engine.model_id, max_token_budget)

    async def answer(self, body: Body, batch: bool) -> List[Dict[str, Any]]:
        if batch:
            return await self.agent.predict_batch_async(
                body.states, body.questions, batch_size=body.batch_size, max_len=body.max_len,
                head_max_len=body.head_max_len)
        return [await self.agent.predict_async(body.states[0], body.questions,
                                               max_len=body.max_len,
                                               head_max_len=body.head_max_len)]

    def depth(self) -> int:
        return self.engine.scheduler.depth()

    def engines(self) -> Engines:
        return [(None, self.engine)]

    def watch(self, metrics: Metrics) -> None:
        """Nothing loads or unloads after startup."""

    def health(self) -> Dict[str, Any]:
        return {"status": "ok", "model": self.engine.model_id, "device": self.engine.device,
                "loaded": [self.engine.model_id]}

    def ready(self) -> Dict[str, Any]:
        return {"loaded": [self.engine.model_id], "device": self.engine.device}

    def listing(self) -> List[Dict[str, Any]]:
        return [{"id": self.engine.model_id, "object": "model", "owned_by": "kime",
                 "device": self.engine.device, "max_row_tokens": self.engine.max_row_tokens}]

    async def idle_unloads(self) -> None:
        """Nothing to unload: the one engine stays."""

    def close(self) -> None:
        self.engine.close()


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
        self.idle_unload_seconds = settings.idle_unload_seconds
        self._asked_device = settings.device
        self._preference: Optional[str] = None
        self._in_flight = 0
        self._last_request = time.monotonic()

    def check(self, raw: Any, batch: bool, max_token_budget: int) -> Ask:
        self._last_request = time.monotonic()
        return check_routed_body(raw, batch, self.router.resolve, max_token_budget)

    async def answer(self, ask: Ask, batch: bool) -> List[Dict[str, Any]]:
        """laya serve's answer: `Router.predict` for one state, `Router.predict_batch` for a
        batch, through the call pipeline on the event loop (the Router's hooks fire per
        request, as laya serve's do). The states are routed first, on a worker thread
        (detection reads the text), so a control the Router refuses is laya serve's 422."""
        loop = asyncio.get_running_loop()
        self._in_flight += 1
        try:
            decisions = await loop.run_in_executor(None, route_all, self.router, ask)
            body = ask.body
            if not batch:
                return [await run_async(router_one(
                    self.router, body.states[0], body.questions, lang=ask.lang,
                    max_len=body.max_len, head_max_len=body.head_max_len,
                    min_confidence=ask.min_confidence, decision=decisions[0]))]
            controls = {k: v for k, v in (("lang", ask.lang), ("max_len", body.max_len),
                                          ("head_max_len", body.head_max_len)) if v is not None}
            requests = [dict(state=state, questions=body.questions, **controls)
                        for state in body.states]
            return await run_async(router_batch(
                self.router, requests, batch_size=body.batch_size,
                min_confidence=ask.min_confidence, decisions=decisions))
        finally:
            self._in_flight -= 1
            self._last_request = time.monotonic()

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
    def check(self, raw: Any, batch: bool, max_token_budget: int) -> Any: ...
    async def answer(self, checked: Any, batch: bool) -> List[Dict[str, Any]]: ...
    def depth(self) -> int: ...
    def engines(self) -> Engines: ...
    def watch(self, metrics: Metrics) -> None: ...
    def health(self) -> Dict[str, Any]: ...
    def ready(self) -> Dict[str, Any]: ...
    def listing(self) -> List[Dict[str, Any]]: ...
    async def idle_unloads(self) -> None: ...
    def close(self) -> None: ...


def served_for(model: Union[Kime, ServedRouter], settings: Settings) -> Served:
    """`One` for a `kime.Kime`, `Routed` for a Router."""
    from ..engine import Kime

    return One(model) if isinstance(model, Kime) else Routed(model, settings)


__all__ = ["One", "Routed", "model_of", "served_for"]
