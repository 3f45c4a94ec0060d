"""laya serve's body checks: its size limits, refusals and controls, with its status codes and
`detail` texts (Laya 0.4.15's `laya/serve.py`).

Only what is laya serve's own lives here: a body's shape, how big it may be, which fields a
request over HTTP may not carry, and which model it may name. What makes a request valid (a
state that is not None, the questions' rules, a positive token budget) is `kime.request`'s, and
reaches the client as a 422 listing every problem.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from fastapi import HTTPException

from .. import names
from ..laya import limits
from ..request import BUDGETS, budget_problems, raise_if

ROW_TOKENS_ASSUMED = 512
"""The row width a batch's token budget assumes when a request sets no `max_len` (laya serve's
`_BATCH_ROW_TOKENS_ASSUMED`: the English checkpoint's)."""
BODY_REFUSALS = ("hooks", "on_predict_start", "on_predict_end", "hooks_raise", "hooks_timeout")
BATCH_BODY_OUT_PARAMETERS = ("diagnostics",)
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE_SURROGATE_DETAIL = ("request body contains an unpaired surrogate escape; "
                          "those cannot be encoded as UTF-8")


@dataclass(frozen=True)
class Body:
    """A request body that passed laya serve's checks: what the engine is asked."""

    states: List[Any]
    questions: Dict[Any, Any]
    batch_size: Optional[int]


def refuse(status: int, detail: str) -> HTTPException:
    return HTTPException(status_code=status, detail=detail)


def check_shape(body: Any, batch: bool, max_choice_options: int = limits.CHOICE_OPTIONS
                ) -> Tuple[List[Any], Any]:
    """The checks every body passes first, whatever the server runs: its shape, its sizes, the
    fields HTTP cannot carry, and strings UTF-8 cannot encode. Returns (states, questions)."""
    states, questions = _fields(body, batch)
    check_sizes(states, questions, max_choice_options)
    check_refusals(body, batch)
    if _has_lone_surrogate(body):
        raise refuse(400, _LONE_SURROGATE_DETAIL)
    return states, questions


def budgets(body: Dict[str, Any], max_token_budget: int) -> Dict[str, Optional[int]]:
    """The body's token budgets, each checked (`budget`), by name."""
    return {key: budget(body, key, max_token_budget) for key in BUDGETS}


def _fields(body: Any, batch: bool) -> Tuple[List[Any], Any]:
    if not batch:
        if not isinstance(body, dict) or "questions" not in body:
            raise refuse(400, "request body must be an object with a 'questions' field")
        return [body.get("state")], body["questions"]
    if not isinstance(body, dict) or "questions" not in body or "states" not in body:
        raise refuse(400, "request body must be an object with 'states' and 'questions' fields")
    states = body["states"]
    if not isinstance(states, list) or len(states) == 0:
        raise refuse(400, "'states' must be a non-empty list")
    if len(states) > limits.BATCH_STATES:
        raise refuse(413, "too many states in batch (%d > %d)"
                     % (len(states), limits.BATCH_STATES))
    return states, body["questions"]


def check_sizes(states: List[Any], questions: Any,
                max_choice_options: int = limits.CHOICE_OPTIONS) -> None:
    """laya serve's `_check_request_limits` for each state: 400 for a missing state or
    non-object questions, 413 for too many questions or options (`max_choice_options` in one
    choice) or too long a state."""
    for i, state in enumerate(states):
        if state is None:
            # laya serve's answer to a body without a state: the body's shape, not the rule
            # that a state is not None (that one is `kime.request`'s, for Python callers).
            raise refuse(400, "'state' is required")
        if i == 0:
            _check_question_sizes(questions, max_choice_options)
        n = _state_length(state)
        if n > limits.STATE_CHARS:
            raise refuse(413, "state too large (%d > %d chars)" % (n, limits.STATE_CHARS))


def _check_question_sizes(questions: Any, max_choice_options: int) -> None:
    if not isinstance(questions, dict):
        raise refuse(400, "'questions' must be an object")
    if len(questions) > limits.QUESTIONS:
        raise refuse(413, "too many questions (%d > %d)" % (len(questions), limits.QUESTIONS))
    total = 0
    for qid, question in questions.items():
        if not isinstance(question, dict):
            continue
        crit, qtype = question.get("criteria"), question.get("type")
        if qtype == "choice" and isinstance(crit, (dict, list)):
            total += len(crit)
            if len(crit) > max_choice_options:
                raise refuse(413, "too many choice options for %r (%d > %d)"
                             % (qid, len(crit), max_choice_options))
        elif qtype == "score" and isinstance(crit, list):
            total += len(crit)
            if len(crit) > limits.BODY_SCORE_LEVELS:
                raise refuse(413, "too many score levels for %r (%d > %d)"
                             % (qid, len(crit), limits.BODY_SCORE_LEVELS))
    if total > limits.TOTAL_OPTIONS:
        raise refuse(413, "too many answer options across questions (%d > %d)"
                     % (total, limits.TOTAL_OPTIONS))


