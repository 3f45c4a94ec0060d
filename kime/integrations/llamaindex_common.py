"""What the LlamaIndex classes share (`kime.integrations.llamaindex` and its selectors): the
query's text, the choice question's criteria, and `DecisionControls`, where a class's decision
runs with its per-call controls. Imports no LlamaIndex."""
from __future__ import annotations

from typing import Any, Dict, Sequence

from .caller import Controlled

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


def choice_name(choice: Any, index: int) -> str:
    """How a reason names a candidate: its `name` attribute, else `choice_<index>`."""
    return getattr(choice, "name", None) or "choice_%d" % index


class DecisionControls(Controlled):
    """Where a LlamaIndex class's decision runs, and its per-call controls
    (`kime.integrations.caller`)."""

    def _where(self) -> str:
        return self.caller.where
