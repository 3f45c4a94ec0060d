"""Which Laya checkpoint a request goes to, decided without loading anything: the names and
aliases of the checkpoints, the typed-decisions workflows, language codes, and the precedence
of Laya 0.4.15's `Router._route` (explicit model > task > detected workflow when enabled >
lang > lang_guess > detected language > default), with Laya's reasons word for word.

`kime.laya.router.Router` keeps the engines; this module only decides. What a name means (the
built-ins, their aliases, the canonical spelling, the registrable-name rule) is `kime.names`'s,
the same table `kime.load` resolves; the names below are re-exported from it.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .. import names
from ..errors import InvalidArgument, InvalidRequest, Problem, problem
from ..names import ALIASES, BUNDLE_REPO, NAME, canonical_name
from .lang import analyse

Spec = Union[str, Tuple[str, Optional[str]], List[Any], None]
"""A checkpoint source: a repo id or local path, a (repo, subfolder) pair, or None for an
attached agent that has nothing to be rebuilt from."""

DEFAULT_MODELS: Dict[str, Tuple[str, Optional[str]]] = {
    name: (BUNDLE_REPO, sub) for name, sub in names.MODELS.items()}
"""Each built-in checkpoint as (repo, subfolder) of the bundle."""

STANDALONE_MODELS: Dict[str, str] = names.STANDALONE_REPOS
"""The same checkpoints in their own repos (`Router(standalone_repos=True)`)."""

TYPED_DECISION_WORKFLOWS: Dict[str, frozenset] = {
    "agent_trace_observability": frozenset({"action", "needs_review", "outcome", "risk",
                                            "urgency"}),
    "customer_service": frozenset({"action", "category", "churn_risk", "needs_human",
                                   "urgency"}),
    "invoice_processing": frozenset({"discrepancy_severity", "disposition", "duplicate",
                                     "matches_order", "urgency"}),
    "security_incidents": frozenset({"credential_compromise", "disposition", "severity",
                                     "true_positive", "urgency"}),
}
"""The question ids of the four workflows `typed-decisions` was fine-tuned on."""

# Codes a `lang=` may carry that say the English checkpoint reads the text, and codes that name
# no language at all (`LANG=C` in a container, ISO's undetermined/none/multiple), which abstain.
_ENGLISH_CODES = ("en", "eng", "english")
_NO_LANGUAGE_CODES = ("c", "posix", "und", "zxx", "mul")


def refusal(loc: Sequence[Any], message: str, value: Any,
            kind: str = "value_error") -> InvalidRequest:
    """One problem as the error to raise: `InvalidArgument` (a TypeError too) for a
    `type_error`, else `InvalidRequest`; `str()` of either is `message`, Laya's text."""
    return _error([problem(loc, message, kind, value)])


def raise_problems(problems: List[Problem]) -> None:
    """Raise every problem at once, if there are any."""
    if problems:
        raise _error(problems)


def _error(problems: List[Problem]) -> InvalidRequest:
    typed = any(p["type"].startswith("type_error") for p in problems)
    return (InvalidArgument if typed else InvalidRequest)(problems)


def unknown_model(name: Any, known: Iterable[str],
                  loc: Sequence[Any] = ("model",)) -> InvalidRequest:
    return refusal(
        loc, "unknown model %r; choose one of %s (or an alias: %s)"
        % (name, sorted(known), sorted(ALIASES)), name)


def normalise_name(name: Any) -> str:
    """The built-in checkpoint `name` (or an alias of it) names; refused otherwise."""
    key = names.builtin(name)
    if key is None:
        raise unknown_model(name, DEFAULT_MODELS)
    return key


def resolve_model_spec(name: Any) -> Optional[Tuple[str, Optional[str]]]:
    """(repo, subfolder) of a built-in name or alias, or None for anything else (a repo id, a
    path), which callers pass through untouched."""
    return names.builtin_spec(name)


def split_spec(spec: Spec) -> Tuple[Any, Optional[str]]:
    """(repo or path, subfolder) of a source."""
    if isinstance(spec, (tuple, list)):
        padded = list(spec) + [None]
        return padded[0], padded[1]
    return spec, None


def repo_str(spec: Spec) -> Optional[str]:
    """A source as one string, `repo/subfolder` or `repo` (None for an attached agent's)."""
    repo, sub = split_spec(spec)
    return "%s/%s" % (repo, sub) if sub else repo


def match_typed_decisions_workflow(questions: Optional[Dict[Any, Any]]) -> Optional[str]:
    """The typed-decisions workflow whose question ids are exactly these, else None (a schema
    that merely contains `urgency` is not one)."""
    ids = set(questions or {})
    return next((name for name, sig in TYPED_DECISION_WORKFLOWS.items() if ids == sig), None)


def english_from_code(value: Any) -> Optional[bool]:
    """Whether a language code (`en`, `EN`, `en-US`, `en_US.UTF-8`, `de`, ...) names English;
    None for a code that names no language, so routing falls through to detection."""
    if value is None:
        return None
    code = str(value).strip().lower()
    if not code:
        return None
    primary = code.split(".", 1)[0].replace("_", "-").split("-", 1)[0]
    if not primary or primary in _NO_LANGUAGE_CODES:
        return None
    return primary in _ENGLISH_CODES


