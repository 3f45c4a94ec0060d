"""Hooks off the calling thread (issue 53): a hook that overruns `hooks_timeout` keeps running
(Python cannot stop a thread) but can no longer change the call's context or the results its
caller was given; and the background loop that runs a hook's coroutine from inside a running
loop is started once, however many callers arrive together."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import warnings
from typing import Any, List

import pytest

import kime
from kime.laya.context import PredictContext

QUESTIONS = {"spam": {"type": "noul", "instructions": "Is it spam?"}}


@pytest.fixture(scope="module")
def engine(tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.Kime(str(tiny_path), device="cpu", threads=1)


class LateTamperer:
    """An end hook that overruns its timeout, then rewrites what it was handed."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.done = threading.Event()

    def on_predict_end(self, ctx: PredictContext) -> None:
        self.release.wait(10)
        ctx.results[0]["answers"]["spam"]["noul"] = -1.0  # type: ignore[index]
        ctx.results = [{"tampered": True}]
        ctx.states[0] = "tampered"
        self.done.set()


def test_a_hook_past_its_timeout_changes_nothing_after_the_call(engine):
    """Before, the overrunning hook rewrote the result dict the caller already held."""
    hook = LateTamperer()
    agent = kime.Agent(engine, hooks=[hook], hooks_timeout=0.05, hooks_raise=False)
    state = ["a message about an invoice"]
    with pytest.warns(RuntimeWarning, match="exceeded"):
        result = agent.predict(state[0], QUESTIONS)
    before = repr(result)
    hook.release.set()
    assert hook.done.wait(10)
    assert repr(result) == before and result["answers"]["spam"]["noul"] >= 0.0


class InTime:
    """A start hook and an end hook that finish in time: their changes count, and the end hook
    finds the context the start hook saw (by equality and hash: it was handed a copy)."""

    def __init__(self) -> None:
        self.seen: List[Any] = []

    def on_predict_start(self, ctx: PredictContext) -> None:
        self.seen.append(ctx)
        ctx.states = ["rewritten by the start hook"]

    def on_predict_end(self, ctx: PredictContext) -> None:
        assert ctx in self.seen and {ctx} == set(self.seen)
        ctx.results[0]["answers"]["spam"]["note"] = "from the end hook"  # type: ignore[index]


def test_a_hook_within_its_timeout_changes_the_call(engine):
    hook = InTime()
    agent = kime.Agent(engine, hooks=[hook], hooks_timeout=30)
    result = agent.predict("original", QUESTIONS)
    assert result["answers"]["spam"]["note"] == "from the end hook"
    assert result == kime.Agent(engine, hooks=[InTime()]).predict("original", QUESTIONS)
    rewritten = kime.Agent(engine).predict("rewritten by the start hook", QUESTIONS)
    assert result["answers"]["spam"]["noul"] == rewritten["answers"]["spam"]["noul"]


RACE = textwrap.dedent("""
    import asyncio, threading, time
    from kime.laya.coroutines import run_coroutine_sync

    def slow_start(frame, event, arg):
        # The loop's thread is descheduled between starting and running its loop, as a busy
        # machine may do to it: the window in which a second caller used to start a loop.
        if (event == "call" and frame.f_code.co_name == "run_forever"
                and threading.current_thread().name == "kime-async-hooks"):
            time.sleep(0.3)

    threading.settrace(slow_start)
    barrier = threading.Barrier(8)

    async def answer():
        return 1

    async def caller():
        barrier.wait()  # all eight inside a running loop, released together
        return run_coroutine_sync(answer())

    workers = [threading.Thread(target=lambda: asyncio.run(caller())) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    print(sum(t.name == "kime-async-hooks" for t in threading.enumerate()))
""")


def test_callers_arriving_together_start_one_background_loop():
    """Before, each caller that found the new loop not yet running started another (and the
    earlier ones leaked, each a thread running a loop for good)."""
    # a fresh interpreter: the loop is process-wide
    done = subprocess.run([sys.executable, "-c", RACE], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "1"
