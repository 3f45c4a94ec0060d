"""What laya's agno integration reads off agno objects: a message's text, and each candidate's
name, role and description as one option of the `delegation` choice (laya 0.4.15's
`_extract_message_str`, `_get_agent_name`, `_get_agent_role`, `_format_agno_criteria`).

Duck-typed on purpose: a candidate is an agno `Agent` or `Team`, a workflow `Step`, a dict, a
string or any object with those attributes, and a message is a string, an agno `RunResponse` or
`Message` (anything with `.content`), a dict, or any other value. Nothing here imports agno.
"""
from __future__ import annotations

from typing import Any, Dict, Sequence

MESSAGE_KEYS = ("content", "message", "text", "input", "query")
"""The dict keys a message's text is read from, first present wins (laya's order)."""


def message_text(message: Any) -> str:
    """The text of `message`: a string as is; `.content` (a string, a list of content blocks
    joined by spaces from their `text`, else `str`); a dict's first `MESSAGE_KEYS` entry; else
    `str(message)`."""
    if isinstance(message, str):
        return message
    if hasattr(message, "content"):
        content = message.content
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            parts = [block.get("text", "") if isinstance(block, dict) else str(block)
                     for block in content]
            return " ".join(part for part in parts if part).strip()
        return str(content)
    if isinstance(message, dict):
        for key in MESSAGE_KEYS:
            if key in message:
                return str(message[key])
    return str(message)


def _field(member: Any, name: str) -> Any:
    """`member`'s `name` field (a dict key or an attribute), None when absent.

    A callable (agno accepts `instructions=lambda agent: [...]`) is read as absent: its repr
    names a memory address, which would put a different option text in every process, and
    calling a user's function from a router could have effects. Laya renders the repr.
    """
    value = member.get(name) if isinstance(member, dict) else getattr(member, name, None)
    return None if callable(value) else value


def member_name(member: Any, index: int) -> str:
    """A candidate's display name: the string itself, else `name`, else `role`, else
    `Agent <index>`."""
    if isinstance(member, str):
        return member
    return str(_field(member, "name") or _field(member, "role") or "Agent %d" % index)


def member_role(member: Any, index: int) -> str:
    """A candidate's role: the string itself, else `role`, else `description`, else
    `Agent <index>`."""
    if isinstance(member, str):
        return member
    return str(_field(member, "role") or _field(member, "description") or "Agent %d" % index)


def _option_text(member: Any, index: int) -> str:
    name = member_name(member, index)
    role = member_role(member, index)
    description = str(_field(member, "description") or _field(member, "instructions") or "")
    if not description:
        return "%s (%s)" % (name, role) if role and role != name else name
    if role == description:  # the role was read from the description: say it once
        return "%s (%s)" % (name, role) if role != name else name
    if role and role != name:
        return "%s (%s): %s" % (name, role, description)
    return "%s: %s" % (name, description)


def criteria(members: Sequence[Any]) -> Dict[str, str]:
    """The `delegation` question's options: `agent_<i>` -> "Name (Role): description", each part
    present only when it adds something."""
    return {"agent_%d" % i: _option_text(member, i) for i, member in enumerate(members)}


def team_members(team: Any) -> Any:
    """A team's candidates: `team.members` (agno's `Team`), else `team.agents` (hand-made
    teams), else none; a callable member list (agno's dynamic members) is called."""
    members = getattr(team, "members", None)
    if not members:
        members = getattr(team, "agents", None) or []
    if callable(members):
        members = members()
    return members
