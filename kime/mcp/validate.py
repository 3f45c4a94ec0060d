"""What an MCP tool accepts, checked before anything runs, with laya-mcp-server's error codes
and texts (Laya 0.4.15's `laya/mcp/tools.py`).

A tool's arguments come from a language model, so every value is checked here and a mistake
comes back as a `ToolError`: a short code (`invalid_questions`, `invalid_model`, ...) and a
message the model can act on. Imports no `mcp`: the tools and these checks run, and are tested,
without the SDK.

kime's additions to Laya's checks, each turning what laya reports as an `internal_error` (or a
server crash over the wire) into the caller's mistake: a string that holds an unpaired surrogate
and a state longer than `--max-state-chars` (`kime.laya.limits.STATE_CHARS`) are
`invalid_state`; a checkpoint name registered on the serving Router (`--model NAME=SOURCE`) is
a valid `model`, where laya knows only its three. The rules a question follows (a noul's
labels, an option order, a token budget) are the Agent's own (`kime.render`, `kime.request`),
worded in laya's tools' voice.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

from ..laya.confidence import MinConfidence, check_min_confidence
from ..laya.hooks import validate_timeout
from ..laya.limits import STATE_CHARS, state_chars
from ..laya.routing import normalise_name
from ..render import is_option_order, noul_labels_problem
from ..request import budget_problems

AUTO = "auto"
"""The tools' own word for "let the router choose"; every other `model` names a checkpoint."""
VALID_TYPES = ("choice", "noul", "score")
PINNED = "%s routes between checkpoints; with a pinned model there is nothing to route"


class ToolError(Exception):
    """A refusal the client may read: `code` names the kind, `message` says what to fix."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def payload(self) -> Dict[str, str]:
        """The JSON body of the tool's error result: `{"error": code, "message": ...}`."""
        return {"error": self.code, "message": self.message}


def _bad_questions(message: str) -> ToolError:
    return ToolError("invalid_questions", message)


def _check_labels(name: str, labels: Any) -> None:
    # The Agent's rule (`noul_labels_problem`), in laya's tools' words for each reason.
    why = noul_labels_problem(labels)
    if why == "keys":
        raise _bad_questions("questions[%s].labels must map exactly 'false' and 'true' to "
                             "distinct non-empty strings" % name)
    if why == "types":
        raise _bad_questions("questions[%s].labels must give 'false' and 'true' string values, "
                             "got %s" % (name, [type(labels[k]).__name__
                                                for k in ("false", "true")]))
    if why == "texts":
        raise _bad_questions("questions[%s].labels must give 'false' and 'true' distinct "
                             "non-empty strings" % name)


def _check_order(name: str, order: Any, n: int) -> List[int]:
    # The Agent's rule (`is_option_order`): slot s shows option order[s].
    if not is_option_order(order, n):
        raise _bad_questions("questions[%s].option_order must be a permutation of range(%d) -- "
                             "one slot per option, each option once -- got %r" % (name, n, order))
    return list(order)


def _criteria(name: str, qtype: str, criteria: Any) -> Any:
    if qtype == "choice":
        if not isinstance(criteria, dict) or not criteria:
            raise _bad_questions("questions[%s].criteria must be a non-empty object of label -> "
                                 "description" % name)
        return {str(k): v for k, v in criteria.items()}
    if qtype == "score":
        if not isinstance(criteria, list) or not criteria:
            raise _bad_questions("questions[%s].criteria must be a non-empty list of rubric "
                                 "levels" % name)
        if None in criteria:
            raise _bad_questions("questions[%s].criteria has a null level at index %d; give "
                                 "every level a description" % (name, criteria.index(None)))
        return list(criteria)
    if criteria is None:
        return None
    if not isinstance(criteria, dict):
        raise _bad_questions("questions[%s].criteria must be an object when present (noul)"
                             % name)
    keys = {str(k).lower() for k in criteria}
    if not keys <= {"true", "false"}:
        raise _bad_questions("questions[%s].criteria must be keyed only 'true'/'false' (either or "
                             "both, omitting it is fine), got %s. To word the answer differently "
                             "set 'labels' instead." % (name, sorted(keys)))
    return {str(k): v for k, v in criteria.items()}


