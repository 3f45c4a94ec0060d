"""`kime decide --batch`: JSONL requests in, JSONL results out.

Each line is one request: a JSON object with its `state`, its own `questions` or the run's, and
the controls `Router.predict_batch` reads from a request (`model`, `task`, `lang`,
`lang_guess`, `max_len`, `head_max_len`); the run's flags are their defaults. Requests are
answered `batch_size` at a time in shared forward passes, by a Router (each request routed, its
result carrying `routing`) or by one agent. Results are written in input order, one line each.
A line that cannot be answered (not JSON, an unknown field, an invalid question, a checkpoint
that does not load) is written as `{"line": N, "error": {"type", "message"[, "problems"]}}`
and the run goes on.
"""
from __future__ import annotations

import json
from typing import IO, Any, Dict, Iterable, List, Tuple, Union

from ..errors import InvalidRequest, problem
from ..laya.call import agent_requests
from ..laya.driver import run

CONTROLS = ("task", "lang", "lang_guess", "max_len", "head_max_len")
"""What a line may set besides `state`, `questions` and `model`; the flags of the same names
give their defaults."""
ROUTING_ONLY = ("model", "task", "lang_guess")
"""The fields that choose a checkpoint, which only a Router has to choose from."""


def answer(answerer: Any, requests: List[Dict[str, Any]], min_confidence: Any
           ) -> List[Dict[str, Any]]:
    """Answer requests in shared forward passes, through Laya's call pipeline. A Router takes
    them as they are (`predict_batch`); one agent takes them in groups that share their
    questions, budgets and language (`call.agent_requests`). Results come back in the
    requests' order."""
    if hasattr(answerer, "route"):
        return answerer.predict_batch(requests, min_confidence=min_confidence)
    problems = [problem([key], "%s chooses a checkpoint: run with --model auto" % key,
                        "value_error", request[key])
                for request in requests for key in ROUTING_ONLY if key in request]
    if problems:
        raise InvalidRequest(problems)
    return run(agent_requests(answerer, requests, min_confidence))


def parse_line(text: str, questions: Any, defaults: Dict[str, Any]) -> Dict[str, Any]:
    """One line as a request: the defaults, the run's questions, then the line's own fields.
    Raises `InvalidRequest` naming what is wrong with the line."""
    try:
        line = json.loads(text)
    except ValueError as e:
        raise InvalidRequest([problem([], "not a JSON object: %s" % e, "value_error.json",
                                      text.strip())]) from None
    if not isinstance(line, dict):
        raise InvalidRequest([problem([], "a request line is a JSON object, got %s"
                                      % type(line).__name__, "type_error", line)])
    allowed = ("state", "questions", "model") + CONTROLS
    unknown = [key for key in line if key not in allowed]
    if unknown:
        raise InvalidRequest([problem([key], "unknown field %r; a request line holds %s"
                                      % (key, ", ".join(allowed)), "value_error.extra",
                                      line[key]) for key in unknown])
    request = dict(defaults, questions=questions)
    request.update(line)
    if request["questions"] is None:
        raise InvalidRequest([problem(["questions"], "no questions: give the line its own or "
                                      "pass --questions", "value_error.missing", None)])
    return request


def failure(number: int, error: Exception) -> Dict[str, Any]:
    """The output line of a request that failed: its line number and the error."""
    report: Dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, InvalidRequest):
        report["problems"] = error.problems
    return {"line": number, "error": report}


Outcome = Union[Dict[str, Any], Exception]


def _answer_chunk(answerer: Any, chunk: List[Tuple[int, Outcome]], min_confidence: Any
                  ) -> Dict[int, Outcome]:
    """Each line's result or error. One invalid request fails the batch it is in, so then
    every request of it is answered alone, and only the bad ones fail."""
    outcomes: Dict[int, Outcome] = {n: item for n, item in chunk if isinstance(item, Exception)}
    requests = [(n, item) for n, item in chunk if not isinstance(item, Exception)]
    try:
        outcomes.update(zip((n for n, _ in requests),
                            answer(answerer, [r for _, r in requests], min_confidence)))
    except Exception:  # whatever one request did wrong, the others still get answers
        for n, request in requests:
            try:
                outcomes[n] = answer(answerer, [request], min_confidence)[0]
            except Exception as e:
                outcomes[n] = e
    return outcomes


def answer_lines(lines: Iterable[str], answerer: Any, questions: Any, defaults: Dict[str, Any],
                 batch_size: int, min_confidence: Any, out: IO[str]) -> List[int]:
    """Answer every non-blank line, writing one JSON line per request to `out` in input order.
    Returns the line numbers (from 1) whose request failed."""
    failed: List[int] = []
    chunk: List[Tuple[int, Outcome]] = []

    def flush() -> None:
        outcomes = _answer_chunk(answerer, chunk, min_confidence)
        for n, _ in chunk:
            result = outcomes[n]
            if isinstance(result, Exception):
                failed.append(n)
                result = failure(n, result)
            out.write(json.dumps(result, ensure_ascii=False, default=str) + "\n")
        out.flush()
        chunk.clear()

    for number, text in enumerate(lines, 1):
        if not text.strip():
            continue
        try:
            chunk.append((number, parse_line(text, questions, defaults)))
        except InvalidRequest as e:
            chunk.append((number, e))
        if len(chunk) >= batch_size:
            flush()
    if chunk:
        flush()
    return failed
