"""The call pipeline (`kime.laya.call`) against Laya 0.4.15 where kime's copies of it used to
disagree (`tests/goldens/call.json`, recorded by `tools/goldens_call.py`), and its two drivers
against each other.

- A Router splits a checkpoint's batch by language only for agents with `lang_temperatures`
  (`diagnostics["sort_by_length"]` counts the shared calls).
- A Router's own hooks fire on every request the server answers, as in laya serve.
- `run` and `run_async` answer the same calls with the same results and hooks.
"""
from __future__ import annotations

import asyncio
import json
import threading
import warnings
from collections import defaultdict
from typing import Any, Dict, List

import pytest

import kime
from kime.laya.call import agent_requests
from kime.laya.driver import Blocking, run, run_async

from ..laya_replay import GOLDENS, assert_same

CALLS = json.loads((GOLDENS / "call.json").read_text(encoding="utf-8"))
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}


def unscrub(value: Any) -> Any:
    text = json.dumps(value, ensure_ascii=False).replace("<tiny>", TINY).replace("<ml>", ML)
    return json.loads(text)


class Recorder:
    """The oracle's recording hook, method for method (`tools/goldens_call.py`)."""

    def __init__(self) -> None:
        self.events: List[List[Any]] = []
        self.lock = threading.Lock()

    def _note(self, event: str, ctx: Any) -> None:
        with self.lock:
            self.events.append([event, ctx.model, len(ctx.states or []),
                                (ctx.decision or {}).get("model"), len(ctx.results or [])])

    def on_predict_start(self, ctx: Any) -> None:
        self._note("start", ctx)

    def on_predict_end(self, ctx: Any) -> None:
        self._note("end", ctx)

    def on_error(self, ctx: Any) -> None:
        self._note("error", ctx)


def by_checkpoint(events: List[List[Any]]) -> Dict[Any, List[List[Any]]]:
    """Each checkpoint's events in the order they ran: what stays ordered when a Router's
    checkpoints answer concurrently."""
    out: Dict[Any, List[List[Any]]] = defaultdict(list)
    for event in events:
        out[event[1]].append(event)
    return dict(out)


def _router(agent_kwargs: Any, recorder: Recorder) -> kime.Router:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.Router(models=MODELS, device="cpu",
                           agent_kwargs=dict(agent_kwargs or {}, threads=1), hooks=[recorder])


@pytest.mark.parametrize("case", CALLS["batch_groups"], ids=lambda c: c["id"])
def test_batch_groups_by_language_as_laya_does(case):
    recorder = Recorder()
    router = _router(case["agent_kwargs"], recorder)
    diagnostics: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = router.predict_batch(case["requests"], sort_by_length=True,
                                       diagnostics=diagnostics)
    assert_same(results, unscrub(case["results"]))
    assert diagnostics == case["diagnostics"]
    assert recorder.events == case["events"]

    recorder.events.clear()  # the async twin: the same answers, groups and per-checkpoint hooks
    again: Dict[str, Any] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        concurrent = asyncio.run(router.predict_batch_async(
            case["requests"], sort_by_length=True, diagnostics=again))
    assert concurrent == results
    assert again == diagnostics
    assert by_checkpoint(recorder.events) == by_checkpoint(case["events"])
    router.unload()


def test_the_server_fires_the_routers_hooks_as_laya_serve_does():
    import uvicorn

    from kime.serve import Settings, create_app

    from ..serve.test_server import Client, _deadline, _free_port

    recorder = Recorder()
    router = _router(None, recorder)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(router, Settings()), host="127.0.0.1",
                                           port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        _deadline("the in-process server to start", lambda: server.started)
        client = Client()
        client.port = port
        for call in CALLS["serve_hooks"]["calls"]:
            before = len(recorder.events)
            status, answer = client.post(call["path"], call["body"], key=None)[:2]
            assert status == call["status"], answer
            assert_same(answer, unscrub(call["response"]))
            assert by_checkpoint(recorder.events[before:]) == by_checkpoint(call["events"])
    finally:
        server.should_exit = True
        thread.join(30)
        router.unload()


# --- the drivers --------------------------------------------------------------------------------

QUESTIONS = CALLS["batch_groups"][0]["requests"][0]["questions"]


def test_both_drivers_answer_an_agents_requests_alike(agent):
    """`kime decide --batch`'s path for one agent: grouped by questions, budgets and language,
    the same answers as one `predict_batch` per request, under either driver."""
    requests = [{"state": "state %d: charged twice" % i, "questions": QUESTIONS,
                 **({"max_len": 64} if i % 3 == 0 else {})} for i in range(7)]
    sync = run(agent_requests(agent, requests))
    concurrent = asyncio.run(run_async(agent_requests(agent, requests)))
    alone = [agent.predict_batch([r["state"]], r["questions"], max_len=r.get("max_len"))[0]
             for r in requests]
    assert sync == concurrent == alone


def _failing_after(steps: List[str], fail: bool):
    def pipeline():
        try:
            steps.append((yield Blocking(lambda: "first")))
            if fail:
                yield Blocking(lambda: 1 / 0)
            steps.append("second")
        finally:
            steps.append((yield Blocking(lambda: "cleanup", offload=False)))
        return len(steps)
    return pipeline()


@pytest.mark.parametrize("fail", [False, True])
def test_a_failure_reaches_the_pipeline_and_its_cleanup_runs(fail):
    for drive in (run, lambda step: asyncio.run(run_async(step))):
        steps: List[str] = []
        if fail:
            with pytest.raises(ZeroDivisionError):
                drive(_failing_after(steps, fail))
            assert steps == ["first", "cleanup"]
        else:
            assert drive(_failing_after(steps, fail)) == 3
            assert steps == ["first", "second", "cleanup"]


def test_a_lease_taken_by_a_cancelled_call_is_given_back(tiny_path):
    """A task cancelled while its checkpoint loads (off the loop) returns the lease when the
    load finishes, so unloading the checkpoint lets its engine go at once (its scheduler
    thread stops) instead of waiting forever for a lease nobody holds."""
    loaded = threading.Event()
    release = threading.Event()

    class SlowLoad:
        def on_load(self, ctx: Any) -> None:
            loaded.set()
            release.wait(30)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        router = kime.Router(models={"english": str(tiny_path)}, device="cpu",
                             agent_kwargs={"threads": 1}, hooks=[SlowLoad()])

    async def cancel_while_loading() -> None:
        task = asyncio.ensure_future(router.predict_async("x", QUESTIONS, model="english"))
        while not loaded.is_set():
            await asyncio.sleep(0.01)
        task.cancel()
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0.5)  # the load finishes on its worker thread

    asyncio.run(cancel_while_loading())
    agent = router.resident()["english"]

    def schedulers() -> set:
        return {t for t in threading.enumerate() if t.name == "kime-scheduler"}

    before = schedulers()
    agent.predict("x", QUESTIONS)  # starts its scheduler; a direct call holds no lease
    ours = schedulers() - before
    assert len(ours) == 1
    router.unload()
    assert router.loaded == []
    assert not any(t.is_alive() for t in ours)
