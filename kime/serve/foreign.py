"""A Router-like object of the caller's own behind laya serve's routes: laya's
`create_app(router)` contract, which takes any object with a Router's methods.

laya serve calls such an object through its methods only (`predict`, `predict_batch`, and, when
it has them, `resolve`, `loaded`, `loaded_revisions`, `unload`), one call at a time on one worker
thread, so a wrapper that adds logging, caching or a policy around laya's Router keeps doing so.
`Foreign` does the same: the body checks are laya serve's (`routing.check_routed_body`), the
answer is the object's own `predict` or `predict_batch`, a ValueError it raises is a 422 with its
text, as in laya serve. Nothing is asked of it that laya serve does not ask: no `add_hook`, no
leases, no engines (`/metrics` has no engine gauges for it).
"""
from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Callable, Dict, List

from ..laya.routing import normalise_name
from . import narrowing
from .limits import refuse
from .metrics import Metrics
from .routing import Ask, check_routed_body
from .served import Engines, Shaping
from .settings import Settings


def is_foreign(model: Any) -> bool:
    """Whether `model` is answered through its own methods: anything but a kime engine, an
    Agent, or a kime Router whose `predict` and `predict_batch` are the Router's own."""
    from ..engine import Kime
    from ..laya.agent import Agent
    from ..laya.router import Router

    if isinstance(model, (Kime, Agent)):
        return False
    return not (isinstance(model, Router)
                and type(model).predict is Router.predict
                and type(model).predict_batch is Router.predict_batch)


class Foreign:
    """The caller's router object, answered through its own methods on one worker thread."""

    registered = None

    def __init__(self, router: Any, settings: Settings):
        self.router = router
        self.shaping = Shaping(settings)
        self.idle_unload_seconds = settings.idle_unload_seconds
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="kime-serve-router")
        self._last_request = time.monotonic()
        self._in_flight = 0

    def _resolve(self) -> Callable[[Any], str]:
        resolve = getattr(self.router, "resolve", None)
        return resolve if callable(resolve) else normalise_name

    def check(self, raw: Any, batch: bool) -> Ask:
        self._last_request = time.monotonic()
        return check_routed_body(raw, batch, self._resolve(), self.shaping.max_token_budget,
                                 self.shaping.max_choice_options)

    async def _call(self, fn: Callable[[], Any]) -> Any:
        try:
            return await asyncio.get_running_loop().run_in_executor(self._pool, fn)
        except ValueError as e:  # laya serve: the router's own refusal, with its text
            raise refuse(422, str(e)) from None

    async def answer(self, ask: Ask, batch: bool) -> List[Dict[str, Any]]:
        """laya serve's calls: `predict(state, questions, model=..., **controls)` per state, or
        one `predict_batch(requests, **call_controls)` when the object has it."""
        self._in_flight += 1
        try:
            return await self._answer(ask, batch)
        finally:
            self._in_flight -= 1
            self._last_request = time.monotonic()

    async def _answer(self, ask: Ask, batch: bool) -> List[Dict[str, Any]]:
        body, options = ask.body, ask.options
        model = options.model
        per_item = options.given("max_len", "head_max_len", "task", "lang", "lang_guess")
        controls = dict(per_item, **options.given("min_confidence"))
        large = self.shaping.plan(ask)
        if large is not None:
            return list(await asyncio.gather(*(narrowing.answer(
                self._predict, state, body.questions, large, self.shaping.group,
                model=model, **controls) for state in body.states)))
        if batch and hasattr(self.router, "predict_batch"):
            requests = [dict(state=s, questions=body.questions, model=model, **per_item)
                        for s in body.states]
            call: Dict[str, Any] = dict(options.given("min_confidence"))
            size = self.shaping.batch_size(ask)
            if size is not None:
                call["batch_size"] = size
            return list(await self._call(partial(self.router.predict_batch, requests, **call)))
        return [await self._predict(state, body.questions, model=model, **controls)
                for state in body.states]

    async def _predict(self, state: Any, questions: Any, **controls: Any) -> Dict[str, Any]:
        result: Dict[str, Any] = await self._call(
            partial(self.router.predict, state, questions, **controls))
        return result

    def loaded(self) -> List[str]:
        return list(getattr(self.router, "loaded", None) or [])

    def depth(self) -> int:
        return self._in_flight

    def engines(self) -> Engines:
        return []

    def watch(self, metrics: Metrics) -> None:
        """Nothing to watch: the object's loads are its own."""

    def health(self) -> Dict[str, Any]:
        """laya serve's `/health` over an object that may know little of itself."""
        body: Dict[str, Any] = {"status": "ok", "loaded": self.loaded(),
                                "revisions": getattr(self.router, "loaded_revisions", {}),
                                "device": str(getattr(self.router, "device", None) or "cpu"),
                                "device_is_preference": True, "checkpoint_devices": {},
                                "cpu_fallbacks": {}}
        if self.idle_unload_seconds:
            body.update(idle_unload_seconds=self.idle_unload_seconds,
                        idle_seconds=round(time.monotonic() - self._last_request, 1))
        return body

    def ready(self) -> Dict[str, Any]:
        return {"loaded": self.loaded(), "device": {}}

    def listing(self) -> List[Dict[str, Any]]:
        return [{"id": name, "object": "model", "owned_by": "kime", "loaded": True}
                for name in self.loaded()]

    async def idle_unloads(self) -> None:
        """laya serve's idle reaper, for an object that can `unload`."""
        seconds, unload = self.idle_unload_seconds, getattr(self.router, "unload", None)
        if not seconds or not callable(unload):
            return
        while True:
            await asyncio.sleep(max(0.05, min(seconds / 4.0, 5.0)))
            if self._in_flight or time.monotonic() - self._last_request < seconds:
                continue
            if self.loaded():
                await asyncio.get_running_loop().run_in_executor(self._pool, unload)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


__all__ = ["Foreign", "is_foreign"]
