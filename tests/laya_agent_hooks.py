"""Hooks written against Laya's protocol alone (duck-typed: no import of laya or kime), shared by
the oracle script (`tools/goldens_agent.py`, which runs them in the real Laya) and
`tests/laya/test_laya_agent.py` (which runs the same code in kime), so a golden case proves a hook
written for Laya behaves the same here.

`SETUPS[name](log)` returns (extra load kwargs, extra call kwargs); hooks append what they saw
to `log`, which the case records next to the result. `environment(env)` sets a case's
environment variables (its `load`'s "__env__") for the load, the same way on both sides.
"""
from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import time
from typing import Any, Callable, Dict, Iterator, List, Tuple

Log = List[str]
Setup = Callable[[Log], Tuple[Dict[str, Any], Dict[str, Any]]]

CACHED = {"model": "laya-rl-agent",
          "answers": {"cached": {"type": "noul", "noul": 0.9, "confidence": 0.9,
                                 "answer_confidence": 0.42, "action": {"act_probability": 0.5}}},
          "usage": {"input_tokens": 0, "output_tokens": 0}}


def _seen(ctx: Any) -> str:
    results = ctx.results
    gated = bool(results) and any(
        "abstention" in a for r in results if isinstance(r, dict)
        for a in (r.get("answers") or {}).values() if isinstance(a, dict))
    return "states=%d results=%s gated=%s usage=%s error=%s max_len=%s" % (
        len(ctx.states), "none" if results is None else len(results), gated, ctx.usage,
        _kind(ctx.error), ctx.max_len)


def _kind(error: Any) -> Any:
    """The built-in exception class an error is (kime's are subclasses of Laya's built-ins)."""
    if error is None:
        return None
    return next(k.__name__ for k in type(error).__mro__ if k.__module__ == "builtins")


class Recorder:
    """Logs every event it sees, with what the context held."""

    def __init__(self, name: str, log: Log):
        self.name, self.log = name, log

    def on_predict_start(self, ctx: Any) -> None:
        self.log.append("%s start %s" % (self.name, _seen(ctx)))

    def on_predict_end(self, ctx: Any) -> None:
        self.log.append("%s end %s" % (self.name, _seen(ctx)))

    def on_error(self, ctx: Any) -> None:
        self.log.append("%s error %s" % (self.name, _seen(ctx)))


class SkipCached:
    """Answers every state from a cache (one result per state)."""

    def on_predict_start(self, ctx: Any) -> None:
        ctx.skip([copy.deepcopy(CACHED) for _ in ctx.states])


class Failing:
    def __init__(self, event: str):
        self.event = event

    def __getattr__(self, name: str) -> Any:
        if name != self.event:
            raise AttributeError(name)

        def fail(ctx: Any) -> None:
            raise RuntimeError("hook failed on purpose")
        return fail


class Tagger:
    """An end hook that rewrites the results."""

    def on_predict_end(self, ctx: Any) -> None:
        for r in ctx.results or []:
            r["tag"] = "seen"


class AsyncTagger:
    async def on_predict_end(self, ctx: Any) -> None:
        await asyncio.sleep(0)
        for r in ctx.results or []:
            r["async_tag"] = True


def only_angry(ctx: Any) -> None:
    """A start callable that narrows the questions."""
    ctx.questions = {k: v for k, v in ctx.questions.items() if k == "angry"}


def shout(ctx: Any) -> None:
    """A start callable that rewrites the states."""
    ctx.states = [s.upper() if isinstance(s, str) else s for s in ctx.states]


def short_budget(ctx: Any) -> None:
    ctx.max_len = 40


def slow(ctx: Any) -> None:
    time.sleep(0.5)


def wrong_skip(ctx: Any) -> None:
    ctx.skip([CACHED, CACHED, CACHED])


def _rec(name: str) -> Setup:
    return lambda log: ({}, {"hooks": [Recorder(name, log)]})


SETUPS: Dict[str, Setup] = {
    "record": lambda log: ({}, {"hooks": [Recorder("call", log)]}),
    "order": lambda log: ({"hooks": [Recorder("agent", log)]},
                          {"hooks": Recorder("call", log),
                           "on_predict_start": lambda ctx: log.append("fn start"),
                           "on_predict_end": lambda ctx: log.append("fn end")}),
    "skip": lambda log: ({}, {"hooks": [SkipCached(), Recorder("after", log)]}),
    "skip_at_load": lambda log: ({"hooks": SkipCached()}, {"hooks": [Recorder("call", log)]}),
    "narrow_questions": lambda log: ({}, {"on_predict_start": only_angry}),
    "shout": lambda log: ({}, {"on_predict_start": [shout]}),
    "short_budget": lambda log: ({}, {"on_predict_start": short_budget,
                                      "hooks": [Recorder("call", log)]}),
    "tag": lambda log: ({"on_predict_end": Tagger().on_predict_end}, {}),
    "tag_async": lambda log: ({}, {"hooks": [Recorder("call", log)],
                                   "on_predict_end": AsyncTagger().on_predict_end}),
    "fail_start_raise": lambda log: ({}, {"hooks": [Failing("on_predict_start"),
                                                    Recorder("call", log)]}),
    "fail_start_warn": lambda log: ({}, {"hooks": [Failing("on_predict_start"),
                                                   Recorder("call", log)],
                                         "hooks_raise": False}),
    "fail_end_warn_at_load": lambda log: ({"hooks": [Failing("on_predict_end")],
                                           "hooks_raise": False}, {}),
    "serial": lambda log: ({"hooks_concurrent": False, "hooks": [Recorder("agent", log)]}, {}),
    "slow_timeout": lambda log: ({}, {"on_predict_start": slow, "hooks_timeout": 0.05}),
    "slow_timeout_warn": lambda log: ({"hooks_timeout": 0.05, "hooks_raise": False},
                                      {"on_predict_start": slow}),
    "wrong_skip": lambda log: ({}, {"on_predict_start": wrong_skip}),
    "error_path": lambda log: ({}, {"hooks": [Recorder("call", log)]}),
}


@contextlib.contextmanager
def environment(env: Dict[str, str]) -> Iterator[None]:
    """`env` set in os.environ inside the block, and each variable as it was after it."""
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
