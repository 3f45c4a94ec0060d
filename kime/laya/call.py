"""THE Laya call pipeline: requests -> routes -> groups -> engine -> gate -> hooks.

Every answering entry of Laya's layer is a caller of this module and holds no loop of its own:
`Agent.predict`/`predict_batch` (and their async twins), `Router.predict`/`predict_batch`/
`predict_long` (and theirs), the server's single and routed handlers, `kime decide --batch`.
The steps, in Laya 0.4.15's order (`laya/agent.py::predict_batch`, `laya/router.py::predict`
and `predict_batch`):

1. **validated requests**: Laya's argument checks, every problem at once;
2. **routing decisions** (a Router only; the server routes ahead and passes its decisions in);
3. **groups** keyed by (checkpoint, question set, token budgets, language), in order of first
   appearance: one shared forward pass each, results back in the caller's order;
4. **the engine**: an `Infer` step per `batch_size` chunk of a group;
5. **the `min_confidence` gate** (`confidence.apply_confidence_gate`) on every result;
6. **hooks** around each context: start hooks before the work, `on_error` on a failure, end
   hooks always (a Router's contexts end last-started first).

A Router's call wraps its agents' calls: per request a Router context (its hooks, its gate),
per group the agent's own call (the agent's hooks, the process defaults left out because the
Router ran them). Where Laya's two Router paths differ, each is kept: `predict` passes the
language it routed on to the agent, `predict_batch` groups (and passes) a language only for an
agent with `lang_temperatures`, since the language changes nothing else.

Each function takes the call's `options.CallOptions` whole and returns a `driver.Step`:
`driver.run` answers it in the calling thread, `driver.run_async` on an event loop, one step
at a time in the same order (a Router's checkpoints one after another, as Laya answers them),
so both give the same results and hooks. No step is yielded from an exception handler: a
failure is kept, the handlers' hooks run after it, and it is raised last, so a pipeline
dropped half-way closes without a "generator ignored GeneratorExit". An agent-like object
attached to a Router by hand (not a `kime.Agent`) is called through its own synchronous
`system_one`/`predict_batch`.
"""
from __future__ import annotations

import json
import time
from typing import Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple

from ..calibration import Temperatures
from ..errors import InvalidRequest, problem
from ..request import Request, check_states, questions_arg_problems, raise_if, validated_questions
from . import wire
from .confidence import MinConfidence, check_min_confidence
from .driver import Blocking, Engine, Infer, Step
from .hooks import HookArg, HookOwner, PredictContext, defaults_skipped
from .options import NO_OPTIONS, PER_REQUEST, CallOptions, reads
from .routing import RouteDecision, refusal
from .scope import HookScope, open_scope
from .wire import AnswerConfidence

Result = Dict[str, Any]
ROUTE_OPTIONS = ("model", "task", "lang", "lang_guess", "hooks", "hooks_raise", "hooks_timeout")
"""What `Router.route` takes of a call's options."""
HOOK_ROUTE_OPTIONS = ("hooks", "hooks_raise", "hooks_timeout")
"""What `Router.route_batch` takes of a batch call's options."""


class Calibrating(Protocol):
    """What the pipeline needs from an agent's calibration (`kime.laya.calibration`)."""

    def temperatures(self, lang: Any = None) -> Temperatures: ...
    def answer_conf(self, lang: Any = None) -> Optional[AnswerConfidence]: ...


class Answering(HookOwner, Protocol):
    """What the pipeline needs from a `kime.Agent` (a Protocol, so this module does not import
    the agent that calls it)."""

    @property
    def model_id(self) -> str: ...
    @property
    def engine(self) -> Engine: ...
    @property
    def answering(self) -> Engine: ...
    @property
    def calibration(self) -> Calibrating: ...


class Routing(HookOwner, Protocol):
    """What the pipeline needs from a `kime.Router`."""

    def route(self, state: Any, questions: Any = None, model: Optional[str] = None,
              task: Optional[str] = None, lang: Optional[str] = None, lang_guess: Any = None,
              hooks: HookArg = None,
              hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None, *,
              explain: bool = False) -> RouteDecision: ...
    def route_batch(self, requests: Sequence[Dict[str, Any]],
                    hooks_timeout: Optional[float] = None, *, hooks: HookArg = None,
                    hooks_raise: Optional[bool] = None,
                    explain: bool = False) -> List[RouteDecision]: ...
    def resolve(self, name: Any) -> str: ...
    def acquire(self, key: str) -> Any: ...
    def release(self, agent: Any) -> None: ...


