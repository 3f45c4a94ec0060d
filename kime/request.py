"""Requests, and Laya's validation rules with every problem reported at once.

The rules and their wording are Laya 0.4.15's (`Agent._check_question` and the argument checks
of `Agent.predict_batch`). Laya stops at the first problem; kime keeps going and lists them all,
in the order Laya would meet them, so the first problem's `msg` is exactly what Laya raises.
Each problem is in FastAPI's 422 format, located at `["questions", qid, field]` or `["states", i]`.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from .errors import InvalidArgument, InvalidRequest, Problem, problem, relocated
from .render import (NOUL_LABELS_ERROR, QTYPES, Question, State, is_option_order,
                     noul_labels_problem, to_question)

_ADD_TEXT = "add the text the model should answer"
BUDGETS = ("max_len", "head_max_len")
"""A request's token budgets, which override the checkpoint's for it."""

AddProblem = Callable[[Optional[str], str, str, object], None]
"""`add(field, msg, kind, value)`: records one problem of the question being checked, located
at its `field` (None: the question itself)."""


@dataclass
class Request:
    """One state and the questions to answer about it (the `/v1/systemone` wire shape).

    `max_len` and `head_max_len` override the checkpoint's token budget for this request.
    `questions` is the definitions dict, or a `Questions` already validated (many requests that
    share one set are then validated once, not once each).
    """

    state: State
    questions: Union[Dict[Any, Any], "Questions"] = field(default_factory=dict)
    max_len: Optional[int] = None
    head_max_len: Optional[int] = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Request":
        """Read the wire format `{"state": ..., "questions": {...}}`; problems are listed at
        once."""
        if not isinstance(data, Mapping):
            raise InvalidArgument([problem([], "a request must be an object with 'state' and "
                                           "'questions', got %s" % type(data).__name__,
                                           "type_error.dict", data)])
        present = "state" in data and data["state"] is not None
        problems: List[Problem] = state_problems(data.get("state"), ["state"], present=present,
                                                 wire=True)
        questions = data.get("questions", {})
        problems += questions_arg_problems(questions)
        for key in BUDGETS:
            problems += budget_problems(key, data.get(key), [key])
        unknown = sorted(set(data) - {"state", "questions", "max_len", "head_max_len"}, key=str)
        for key in unknown:
            problems.append(problem([key], "unknown field %r; a request has 'state', 'questions', "
                                    "'max_len' and 'head_max_len'" % (key,), "extra_forbidden",
                                    data[key]))
        if problems:
            if isinstance(questions, dict):  # every problem at once: the questions' too
                problems += check_questions(questions)[1]
            raise InvalidArgument(problems)
        return cls(state=data["state"], questions=questions, max_len=data.get("max_len"),
                   head_max_len=data.get("head_max_len"))

    def to_dict(self) -> Dict[str, Any]:
        """The wire format, omitting unset overrides."""
        questions = (self.questions.source if isinstance(self.questions, Questions)
                     else self.questions)
        out: Dict[str, Any] = {"state": self.state, "questions": questions}
        if self.max_len is not None:
            out["max_len"] = self.max_len
        if self.head_max_len is not None:
            out["head_max_len"] = self.head_max_len
        return out


def option_count(qdef: Mapping[str, Any]) -> int:
    """Options a definition renders to: one per criterion, or the noul pair."""
    if qdef.get("type") == "noul":
        return 2
    crit = qdef.get("criteria")
    return len(crit) if isinstance(crit, (dict, list, tuple)) else 0


def check_question(qid: object, qdef: object) -> List[Problem]:
    """Every problem with one question, in the order Laya's `_check_question` meets them."""
    out: List[Problem] = []
    loc: List[object] = ["questions", qid]

    def add(field_: Optional[str], msg: str, kind: str, value: object) -> None:
        out.append(problem(loc + ([field_] if field_ else []), msg, kind, value))

    if qid is None:
        add(None, "question id must not be None", "value_error.id", qid)
    elif not isinstance(qid, (str, int)) or (isinstance(qid, str) and not qid.strip()):
        add(None, "question id must be a non-empty string, got %r" % (qid,), "value_error.id", qid)
    else:
        out += text_problems(qid, loc, "question id %r" % (qid,))
    if not isinstance(qdef, dict):
        add(None, "question %r: definition must be a dict, got %s" % (qid, type(qdef).__name__),
            "type_error.dict", qdef)
        return out

    qtype = qdef.get("type")
    known = isinstance(qtype, str) and qtype in QTYPES
    if not known:
        add("type", "question %r: unknown type %r; use one of %s" % (qid, qtype, sorted(QTYPES)),
            "value_error.type", qtype)
    _check_instructions(qid, qdef, add)
    if not known:
        return out
    _check_criteria(qid, str(qtype), qdef.get("criteria"), add)
    if "option_order" in qdef:
        order = qdef["option_order"]
        n = option_count(qdef)
        if not is_option_order(order, n):
            add("option_order", "question %r: 'option_order' must be a permutation of range(%d) -- "
                "one slot per option, each option once -- got %r" % (qid, n, order),
                "value_error.option_order", order)
    if "labels" in qdef:
        if qtype != "noul":
            add("labels", "question %r: 'labels' is only supported for noul questions" % (qid,),
                "value_error.labels", qdef["labels"])
        else:
            if noul_labels_problem(qdef["labels"]) is not None:
                add("labels", "question %r: %s" % (qid, NOUL_LABELS_ERROR), "value_error.labels",
                    qdef["labels"])
    for field_ in ("instructions", "criteria", "labels"):
        if field_ in qdef:
            out += text_problems(qdef[field_], loc + [field_], "question %r: %r" % (qid, field_))
    return out


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_problems(value: object, loc: Sequence[object], what: str) -> List[Problem]:
    """The rule that every string a model reads is text: a lone UTF-16 surrogate (which JSON's
    `\\udXXX` escapes and Python strings can hold) cannot be encoded or tokenized. Walks dicts
    (keys too) and lists without recursing, so any depth is safe; reports the first one found."""
    stack: List[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found = _SURROGATE.search(item)
            if found:
                return [problem(list(loc), "%s contains an unpaired surrogate (U+%04X) at "
                                "character %d, which is not text: it cannot be encoded as UTF-8 "
                                "or tokenized" % (what, ord(found.group()), found.start()),
                                "value_error.surrogate", item)]
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return []


def _check_instructions(qid: object, qdef: Dict[Any, Any], add: AddProblem) -> None:
    if "instructions" not in qdef:
        add("instructions", "question %r: no 'instructions'; %s" % (qid, _ADD_TEXT), "missing",
            None)
        return
    ins = qdef["instructions"]
    if ins is None:
        add("instructions", "question %r: 'instructions' must not be None; %s" % (qid, _ADD_TEXT),
            "value_error.instructions", ins)
    elif (isinstance(ins, str) and not ins.strip()) or (isinstance(ins, (list, dict)) and not ins):
        add("instructions", "question %r: 'instructions' must not be empty; %s" % (qid, _ADD_TEXT),
            "value_error.instructions", ins)
    elif not isinstance(ins, (str, dict, list, int, float)):
        add("instructions", "question %r: 'instructions' must be a string, dict, or list, got %s"
            % (qid, type(ins).__name__), "type_error.instructions", ins)


def _check_criteria(qid: object, qtype: str, crit: object, add: AddProblem) -> None:
    if qtype == "choice":
        if not isinstance(crit, (dict, list)):
            add("criteria", "question %r: a choice question takes 'criteria' as a dict of label -> "
                "description, or a list of labels" % (qid,), "type_error.criteria", crit)
        elif not crit:
            add("criteria", "question %r: a choice question needs at least one criterion" % (qid,),
                "value_error.criteria", crit)
        else:
            labels = crit if isinstance(crit, list) else list(crit.keys())
            bad = False
            for i, label in enumerate(labels):
                if label is not None and not isinstance(label, (str, int, float, bool)):
                    bad = True
                    add("criteria", "question %r: choice label %d is a %s; a label is rendered as "
                        "option text and used as the answer key, so it must be a scalar (a string, "
                        "number or bool), got %r" % (qid, i, type(label).__name__, label),
                        "type_error.label", label)
                elif label is None:
                    bad = True
                    add("criteria", "question %r: choice label %d is null; a label is rendered as "
                        "option text and used as the answer key, so it must be a string, number or "
                        "bool -- a null label renders as the text \"None\" while its answer key is "
                        "\"null\"" % (qid, i), "value_error.label", label)
            if isinstance(crit, list) and not bad:
                first: Dict[Any, int] = {}
                for i, label in enumerate(crit):
                    if label in first:
                        add("criteria", "question %r: choice label %d (%r) repeats label %d; the "
                            "labels are the answer keys, so every option needs its own (1, 1.0 and "
                            "True are one key)" % (qid, i, label, first[label]),
                            "value_error.label", label)
                    else:
                        first[label] = i
    elif qtype == "score":
        if not isinstance(crit, list):
            add("criteria", "question %r: a score question takes 'criteria' as a list of level "
                "descriptions, index 0 first" % (qid,), "type_error.criteria", crit)
        elif not crit:
            add("criteria", "question %r: a score question needs at least one level" % (qid,),
                "value_error.criteria", crit)
        elif None in crit:
            add("criteria", "question %r: score level %d is null; give every level a description, "
                "index 0 first" % (qid, crit.index(None)), "value_error.criteria", crit)
    elif crit is not None and not isinstance(crit, dict):
        add("criteria", "question %r: a noul question takes 'criteria' as a dict with optional "
            "'true'/'false' descriptions, or omits it" % (qid,), "type_error.criteria", crit)
    elif isinstance(crit, dict):
        keys = {str(k).lower() for k in crit}
        if not keys <= {"true", "false"}:
            add("criteria", "question %r: a noul question takes 'criteria' keyed only "
                "'true'/'false' (either or both, and omitted is fine), got %s. Those keys are the "
                "option texts the model reads; any other key was silently dropped and replaced "
                "with the defaults. If you want the answer worded differently, keep 'criteria' "
                "keyed 'true'/'false' and set 'labels' instead." % (qid, sorted(keys)),
                "value_error.criteria", crit)


def check_questions(questions: Dict[Any, Any]) -> Tuple[List[Question], List[Problem]]:
    """Validate every question; return the normalised ones and every problem found."""
    problems: List[Problem] = []
    for qid, qdef in questions.items():
        problems.extend(check_question(qid, qdef))
    if problems:
        return [], problems
    return [to_question(qid, qdef) for qid, qdef in questions.items()], []


@dataclass(frozen=True)
class Questions:
    """A questions dict that passed validation, with its normalised questions (in order)."""

    source: Dict[Any, Any]
    items: Tuple[Question, ...]


def questions_arg_problems(questions: object,
                           loc: Sequence[object] = ("questions",)) -> List[Problem]:
    """The rule that `questions` is a dict of question id -> definition."""
    if isinstance(questions, (dict, Questions)):
        return []
    return [problem(list(loc), "questions must be a dict of question id -> definition, got %s"
                    % type(questions).__name__, "type_error.dict", questions)]


def validated_questions(questions: Any, loc: Sequence[object] = ()) -> Questions:
    """`questions` checked once, for every request that shares it; raises listing every problem
    (`InvalidArgument` when it is not a dict at all)."""
    if isinstance(questions, Questions):
        return questions
    raise_if([], questions_arg_problems(questions, list(loc) + ["questions"]))
    items, problems = check_questions(questions)
    raise_if([relocated(p, loc) for p in problems])
    return Questions(source=questions, items=tuple(items))


def state_problems(state: object, loc: Sequence[object], present: bool = True,
                   wire: bool = False) -> List[Problem]:
    """The rule for a state: not None (Laya's wording), on the wire a string, dict or list (a
    Python caller's other values are serialised as JSON, as Laya does), and text throughout."""
    if state is None or not present:
        return [problem(list(loc), "state must not be None; pass a string, dict, or list",
                        "missing" if wire else "type_error.none", None)]
    if wire and not isinstance(state, (str, dict, list)):
        return [problem(list(loc), "state must be a string, dict, or list, got %s"
                        % type(state).__name__, "type_error", state)]
    return text_problems(state, loc, "state")


def budget_problems(key: str, value: object, loc: Sequence[object],
                    wire: bool = False) -> List[Problem]:
    """The rule for `max_len` and `head_max_len`, which every surface asks: unset, or an
    integer (never a bool) -- `max_len` positive, `head_max_len` any (Laya's layout crowds the
    options to their floor of four tokens when it is small, even zero or below, and answers).
    `wire`: laya serve and laya's MCP tools also refuse a `head_max_len` below one; their
    callers cannot mean one, where a Python caller computing a budget can reach it.

    Any `max_len` is answered, however far past the model's positions: transformers computes
    RoPE at any position, so Laya does (tests/goldens/limits.json)."""
    if value is None:
        return []
    if isinstance(value, int) and not isinstance(value, bool) and (
            value > 0 or (key == "head_max_len" and not wire)):
        return []
    what = "a positive integer" if key != "head_max_len" or wire else "an integer"
    return [problem(list(loc), "%s must be %s, got %r" % (key, what, value), "value_error",
                    value)]


def check_states(states: Any) -> List[Problem]:
    """`predict_batch`'s argument checks on `states` (Laya raises `TypeError` for these)."""
    if isinstance(states, (str, bytes, dict)):
        return [problem(["states"], "predict_batch expects a list of states; pass a single state "
                        "to predict()/system_one().", "type_error.list", states)]
    try:
        items = list(states)
    except TypeError:
        return [problem(["states"], "predict_batch expects a list of states, got %s"
                        % type(states).__name__, "type_error.list", states)]
    return [p for i, s in enumerate(items) for p in state_problems(s, ["states", i])]


def validate(requests: Sequence[Request], indexed: bool = False) -> List[Questions]:
    """Every request's questions, validated (each distinct questions object once); raises one
    error listing every problem of every request, located by request index when `indexed`."""
    out: List[Questions] = []
    problems: List[Problem] = []
    arg_problems: List[Problem] = []
    seen: Dict[int, Questions] = {}
    for i, req in enumerate(requests):
        prefix: List[object] = [i] if indexed else []
        arg_problems += state_problems(req.state, prefix + ["state"])
        for key in BUDGETS:
            arg_problems += budget_problems(key, getattr(req, key), prefix + [key])
        found = questions_arg_problems(req.questions, prefix + ["questions"])
        if found:
            arg_problems += found
            out.append(Questions(source={}, items=()))
            continue
        qs = seen.get(id(req.questions))
        if qs is None:
            if isinstance(req.questions, Questions):
                qs = req.questions
            else:
                items, found = check_questions(req.questions)
                problems += [relocated(p, prefix) for p in found]
                qs = Questions(source=req.questions, items=tuple(items))
            seen[id(req.questions)] = qs
        elif not qs.items and qs.source:
            # The same invalid dict in another request (`qs.source` is that dict): its problems,
            # located there too.
            _, found = check_questions(qs.source)
            problems += [relocated(p, prefix) for p in found]
        out.append(qs)
    raise_if(problems, arg_problems)
    return out


def raise_if(problems: Sequence[Problem], arg_problems: Sequence[Problem] = ()) -> None:
    """Raise one error listing everything; `InvalidArgument` when an argument had the wrong type."""
    if arg_problems:
        raise InvalidArgument(list(arg_problems) + list(problems))
    if problems:
        raise InvalidRequest(problems)
