"""What the LlamaIndex classes share (`kime.integrations.llamaindex` and its selectors): the
query's text, the choice question's criteria, the gated confidence, and `DecisionControls`, where
a class's decision runs with its per-call controls. Imports no LlamaIndex."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence

from ..laya.confidence import gate_confidence
from .guard import answers_map, malformed, where_of
from .runner import execute_decision

CONTROL_NAMES = ("agent", "base_url", "api_key", "model", "max_len", "head_max_len", "lang",
                 "min_confidence", "task", "lang_guess", "hooks", "on_predict_start",
                 "on_predict_end", "hooks_raise", "hooks_timeout")
"""Where the decision runs and its per-call controls: every class's constructor takes each."""

def query_text(query: Any) -> str:
    """The text of a query: a `str` as is, a `QueryBundle` (anything with `query_str`) by that."""
    if isinstance(query, str):
        return query
    if hasattr(query, "query_str"):
        return str(query.query_str)
    return str(query)


def choice_criteria(choices: Sequence[Any]) -> Dict[str, str]:
    """The choice question's criteria: `choice_<i>` -> "name: description" for each candidate.

    A candidate is a `ToolMetadata` (anything with `name` / `description`), a dict with those
    keys, or a plain string (its description). A missing description is the name, then
    "Option <i>"; without a name the criterion is the description alone.
    """
    criteria: Dict[str, str] = {}
    for i, choice in enumerate(choices):
        name = getattr(choice, "name", None)
        desc = getattr(choice, "description", None)
        if isinstance(choice, dict):
            name = choice.get("name", name)
            desc = choice.get("description", desc)
        elif isinstance(choice, str):
            desc = choice
        if not desc:
            desc = name or "Option %d" % i
        criteria["choice_%d" % i] = "%s: %s" % (name, desc) if name else str(desc)
    return criteria


def gated_confidence(answer: Dict[str, Any]) -> float:
    """The number `confidence_threshold` is compared with: the abstention gate's own
    (`answer_confidence`, else `confidence`), or 1.0 for an answer that reports neither."""
    conf = gate_confidence(answer or {})
    return conf if conf is not None else 1.0


def choice_name(choice: Any, index: int) -> str:
    """How a reason names a candidate: its `name` attribute, else `choice_<index>`."""
    return getattr(choice, "name", None) or "choice_%d" % index


class DecisionControls:
    """Where a LlamaIndex class's decision runs, and its per-call controls (`CONTROL_NAMES`)."""

    last_decision: Optional[Dict[str, Any]]

    def _keep_controls(self, given: Dict[str, Any]) -> None:
        # `given` is the constructor's locals(): each control becomes the attribute of its name,
        # as on laya's classes, and the decision of the last call starts unset.
        for name in CONTROL_NAMES:
            setattr(self, name, given[name])
        self.last_decision = None

    def _decide(self, state: str, questions: Dict[str, Any]) -> Dict[str, Any]:
        decision = execute_decision(state, questions,
                                    **{name: getattr(self, name) for name in CONTROL_NAMES})
        self.last_decision = decision
        return decision

    def _answer(self, decision: Dict[str, Any], qid: str) -> Dict[str, Any]:
        """The answer to `qid` ({} when absent), refusing a reply shape that cannot be read."""
        return answers_map(decision, self._where()).get(qid, {})

    def _chosen(self, answer: Dict[str, Any]) -> Optional[str]:
        chosen = answer.get("choice")
        if chosen is not None and not isinstance(chosen, str):
            raise malformed(self._where(), "'choice' must be a string, got %s"
                            % type(chosen).__name__)
        return chosen

    def _where(self) -> str:
        return where_of(getattr(self, "base_url", None))