def gate_of(min_confidence: Any) -> Optional[MinConfidence]:
    """`min_confidence` checked (Laya checks it before anything else), None when unset."""
    return check_min_confidence(min_confidence) if min_confidence is not None else None


def _is_agent(agent: Any) -> bool:
    """A kime Agent runs inside this pipeline; anything else is called as an object."""
    return hasattr(agent, "hooks_lock") and hasattr(agent, "calibration")


# --- 1. validated requests ----------------------------------------------------------------------

def chunked(states: Any, questions: Any, batch_size: Any, max_len: Optional[int],
            head_max_len: Optional[int]) -> Tuple[Optional[List[Result]], List[List[Request]]]:
    """Laya's `predict_batch` argument checks, then (the finished answer, []) for the calls Laya
    answers without a forward pass, or (None, the requests in `batch_size` chunks). The
    questions are validated once, and every request carries the validated set."""
    size_problems = [] if batch_size is None or (isinstance(batch_size, int) and not
                                                 isinstance(batch_size, bool)) else [
        problem(["batch_size"], "batch_size must be an integer or None, got %r"
                % (batch_size,), "type_error.integer", batch_size)]
    raise_if([], check_states(states) + questions_arg_problems(questions) + size_problems)
    states = list(states)
    if not states:
        return [], []
    if not questions:
        return [wire.empty_result() for _ in states], []
    checked = validated_questions(questions)
    reqs = [Request(state=s, questions=checked, max_len=max_len, head_max_len=head_max_len)
            for s in states]
    size = batch_size if (batch_size and batch_size > 0) else len(reqs)
    return None, [reqs[start:start + size] for start in range(0, len(reqs), size)]


def check_one(state: Any, questions: Any) -> None:
    """`Router.predict`'s checks on its two arguments, with Laya's texts."""
    if state is None:
        raise refusal(["state"], "state must not be None; pass a string, dict, or list", None,
                      "type_error.none")
    if not isinstance(questions, dict):
        raise refusal(["questions"], "questions must be a dict of question id -> definition, "
                      "got %s" % type(questions).__name__, repr(questions), "type_error")


# --- 3. groups ----------------------------------------------------------------------------------

def signature(questions: Any) -> str:
    """An order-sensitive signature of a question set: options are positional, so the same
    questions in another key order must not share a forward pass."""
    return json.dumps(questions, sort_keys=False, ensure_ascii=False, default=str)


def budgets(max_len: Optional[int], head_max_len: Optional[int]) -> Dict[str, int]:
    """Token-budget overrides, only those set (an agent-like object may not take them)."""
    return {k: v for k, v in (("max_len", max_len), ("head_max_len", head_max_len))
            if v is not None}


def grouped(keys: Sequence[Any]) -> List[List[int]]:
    """Indices grouped by equal key, groups in order of first appearance."""
    groups: Dict[Any, List[int]] = {}
    for i, key in enumerate(keys):
        groups.setdefault(key, []).append(i)
    return list(groups.values())


def batch_requests(states: Sequence[Any], questions: Any,
                   options: CallOptions) -> List[Dict[str, Any]]:
    """One Router request per state, each carrying the options a request carries (its
    routing and budgets)."""
    carried = options.given(*PER_REQUEST)
    return [dict(carried, state=state, questions=questions) for state in states]


def said_language(lang: Any, decision: Any) -> Any:
    """The language a routed request is answered in: the caller's, else the one detected."""
    if lang is not None:
        return lang
    return ((decision or {}).get("detection") or {}).get("language")


# --- 4-6. one agent -----------------------------------------------------------------------------

