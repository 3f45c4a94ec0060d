"""Question and state -> text, byte-identical to Laya 0.4.15 (`laya/common.py`).

Every string here reaches the tokenizer, so a difference of one space changes the token ids and
therefore the answer. The rules (JSON separators, the `str()` of a label, the noul defaults) are
Laya's; the tests compare the resulting ids against ids recorded from Laya itself.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

State = Union[str, Dict[str, Any], List[Any]]
"""What a question is asked about: text, or a dict or list the model reads as JSON."""
QuestionId = Union[str, int]
"""A validated question's id: the caller's key (a non-empty string or an integer), which also
keys its answer."""
Label = Union[str, int, float, bool]
"""A choice option's label: the answer key as the caller wrote it, rendered as its `str()`."""
Criteria = Union[Dict[Label, Any], List[Any], None]
"""A question's criteria as `to_question` leaves them: label -> description (None for none) for a
choice, the level descriptions for a score, and `"false"`/`"true"` -> description, or None, for
a noul. A description is any JSON value."""

QTYPES: Dict[str, int] = {"choice": 0, "score": 1, "noul": 2}
QTYPE_NAMES: Dict[int, str] = {v: k for k, v in QTYPES.items()}

NOUL_LABELS_ERROR = "noul labels must map exactly 'false' and 'true' to distinct non-empty strings"
NOUL_DEFAULT_FALSE = "no, the statement does not hold"
NOUL_DEFAULT_TRUE = "yes, the statement holds"


def serialize_state(state: State) -> str:
    """A string state as is; a dict or list as JSON with non-ASCII kept (Laya's
    `serialize_state`)."""
    if isinstance(state, str):
        return state
    return json.dumps(state, ensure_ascii=False)


def render_criterion(value: object) -> str:
    """A description as text: strings pass through, anything else is single-line JSON with the
    default `", "` / `": "` separators, so a structured rubric reads as JSON, not a Python repr."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(", ", ": "), default=str)


def render_instructions(ins: object) -> str:
    """Instructions as text. Structured instructions are JSON with non-ASCII kept."""
    return ins if isinstance(ins, str) else json.dumps(ins, ensure_ascii=False)


def noul_labels_problem(labels: object) -> Optional[str]:
    """The rule for a noul's `labels`, which every surface asks: what is wrong with them, or
    None. `keys`: not exactly `false` and `true`; `types`: a text that is not a string; `texts`:
    a text empty once stripped, or both the same. Each surface words its refusal itself (Laya's
    Agent in one sentence, laya's MCP tools per reason)."""
    if not isinstance(labels, dict) or set(labels) != {"false", "true"}:
        return "keys"
    if not isinstance(labels["false"], str) or not isinstance(labels["true"], str):
        return "types"
    false_label, true_label = labels["false"].strip(), labels["true"].strip()
    if not false_label or not true_label or false_label == true_label:
        return "texts"
    return None


def noul_labels(labels: object = None) -> Tuple[str, str]:
    """The (false, true) label texts, stripped. Raises ValueError with Laya's message."""
    if labels is None:
        return "false", "true"
    if noul_labels_problem(labels) is not None:
        raise ValueError(NOUL_LABELS_ERROR)
    assert isinstance(labels, dict)
    return labels["false"].strip(), labels["true"].strip()


def is_option_order(order: object, n: int) -> bool:
    """The rule for `option_order`, which every surface asks: a permutation of range(n), one
    slot per option, integers only (a bool, a float or a numeric string is not an index)."""
    return (isinstance(order, (list, tuple)) and len(order) == n
            and all(isinstance(i, int) and not isinstance(i, bool) for i in order)
            and sorted(order) == list(range(n)))


@dataclass(frozen=True)
class Question:
    """A validated question in the form the layout reads (Laya's `_to_internal`).

    `crit` is a dict of label -> description for a choice (a list of labels became
    `{label: None}`), the list of level descriptions for a score, and a dict keyed
    `"false"`/`"true"` (or None) for a noul. `order` is the option in each slot, or None.
    """

    id: QuestionId
    qtype: str
    instructions: str
    crit: Criteria
    labels: Optional[Dict[str, str]] = None
    order: Optional[Tuple[int, ...]] = None

    @property
    def type_index(self) -> int:
        return QTYPES[self.qtype]

    @property
    def n_options(self) -> int:
        return 2 if self.qtype == "noul" else len(self.crit or ())

    def labels_out(self) -> List[Label]:
        """The answer keys of a choice, in the caller's option order (their original types)."""
        if not isinstance(self.crit, dict):
            raise TypeError("question %r: a %s question has no choice labels"
                            % (self.id, self.qtype))
        return list(self.crit.keys())

    def levels(self) -> List[Any]:
        """A score's level descriptions, level 0 first."""
        if not isinstance(self.crit, list):
            raise TypeError("question %r: a %s question has no score levels"
                            % (self.id, self.qtype))
        return self.crit


def to_question(qid: QuestionId, qdef: Mapping[str, Any]) -> Question:
    """Normalise a definition that passed validation (Laya's `Agent._to_internal`)."""
    qtype = qdef["type"]
    crit = qdef.get("criteria")
    if qtype == "choice" and isinstance(crit, list):
        crit = dict.fromkeys(crit)
    elif qtype == "noul" and isinstance(crit, dict):
        crit = {str(k).lower(): v for k, v in crit.items()}
    order = qdef.get("option_order")
    return Question(
        id=qid,
        qtype=qtype,
        instructions=render_instructions(qdef["instructions"]),
        crit=crit,
        labels=qdef.get("labels"),
        order=None if order is None else tuple(int(i) for i in order),
    )


def render_options(q: Question) -> List[str]:
    """Option texts in option (not slot) order. A noul is always [false, true]. Validation
    gave each type its shape of criteria (`Criteria`)."""
    if q.qtype == "choice":
        assert isinstance(q.crit, dict)
        # `str(label)` even without a description: an int label is rendered as its digits.
        return [str(k) if v is None or v == "" else "%s: %s" % (k, render_criterion(v))
                for k, v in q.crit.items()]
    if q.qtype == "score":
        return ["level %d: %s" % (i, render_criterion(c)) for i, c in enumerate(q.levels())]
    crit = q.crit or {}
    assert isinstance(crit, dict)
    false_label, true_label = noul_labels(q.labels)
    false_crit, true_crit = crit.get("false"), crit.get("true")
    return [
        false_label + ": " + (render_criterion(false_crit) if false_crit not in (None, "")
                              else NOUL_DEFAULT_FALSE),
        true_label + ": " + (render_criterion(true_crit) if true_crit not in (None, "")
                             else NOUL_DEFAULT_TRUE),
    ]


def head_text(q: Question, mask: str) -> str:
    """The text before the options, `"<type> question: <instructions>"`, with the mask token's
    text blanked so the caller cannot plant a marker."""
    return "%s question: %s" % (q.qtype, q.instructions.replace(mask, " "))
