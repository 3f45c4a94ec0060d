"""The call pipeline's two drivers are one semantics (`kime.laya.driver`): the same results, the
same hook order and the same clean-up under success, every failure and an interruption, for
an Agent's call, a Router's call and a Router's batch.

The table: each failure point (a start hook, routing, loading a checkpoint, the engine, an end
hook, an error hook, an interruption: Ctrl-C under `run`, a cancelled task under `run_async`)
times both drivers, on real checkpoints. What is compared is what a caller sees: the result or
the error, and every hook event in order, each with the context variables it saw (one the
caller set, one a start hook set for the end hook: a tracing span). Under cancellation the hook
that was running finishes before the error and end hooks fire.

Also here: a pipeline dropped half-way closes cleanly, and an attached agent-like object is
called once, never again after a TypeError from inside it.
"""
from __future__ import annotations

import asyncio
import contextvars
import threading
import warnings
from typing import Any, Callable, Dict, List, Optional, Tuple

import pytest

import kime
from kime.laya.call import agent_call
from kime.laya.options import CallOptions

REQUEST: "contextvars.ContextVar[str]" = contextvars.ContextVar("request", default="-")
SPAN: "contextvars.ContextVar[str]" = contextvars.ContextVar("span", default="-")
QUESTIONS = {"urgent": {"type": "noul", "instructions": "Is it urgent?"},
             "team": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "tech": "bugs"}}}
WIDE = {"pick": {"type": "choice", "instructions": "Which one of these many options fits?",
                 "criteria": {"option %d" % i: "a long description of option number %d" % i
                              for i in range(12)}}}
STATE = "I was charged twice and the app crashes."
POINTS = ("ok", "start", "engine", "end", "error_hook", "interrupt", "route", "load")
AGENT_POINTS = POINTS[:6]


class Fail(Exception):
    """A hook's failure, raised where the table says."""


class Recorder:
    """Notes every call event, with the request id the caller set and the span a start hook
    set (what an end hook reads to close it)."""

    def __init__(self, events: List[Tuple[Any, ...]], point: str):
        self.events, self.point = events, point

    def _note(self, event: str, ctx: Any) -> None:
        error = outcome(ctx.error)[0] if ctx.error is not None else None
        self.events.append((event, len(ctx.results or []), error, REQUEST.get(), SPAN.get()))

    def on_route(self, ctx: Any) -> None:
        if self.point == "route":
            raise Fail("routing failed")

    def on_predict_start(self, ctx: Any) -> None:
        self._note("start", ctx)
        SPAN.set("span-%d" % len(ctx.states))
        if self.point == "start":
            raise Fail("start failed")

    def on_predict_end(self, ctx: Any) -> None:
        self._note("end", ctx)
        if self.point == "end":
            raise Fail("end failed")

    def on_error(self, ctx: Any) -> None:
        self._note("error", ctx)
        if self.point == "error_hook":
            raise Fail("error hook failed")


class Interrupt:
    """The interruption point: under `run`, Ctrl-C inside a start hook; under `run_async`, a
    start hook still running (on its worker thread) when the task is cancelled."""

    def __init__(self, events: List[Tuple[Any, ...]], sync: bool):
        self.events, self.sync = events, sync
        self.entered, self.release = threading.Event(), threading.Event()

    def on_predict_start(self, ctx: Any) -> None:
        if self.sync:
            raise KeyboardInterrupt
        self.entered.set()
        self.release.wait(30)
        self.events.append(("interrupted hook finished",))


def outcome(exc: BaseException) -> Tuple[str, str]:
    kind = type(exc).__name__
    if isinstance(exc, (KeyboardInterrupt, asyncio.CancelledError)):
        kind = "interrupted"
    return kind, str(exc) if kind != "interrupted" else ""


def play(sync: bool, point: str, call: Callable[[List[Any], bool], Any],
         call_async: Callable[[List[Any], bool], Any]) -> Tuple[Any, List[Tuple[Any, ...]]]:
    """Run one cell of the table in a context of its own (a span a hook sets under `run` stays
    in the calling thread's context): (the result or the error, the events)."""
    return contextvars.copy_context().run(_play, sync, point, call, call_async)


def _play(sync: bool, point: str, call: Callable[[List[Any], bool], Any],
          call_async: Callable[[List[Any], bool], Any]) -> Tuple[Any, List[Tuple[Any, ...]]]:
    events: List[Tuple[Any, ...]] = []
    hooks: List[Any] = [Recorder(events, point)]
    interrupt = Interrupt(events, sync)
    if point == "interrupt":
        hooks.append(interrupt)
    token = REQUEST.set("req-%s" % point)
    try:
        if sync:
            try:
                return ("ok", call(hooks, point == "engine")), events
            except BaseException as exc:
                return outcome(exc), events

        async def cancelled() -> Any:
            task = asyncio.ensure_future(call_async(hooks, point == "engine"))
            if point == "interrupt":
                while not interrupt.entered.is_set():
                    await asyncio.sleep(0.005)
                task.cancel()
                await asyncio.sleep(0.05)  # the hook still runs: nothing may end before it
                interrupt.release.set()
            return await task

        try:
            return ("ok", asyncio.run(cancelled())), events
        except BaseException as exc:
            return outcome(exc), events
    finally:
        REQUEST.reset(token)