def agent_call(agent: Answering, states: Any, questions: Any, options: CallOptions = NO_OPTIONS,
               *, batch_size: Optional[int] = None,
               skip_defaults: bool = False) -> Step[List[Result]]:
    """`Agent.predict_batch`: one context for the call; start hooks, checks, the engine per
    chunk, then the gate and end hooks. `options`' routing hints are not an agent's (its
    callers refuse them); `sort_by_length` changes nothing here: rows are never padded, so a
    row's answer does not depend on its batch."""
    scope = open_scope(agent, options, gate_of(options.min_confidence), skip_defaults)
    ctx = scope.context(states, questions, model=agent.model_id, agent=agent,
                        max_len=options.max_len, head_max_len=options.head_max_len)
    error: Optional[BaseException] = None
    try:
        yield scope.step(scope.start, ctx)
        if ctx.results is None:
            answers, chunks = chunked(ctx.states, ctx.questions, batch_size, ctx.max_len,
                                      ctx.head_max_len)
            if answers is None:
                temps = agent.calibration.temperatures(options.lang)
                conf = agent.calibration.answer_conf(options.lang)
                answers = []
                for chunk in chunks:
                    responses = yield Infer(agent.answering, chunk, temps)
                    answers.extend(wire.result(r, conf) for r in responses)
            ctx.results = answers
    except GeneratorExit:
        raise  # dropped half-way: no driver is left to run hooks
    except BaseException as exc:
        error = exc
    yield from scope.end(ctx, error)
    return ctx.results  # type: ignore[return-value]  # set, or `end` raised


def agent_requests(agent: Answering, requests: Sequence[Dict[str, Any]],
                   min_confidence: Optional[MinConfidence] = None) -> Step[List[Result]]:
    """Requests (`state`, `questions`, optional `lang`, `max_len`, `head_max_len`) for one
    agent: one `predict_batch` call per group sharing questions, budgets and language."""
    keys = [(signature(r["questions"]), r.get("max_len"), r.get("head_max_len"), r.get("lang"))
            for r in requests]
    results: List[Any] = [None] * len(requests)
    for indices in grouped(keys):
        first = requests[indices[0]]
        options = CallOptions(lang=first.get("lang"), max_len=first.get("max_len"),
                              head_max_len=first.get("head_max_len"),
                              min_confidence=min_confidence)
        answers = yield from agent_call(agent, [requests[i]["state"] for i in indices],
                                        first["questions"], options)
        for i, result in zip(indices, answers):
            results[i] = result
    return results


def call_object(method: Any, *args: Any, **kwargs: Any) -> Any:
    """Call an attached agent-like object's method with the process defaults left out, and
    without `lang` / `sort_by_length` when its signature has no place for them (Laya's own
    agents predate both). Asked of the signature first, never by retrying after a TypeError:
    the first call may have had effects."""
    dropped = [k for k in ("lang", "sort_by_length") if not reads(method, k)]
    with defaults_skipped():
        return method(*args, **{k: v for k, v in kwargs.items() if k not in dropped})


def _answer_group(agent: Any, states: List[Any], questions: Any, options: CallOptions,
                  batch_size: Optional[int], single: bool,
                  sort_by_length: bool = False) -> Step[List[Result]]:
    """One group's forward passes on a Router's agent: the agent's own call when it is a kime
    Agent, else its method (`system_one` for `Router.predict`, as Laya calls it)."""
    if _is_agent(agent):
        return (yield from agent_call(agent, states, questions, options, batch_size=batch_size,
                                      skip_defaults=True))
    given = options.given()
    if single:
        result = yield Blocking(lambda: call_object(agent.system_one, states[0], questions,
                                                    **given))
        return [result]
    if sort_by_length:
        given["sort_by_length"] = True
    return (yield Blocking(lambda: call_object(agent.predict_batch, states, questions,
                                               batch_size=batch_size, **given)))


# --- 2-6. a Router ------------------------------------------------------------------------------

def _lease(router: Routing, key: str) -> Blocking:
    """The agent for `key`, loaded if need be (seconds: off the loop) and held until given
    back, even by a task cancelled while it loads."""
    return Blocking(lambda: router.acquire(key), undo=router.release)