def validate_questions(questions: Any) -> Dict[str, Dict[str, Any]]:
    """The questions rebuilt from the fields a tool passes on (type, instructions, criteria,
    labels, option_order), each checked; the first problem raises `invalid_questions`."""
    if not isinstance(questions, dict) or not questions:
        raise _bad_questions("questions must be a non-empty JSON object keyed by question name")
    cleaned: Dict[str, Dict[str, Any]] = {}
    for name, spec in questions.items():
        if not isinstance(name, str) or not name:
            raise _bad_questions("question name must be a non-empty string: %r" % (name,))
        if not isinstance(spec, dict):
            raise _bad_questions("questions[%s] must be an object" % name)
        qtype = spec.get("type")
        if qtype not in VALID_TYPES:
            raise _bad_questions("questions[%s].type must be one of %s, got %r"
                                 % (name, list(VALID_TYPES), qtype))
        instructions = spec.get("instructions")
        if not isinstance(instructions, str) or not instructions.strip():
            raise _bad_questions("questions[%s].instructions must be a non-empty string" % name)
        entry: Dict[str, Any] = {"type": qtype, "instructions": instructions}
        criteria = _criteria(name, qtype, spec.get("criteria"))
        if criteria is not None:
            entry["criteria"] = criteria
        if "labels" in spec:
            if qtype != "noul":
                raise _bad_questions("questions[%s].labels is only supported for noul questions"
                                     % name)
            _check_labels(name, spec["labels"])
            entry["labels"] = spec["labels"]
        if "option_order" in spec:
            n = 2 if qtype == "noul" else len(entry["criteria"])
            entry["option_order"] = _check_order(name, spec["option_order"], n)
        cleaned[name] = entry
    return cleaned


def _surrogate(value: Any, depth: int = 0) -> Optional[str]:
    """The first string in `value` (keys included) holding an unpaired surrogate, which JSON
    can carry and UTF-8 cannot, or None."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value
        return None
    if depth > 200:
        return None
    if isinstance(value, dict):
        items: List[Any] = [*value.keys(), *value.values()]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        return None
    for item in items:
        found = _surrogate(item, depth + 1)
        if found is not None:
            return found
    return None


def validate_state(state: Any, max_chars: int = STATE_CHARS) -> Dict[Any, Any]:
    """A non-empty JSON object, as laya's tools take a state; kime also refuses one holding an
    unpaired surrogate, or longer than `max_chars` as JSON (0: no limit)."""
    if not isinstance(state, dict) or not state:
        raise ToolError("invalid_state", "state must be a non-empty JSON object")
    text = _surrogate(state)
    if text is not None:
        raise ToolError("invalid_state", "state contains an unpaired surrogate escape (%r); "
                        "those cannot be encoded as UTF-8" % (text[:40],))
    if max_chars:
        try:
            n = state_chars(state)
        except ValueError:
            raise ToolError("invalid_state", "state must be JSON-serializable") from None
        if n > max_chars:
            raise ToolError("invalid_state", "state too large (%d > %d chars)" % (n, max_chars))
    return dict(state)


def validate_model(model: Any, resolve: Optional[Callable[[Any], str]] = None) -> str:
    """The canonical checkpoint `model` names, or `AUTO` for None/'auto'. `resolve` is the
    serving Router's (it knows the checkpoints registered on it); without one, Laya's three."""
    if model is None or (isinstance(model, str) and model.strip().lower() == AUTO):
        return AUTO
    try:
        return (resolve or normalise_name)(model)
    except ValueError as error:
        raise ToolError("invalid_model", "%s, or %r" % (error, AUTO)) from None


def validate_task(task: Any, resolve: Optional[Callable[[Any], str]] = None) -> Any:
    """`task` as the caller spelled it, once it names a checkpoint (`typed_decisions` is
    `typed-decisions`); None when unset."""
    if task is None:
        return None
    name = "typed-decisions" if str(task).lower().replace("-", "_") == "typed_decisions" else task
    try:
        (resolve or normalise_name)(name)
    except ValueError as error:
        raise ToolError("invalid_task", "%s, or %r" % (error, "typed_decisions")) from None
    return task


def validate_lang(lang: Any) -> Optional[str]:
    """A language code, passed on as given; only its type is checked."""
    if lang is not None and not isinstance(lang, str):
        raise ToolError("invalid_lang", "lang must be a language code like 'en' or 'de', got %r"
                        % (lang,))
    return lang


def validate_lang_guess(lang_guess: Any) -> Optional[str]:
    """A soft language hint for routing: a code (a client cannot send a callable)."""
    if lang_guess is not None and not isinstance(lang_guess, str):
        raise ToolError("invalid_lang_guess", "lang_guess must be a language code like 'en' or "
                        "'de', got %r" % (lang_guess,))
    return lang_guess


def validate_budget(value: Any, name: str) -> Optional[int]:
    """A positive integer token budget (`max_len`, `head_max_len`, `window`, `stride`): the
    request's rule for a budget over the wire (`kime.request.budget_problems`)."""
    problems = budget_problems(name, value, [name], wire=True)
    if problems:
        raise ToolError("invalid_%s" % name, problems[0]["msg"])
    return value