def same_semantics(sync: Tuple[Any, List[Any]], concurrent: Tuple[Any, List[Any]],
                   point: str) -> None:
    (got_sync, events_sync), (got_async, events_async) = sync, concurrent
    finished = [e for e in events_async if e[0] == "interrupted hook finished"]
    if point == "interrupt":  # the running hook ended before any error or end hook began
        assert finished and events_async.index(finished[0]) < len(events_async) - 1
        assert all(e[0] == "start" for e in events_async[:events_async.index(finished[0])])
    assert got_sync == got_async
    assert events_sync == [e for e in events_async if e not in finished]
    for event in events_sync:  # every hook saw the caller's request id
        assert event[3] == "req-%s" % point, event
    ends = [e for e in events_sync if e[0] in ("end", "error")]
    starts = [e for e in events_sync if e[0] == "start"]
    assert len(ends) >= len(starts)  # every started context was ended
    if point in ("ok", "end", "engine", "error_hook") and starts:
        assert all(e[4].startswith("span-") for e in ends), ends  # the start hook's span


@pytest.fixture(scope="module")
def agent(tiny_path: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(str(tiny_path), device="cpu", threads=1)


@pytest.fixture(scope="module")
def router(tiny_path: Any, ml_path: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        router = kime.Router(models={"english": str(tiny_path), "multilingual": str(ml_path),
                                     "broken": str(tiny_path) + "-missing"},
                             device="cpu", agent_kwargs={"threads": 1})
    yield router
    router.unload()


def _questions(engine_fails: bool) -> Dict[str, Any]:
    return WIDE if engine_fails else QUESTIONS


@pytest.mark.parametrize("point", AGENT_POINTS)
def test_an_agents_call_is_one_semantics(agent: Any, point: str) -> None:
    budget = 24 if point == "engine" else None

    def call(hooks: List[Any], engine_fails: bool) -> Any:
        return agent.predict_batch([STATE, "second"], _questions(engine_fails), hooks=hooks,
                                   max_len=budget)

    async def call_async(hooks: List[Any], engine_fails: bool) -> Any:
        return await agent.predict_batch_async([STATE, "second"], _questions(engine_fails),
                                               hooks=hooks, max_len=budget)

    same_semantics(play(True, point, call, call_async), play(False, point, call, call_async),
                   point)


@pytest.mark.parametrize("point", POINTS)
def test_a_routers_call_is_one_semantics(router: Any, point: str) -> None:
    model = "broken" if point == "load" else "english"
    budget = 24 if point == "engine" else None

    def call(hooks: List[Any], engine_fails: bool) -> Any:
        return router.predict(STATE, _questions(engine_fails), model=model, hooks=hooks,
                              max_len=budget)

    async def call_async(hooks: List[Any], engine_fails: bool) -> Any:
        return await router.predict_async(STATE, _questions(engine_fails), model=model,
                                          hooks=hooks, max_len=budget)

    same_semantics(play(True, point, call, call_async), play(False, point, call, call_async),
                   point)


@pytest.mark.parametrize("point", POINTS)
def test_a_routers_batch_is_one_semantics(router: Any, point: str) -> None:
    """Two checkpoints, one after the other under either driver: a failure in the second (its
    load, here) comes after the first has ended, as in Laya."""
    second = "broken" if point == "load" else "multilingual"
    budget = 24 if point == "engine" else None

    def requests(engine_fails: bool) -> List[Dict[str, Any]]:
        return [{"state": STATE, "questions": _questions(engine_fails), "model": "english",
                 "max_len": budget},
                {"state": "zweite Nachricht", "questions": _questions(engine_fails),
                 "model": second, "max_len": budget}]

    def call(hooks: List[Any], engine_fails: bool) -> Any:
        return router.predict_batch(requests(engine_fails), hooks=hooks)

    async def call_async(hooks: List[Any], engine_fails: bool) -> Any:
        return await router.predict_batch_async(requests(engine_fails), hooks=hooks)

    same_semantics(play(True, point, call, call_async), play(False, point, call, call_async),
                   point)


def test_a_pipeline_dropped_half_way_closes_cleanly(agent: Any) -> None:
    """A pipeline nobody drives any more (its task gone) is closed by the garbage collector:
    no handler may yield then ("generator ignored GeneratorExit")."""
    events: List[Tuple[Any, ...]] = []
    step = agent_call(agent, [STATE], QUESTIONS, CallOptions(hooks=[Recorder(events, "ok")]))
    next(step)  # suspended at its first step: the start hooks
    step.close()
    assert events == []


def test_an_attached_object_is_called_once(router: Any) -> None:
    """An agent-like object attached to a Router takes `lang` when its signature has a place
    for it, and is called without it otherwise; a TypeError from inside it is its own error,
    never a cue to call it again (its first call may have had effects)."""
    calls: List[Optional[str]] = []

    class Reads:
        def system_one(self, state: Any, questions: Any, lang: Optional[str] = None) -> Any:
            calls.append(lang)
            raise TypeError("helper() got an unexpected keyword argument 'lang'")

    class Older:
        def system_one(self, state: Any, questions: Any) -> Any:
            calls.append("no lang")
            return {"answers": {}}

    router.attach("reads", Reads())
    with pytest.raises(TypeError, match="helper"):
        router.predict(STATE, QUESTIONS, model="reads", lang="en")
    assert calls == ["en"]
    router.attach("older", Older())
    assert router.predict(STATE, QUESTIONS, model="older", lang="en")["answers"] == {}
    assert calls == ["en", "no lang"]