def router_one(router: Routing, state: Any, questions: Any, options: CallOptions = NO_OPTIONS,
               *, long: Optional[Callable[[PredictContext], Result]] = None,
               decision: Optional[RouteDecision] = None) -> Step[Result]:
    """`Router.predict` (and `predict_long`, with `long`: `long.LongScan`, what runs on the
    context in place of the agent's call): route, lease, start hooks, the agent's call,
    `routing` on the result, the gate, end hooks. `decision` skips routing (the server routed
    already)."""
    check_one(state, questions)
    scope = open_scope(router, options, gate_of(options.min_confidence))
    ctx = scope.context([state], questions, router=router, max_len=options.max_len,
                        head_max_len=options.head_max_len)
    agent = None
    error: Optional[BaseException] = None
    try:
        if decision is None:
            decision = yield Blocking(lambda: router.route(
                state, questions, **options.given(*ROUTE_OPTIONS)))
        ctx.decision = dict(decision)
        ctx.model = decision["model"]
        agent = ctx.agent = yield _lease(router, router.resolve(ctx.model))
        ctx.started_at = time.perf_counter()  # Laya's elapsed_ms starts after route and load
        yield scope.step(scope.start, ctx)
        routed = dict(ctx.decision)
        if ctx.results is None:
            if long is not None:
                result = yield Blocking(lambda: long(ctx))
                result.setdefault("routing", routed)
            else:
                asked = CallOptions(lang=said_language(options.lang, decision),
                                    max_len=ctx.max_len, head_max_len=ctx.head_max_len)
                result = (yield from _answer_group(agent, [ctx.states[0]], ctx.questions,
                                                   asked, None, single=True))[0]
                result["routing"] = routed
            ctx.results = [result]
        else:  # answered by a start hook (a cache): it still promises `routing`
            for result in ctx.results:
                if isinstance(result, dict):
                    result.setdefault("routing", dict(routed))
    except GeneratorExit:
        raise  # dropped half-way: no driver is left to run hooks
    except BaseException as exc:
        error = exc
    finally:
        if agent is not None:
            router.release(agent)
    yield from scope.end(ctx, error)
    return ctx.results[0]  # type: ignore[index]  # set, or `end` raised


def router_batch(router: Routing, requests: Sequence[Dict[str, Any]],
                 options: CallOptions = NO_OPTIONS, *, batch_size: Optional[int] = None,
                 sort_by_length: bool = False, diagnostics: Optional[Dict[str, Any]] = None,
                 decisions: Optional[List[RouteDecision]] = None) -> Step[List[Result]]:
    """`Router.predict_batch`: route every request, then per checkpoint (in order of first
    appearance) its requests' contexts, shared forward passes per (question set, budgets,
    language), the gate and end hooks. `options` are the call's (the gate, hooks); each
    request carries its own routing and budgets. `decisions` skips routing."""
    gate = gate_of(options.min_confidence)
    if decisions is None:  # route_batch checks the requests' shapes first
        decisions = yield Blocking(lambda: router.route_batch(
            requests, **options.given(*HOOK_ROUTE_OPTIONS)))
    if not decisions:
        return []
    scope = open_scope(router, options, gate)
    report = ({"groups": 0, "reordered": 0, "smallest": None, "largest": None}
              if sort_by_length and diagnostics is not None else None)
    keys = [router.resolve(d["model"]) for d in decisions]
    results: List[Any] = [None] * len(requests)
    for indices in grouped(keys):
        started = yield from _checkpoint(router, keys[indices[0]], indices, requests,
                                         decisions, scope, batch_size, sort_by_length, report)
        for i, ctx in zip(indices, started):
            results[i] = ctx.results[0]  # type: ignore[index]
    if any(r is None for r in results):
        raise RuntimeError("internal error: batch execution did not produce every result")
    if report is not None and diagnostics is not None:  # a report exists only for diagnostics
        diagnostics["sort_by_length"] = report
    return results