def edit_distance(left: str, right: str) -> int:
    """Insertions, deletions, substitutions and adjacent swaps that turn `left` into `right`
    (`enlgish` is one from `english`)."""
    if left == right:
        return 0
    before: Optional[List[int]] = None
    previous = list(range(len(right) + 1))
    for i, a in enumerate(left, 1):
        current = [i]
        for j, b in enumerate(right, 1):
            best = min(current[j - 1] + 1, previous[j] + 1, previous[j - 1] + (a != b))
            if before is not None and j > 1 and a == right[j - 2] and left[i - 2] == b:
                best = min(best, before[j - 2] + 1)
            current.append(best)
        before, previous = previous, current
    return previous[-1]


def near_builtin(key: str) -> Optional[str]:
    """The built-in name one edit from `key`, if any (aliases are too short to compare)."""
    return next((name for name in DEFAULT_MODELS
                 if abs(len(key) - len(name)) <= 1 and edit_distance(key, name) == 1), None)


class RouteDecision(dict):
    """Where a request goes and why: `model`, `repo`, `reason`, `detection` (`lang.analyse`'s
    result when detection decided, else None) and `workflow`. A dict, so it serialises as it
    is into a response's `routing`."""

    @property
    def model(self) -> str:
        return self["model"]

    @property
    def reason(self) -> str:
        return self["reason"]

    def __repr__(self) -> str:
        return "RouteDecision(model=%r, reason=%r)" % (self["model"], self["reason"])


Hint = Union[str, Callable[[Any], Any], None]


def hint_says_english(hint: Hint, state: Any) -> Optional[bool]:
    """A `lang_guess` (a code, or a callable taking the state and returning one) as True /
    False, or None when it abstains."""
    if hint is None:
        return None
    return english_from_code(hint(state) if callable(hint) else hint)


def decide(state: Any, questions: Optional[Dict[Any, Any]], *, models: Dict[str, Spec],
           resolve: Callable[[Any], str], default: str, auto_task_detection: bool,
           installed_guess: Hint, model: Any = None, task: Any = None, lang: Any = None,
           lang_guess: Hint = None, explain: bool = False) -> RouteDecision:
    """Laya's routing precedence and reasons; `resolve` maps a name to a registered key."""
    def decision(key: str, reason: str, detection: Any = None,
                 workflow: Optional[str] = None) -> RouteDecision:
        return RouteDecision(model=key, repo=repo_str(models.get(key)), reason=reason,
                             detection=detection, workflow=workflow)

    if model is not None:
        return decision(resolve(model), "explicit model=%r" % (model,))
    if task is not None:
        wanted = "typed-decisions" if str(task).lower().replace("-", "_") == "typed_decisions" \
            else task
        return decision(resolve(wanted), "explicit task=%r" % (task,))
    workflow = match_typed_decisions_workflow(questions)
    if workflow and auto_task_detection:
        return decision("typed-decisions", "question ids match the %r typed-decisions workflow"
                        % workflow, workflow=workflow)
    said = english_from_code(lang) if lang is not None else None
    if said is not None:
        return decision("english" if said else "multilingual", "explicit lang=%r" % (lang,),
                        workflow=workflow)
    for source, hint in (("lang_guess", lang_guess), ("Router(lang_guess=...)", installed_guess)):
        said = hint_says_english(hint, state)
        if said is not None:
            return decision("english" if said else "multilingual",
                            "%s: the caller identified this as %s text"
                            % (source, "English" if said else "non-English"), workflow=workflow)
    found = analyse(state, explain=explain)
    key, reason = _by_detection(found, default)
    return decision(key, reason, found, workflow)


def _by_detection(found: Dict[str, Any], default: str) -> Tuple[str, str]:
    """The checkpoint `analyse`'s verdict sends a state to, and Laya's reason. Undecided Latin
    text is no evidence of English, so it takes `default` like a state with no letters."""
    if found["script"] == "unknown":
        return default, "no letters detected in state; using default (%s)" % default
    if found["script"] != "latin":
        return "multilingual", ("non-Latin script (%s, %.0f%% of letters); the English "
                                "checkpoint cannot read it"
                                % (found["script"], 100 * float(found["non_latin_fraction"])))
    if not found["is_english"]:
        if found.get("mixed_segment"):
            return "multilingual", ("Latin script, mostly English, but a line or field reads as "
                                    "%r (%r); the English checkpoint cannot read it"
                                    % (found["language"], found["mixed_segment"][:60]))
        if found["language"]:
            return "multilingual", ("Latin script but language looks like %r, not English"
                                    % found["language"])
        return "multilingual", ("Latin script, language not identified but %.0f%% non-English "
                                "letters; not safe for the English checkpoint"
                                % (100 * float(found["diacritic_rate"])))
    if found["language_undecided"]:
        return default, ("Latin script, language not identified and no non-English letters; "
                         "using default (%s)" % default)
    return "english", "English Latin text"


__all__ = ["ALIASES", "BUNDLE_REPO", "DEFAULT_MODELS", "NAME", "RouteDecision",
           "STANDALONE_MODELS", "TYPED_DECISION_WORKFLOWS", "canonical_name", "decide",
           "english_from_code", "match_typed_decisions_workflow", "normalise_name", "repo_str",
           "resolve_model_spec"]