def validate_min_confidence(value: Any) -> Optional[MinConfidence]:
    """The abstention threshold, by the confidence gate's own rule."""
    if value is None:
        return None
    try:
        return check_min_confidence(value)
    except (TypeError, ValueError) as exc:
        raise ToolError("invalid_min_confidence", str(exc)) from None


def validate_hooks_timeout(value: Any) -> Optional[float]:
    """A positive number of seconds for the Router's hooks, or None (a bool is refused)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ToolError("invalid_hooks_timeout", "hooks_timeout must be a positive number or "
                        "None, got %r" % (value,))
    try:
        return validate_timeout(value)
    except (TypeError, ValueError) as exc:
        raise ToolError("invalid_hooks_timeout", str(exc)) from None


def validate_positive(value: Any, name: str, minimum: int, what: str) -> int:
    """An integer of at least `minimum` (`k`, `batch_size`, `group_size`), bools refused."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ToolError("invalid_%s" % name, "%s must be %s, got %r" % (name, what, value))
    return value


def refuse_pinned(model: str, **hints: Any) -> None:
    """`task` and `lang_guess` only choose a checkpoint: with `model` pinned they are refused."""
    for name, value in hints.items():
        if model != AUTO and value is not None:
            raise ToolError("invalid_%s" % name, PINNED % name)


BATCH_ITEM_OVERRIDES = ("model", "task", "lang", "lang_guess", "max_len", "head_max_len")
"""The per-request controls a batch item may carry, in the order the tools document them."""


def batch_item_keys(omit: tuple = ()) -> str:
    """A batch item's shape in one phrase, for the tools' descriptions and refusals."""
    keys = [key for key in BATCH_ITEM_OVERRIDES if key not in omit]
    return "{state, questions, %s} objects" % ", ".join("%s?" % key for key in keys)


def _batch_item(request: Any, i: int, resolve: Optional[Callable[[Any], str]],
                max_chars: int) -> Dict[str, Any]:
    where = "requests[%d]" % i
    if not isinstance(request, dict):
        raise ToolError("invalid_request", "%s must be an object with 'state' and 'questions'"
                        % where)
    item: Dict[str, Any] = {"state": validate_state(request.get("state"), max_chars),
                            "questions": validate_questions(request.get("questions"))}
    if request.get("model") is not None:
        try:
            model = validate_model(request["model"], resolve)
        except ToolError as error:
            raise ToolError("invalid_model", "%s['model']: %s" % (where, error)) from None
        if model != AUTO:
            item["model"] = model
    for key in ("task", "lang"):
        if key in request:
            value = request[key]
            if not isinstance(value, str) or not value.strip():
                raise ToolError("invalid_request", "%s[%r] must be a non-empty string, got %r"
                                % (where, key, value))
            item[key] = value
    if "lang_guess" in request:
        item["lang_guess"] = validate_lang_guess(request["lang_guess"])
    for key in ("max_len", "head_max_len"):
        if request.get(key) is not None:
            try:
                item[key] = validate_budget(request[key], key)
            except ToolError as error:
                raise ToolError("invalid_%s" % key, "%s[%r]: %s" % (where, key, error)) from None
    return item


def validate_batch(requests: Any, resolve: Optional[Callable[[Any], str]] = None,
                   max_chars: int = STATE_CHARS) -> List[Dict[str, Any]]:
    """Every request of a batch checked as the single tools check theirs, in order, before
    anything loads: one bad item fails the call."""
    if not isinstance(requests, list) or not requests:
        raise ToolError("invalid_request", "requests must be a non-empty array of %s"
                        % batch_item_keys())
    return [_batch_item(request, i, resolve, max_chars) for i, request in enumerate(requests)]