def _checkpoint(router: Routing, key: str, indices: List[int],
                requests: Sequence[Dict[str, Any]], decisions: List[RouteDecision],
                scope: HookScope, batch_size: Optional[int], sort_by_length: bool,
                report: Optional[Dict[str, Any]]) -> Step[List[PredictContext]]:
    """One checkpoint's requests: start hooks per request, one group call per (question set,
    budgets, language), end hooks last-started first. A failure fails every started request
    of the checkpoint with the same exception."""
    agent = yield _lease(router, key)
    started: List[PredictContext] = []
    error: Optional[BaseException] = None
    try:
        for i in indices:
            ctx = scope.context([requests[i]["state"]], requests[i]["questions"],
                                decision=dict(decisions[i]), model=key, agent=agent,
                                router=router, max_len=requests[i].get("max_len"),
                                head_max_len=requests[i].get("head_max_len"))
            started.append(ctx)
            yield scope.step(scope.start, ctx)
        waiting = [(i, ctx) for i, ctx in zip(indices, started) if ctx.results is None]
        for i, ctx in zip(indices, started):
            if ctx.results is not None:  # answered by a start hook: it still carries `routing`
                for result in ctx.results:
                    if isinstance(result, dict):
                        result.setdefault("routing", dict(decisions[i]))
        # the language picks temperatures, so it splits groups only on an agent that has them
        by_lang = bool(getattr(agent, "lang_temperatures", None))
        keys = [(signature(ctx.questions), tuple(budgets(ctx.max_len, ctx.head_max_len).items()),
                 said_language(requests[i].get("lang"), decisions[i]) if by_lang else None)
                for i, ctx in waiting]
        for members in grouped(keys):
            items = [waiting[m] for m in members]
            _, group_budgets, group_lang = keys[members[0]]
            asked = CallOptions(lang=group_lang).but(**dict(group_budgets))
            answers = yield from _answer_group(agent, [ctx.states[0] for _, ctx in items],
                                               items[0][1].questions, asked, batch_size,
                                               single=False, sort_by_length=sort_by_length)
            if len(answers) != len(items):
                raise RuntimeError("internal error: Agent.predict_batch returned %d results for "
                                   "%d states" % (len(answers), len(items)))
            if report is not None:
                _count_group(report, len(items), batch_size, sort_by_length)
            for (i, ctx), result in zip(items, answers):
                result["routing"] = dict(decisions[i])
                ctx.results = [result]
    except GeneratorExit:
        raise  # dropped half-way: no driver is left to run hooks
    except BaseException as exc:
        error = exc
    finally:
        router.release(agent)
    yield scope.step(scope.finish_all, started, error)
    if error is not None:
        raise error
    return started


def _count_group(report: Dict[str, Any], n: int, batch_size: Optional[int],
                 sort_by_length: bool) -> None:
    """`diagnostics["sort_by_length"]`: how many group calls ran, and their sizes."""
    report["groups"] += 1
    report["reordered"] += int(bool(sort_by_length and batch_size and 1 < batch_size < n))
    report["smallest"] = n if report["smallest"] is None else min(report["smallest"], n)
    report["largest"] = n if report["largest"] is None else max(report["largest"], n)


def check_requests(requests: Any) -> None:
    """Laya's shape checks on a request batch, every request's first problem at once."""
    from collections.abc import Sequence as SequenceABC

    if not isinstance(requests, SequenceABC) or isinstance(requests, (str, bytes)):
        raise refusal(["requests"], "requests must be a sequence of request dictionaries",
                      repr(requests), "type_error")
    problems = []
    for i, request in enumerate(requests):
        found: Optional[Tuple[List[Any], str, str, Any]] = None
        if not isinstance(request, dict):
            found = ([i], "request %d must be a dict, got %s" % (i, type(request).__name__),
                     "type_error", repr(request))
        elif "state" not in request:
            found = ([i, "state"], "request %d is missing required key 'state'" % i,
                     "value_error.missing", None)
        elif request["state"] is None:
            found = ([i, "state"], "request %d 'state' must not be None; pass a string, dict, or "
                     "list" % i, "type_error.none", None)
        elif "questions" not in request:
            found = ([i, "questions"], "request %d is missing required key 'questions'" % i,
                     "value_error.missing", None)
        elif not isinstance(request["questions"], dict):
            found = ([i, "questions"], "request %d 'questions' must be a dict, got %s"
                     % (i, type(request["questions"]).__name__), "type_error",
                     repr(request["questions"]))
        if found is not None:
            problems.append(problem(*found))
    if problems:
        from .routing import raise_problems

        raise_problems(problems)


__all__ = ["Answering", "InvalidRequest", "Routing", "agent_call", "agent_requests",
           "check_requests", "chunked", "router_batch", "router_one"]