def _state_length(state: Any) -> int:
    try:
        return limits.state_chars(state)
    except ValueError:
        raise refuse(400, "'state' must be JSON-serializable") from None


def check_model(requested: Any, served: str) -> None:
    """A request may name the model this server runs (or an alias of the same built-in), or a
    name that pins nothing: a Jev id such as "jev-1", the bundle id `convaiinnovations/laya`,
    or a value that is not a string, which laya serve all route automatically. Naming another
    checkpoint -- one of Laya's aliases or a path or Hub id -- is a 422: answering it with this
    model would be a wrong answer, not a routing choice."""
    if not requested:
        return
    text = str(requested).strip()
    if not text or text.lower() == served.lower() or names.is_bundle_id(text):
        return
    if names.builtin(text) is not None and names.builtin(text) == names.builtin(served):
        return
    # A built-in or alias, or anything with a separator (a path, a repo id, an hf:// ref). A
    # leading `.` or `~` alone does not count here, unlike a routed body's `written_as_source`.
    if names.builtin(text) is not None or names.has_separator(text):
        raise refuse(422, "unknown model %r: this server runs %r only; omit model, or send it to "
                     "a server that runs %r" % (text, served, text))


def check_refusals(body: Dict[str, Any], batch: bool) -> None:
    """Fields an in-process caller may pass but a request over HTTP cannot carry."""
    given = sorted(k for k in BODY_REFUSALS if body.get(k) is not None)
    if given:
        raise refuse(422, "%s run inside the server process and cannot be sent to this endpoint; "
                     "install them where laya-serve runs, or drop them" % ", ".join(given))
    if batch:
        given = sorted(k for k in BATCH_BODY_OUT_PARAMETERS if body.get(k) is not None)
        if given:
            raise refuse(422, "%s is filled in place for an in-process caller and cannot be "
                         "returned over HTTP; read the per-group report from the CLI or a local "
                         "Router" % ", ".join(given))


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def check_languages(body: Dict[str, Any]) -> None:
    """`lang` and `lang_guess`: a language code string, or null (laya serve's 422)."""
    for key in ("lang", "lang_guess"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise refuse(422, '%s must be a language code string such as "de", or null' % key)


def check_batch_controls(body: Dict[str, Any]) -> None:
    """The batch route's `batch_size` and `sort_by_length` (laya serve's 422s)."""
    val = body.get("batch_size")
    if val is not None:
        if not isinstance(val, int) or isinstance(val, bool):
            raise refuse(422, "batch_size must be an integer")
        if val < 1:
            raise refuse(422, "batch_size must be a positive integer, got %r" % (val,))
    val = body.get("sort_by_length")
    if val is not None and not isinstance(val, bool):
        raise refuse(422, "sort_by_length must be a boolean")


def budget(body: Dict[str, Any], key: str, cap: int) -> Optional[int]:
    """`max_len`/`head_max_len`: an integer on the wire (laya serve's 422), positive (the
    request's rule), and at most the server's `max_token_budget`."""
    val = body.get(key)
    if val is None:
        return None
    if not isinstance(val, int) or isinstance(val, bool):
        raise refuse(422, "%s must be an integer" % key)
    raise_if(budget_problems(key, val, [key], wire=True))
    if val > cap:
        raise refuse(422, "%s exceeds server limit (%d > %d)" % (key, val, cap))
    return val


def chunk_size(n_states: int, n_questions: int, max_len: Any, max_batch_tokens: int
               ) -> Optional[int]:
    """laya serve's `_batch_chunk_size`: the states one forward pass of a batch may take so it
    holds at most `max_batch_tokens` (a row is `max_len` wide, else `ROW_TOKENS_ASSUMED`), or
    None when the whole batch fits. Never below one state: a batch is chunked, not refused."""
    if n_states <= 0 or n_questions <= 0:
        return None
    width = (max_len if isinstance(max_len, int) and not isinstance(max_len, bool) and max_len > 0
             else ROW_TOKENS_ASSUMED)
    if n_states * n_questions * width <= max_batch_tokens:
        return None
    rows = max(1, max_batch_tokens // width)
    return max(1, min(n_states, rows // n_questions))
