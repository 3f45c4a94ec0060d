"""What a LangChain runnable decides on: the state read out of a chain's or a graph's input
(laya 0.4.15's `_extract_text` and its helpers, in `laya/integrations/langchain.py`).

An input is a string, a message (anything with `.content`), a list of messages, a content-block
list (`[{"type": "text", "text": ...}, ...]`), or a dict: its `state_key` (a key, or a function
of the whole input), else the first of `input`, `text`, `query`, `prompt`, `message`, `body`,
`content`, else its `messages` list, else the dict itself (a JSON state). From a message list the
latest human/user turn is read, else the last. A bare message is its content (laya reads the
repr of one, `content=... additional_kwargs=... id=...`, which changes with every run id; here
it reads as it does inside a dict or a list). Anything else is `str(input)`. A content-block
list with no text in it is handed back as it came, so a structured state reaches the model as
the caller shaped it rather than as a Python repr. No LangChain import: messages are read by
their attributes.
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

StateKey = Optional[Union[str, Callable[[Any], Any]]]

CANDIDATE_KEYS = ("input", "text", "query", "prompt", "message", "body", "content")
"""The dict keys read in this order when no `state_key` names one."""


def content_text(value: Any) -> Any:
    """A message's `content` as text: a block list's text parts joined (one part as is, several
    by newlines); a list with no text part, or any non-list, unchanged (the caller tells the two
    apart by identity)."""
    if not isinstance(value, list):
        return value
    parts = []
    for block in value:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict) and isinstance(block.get("text"), str):
            parts.append(block["text"])
    if not parts:
        return value
    return parts[0] if len(parts) == 1 else "\n".join(parts)


def from_messages(messages: Sequence[Any]) -> Any:
    """The latest human/user turn's content, else the last entry's; "" for no messages."""
    if not messages:
        return ""
    for message in reversed(messages):
        role = getattr(message, "type", None) or getattr(message, "role", None)
        if role in ("human", "user"):
            return content_text(getattr(message, "content", message))
    last = messages[-1]
    return content_text(getattr(last, "content", last))


def from_value(value: Any) -> Any:
    """A dict entry's state: a message's content, a block list's text, a message list's turn."""
    if hasattr(value, "content"):
        return content_text(value.content)
    if isinstance(value, list):
        text = content_text(value)
        return text if text is not value else from_messages(value)
    return value


def extract_text(value: Any, state_key: StateKey = None) -> Any:
    """The state to decide on for one runnable input (the module docstring has the rules)."""
    if state_key is not None:
        if callable(state_key):
            return state_key(value)
        if isinstance(value, dict) and state_key in value:
            return from_value(value[state_key])
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in CANDIDATE_KEYS:
            if key in value:
                return from_value(value[key])
        if isinstance(value.get("messages"), list):
            return from_messages(value["messages"])
        return value
    if isinstance(value, list):
        text = content_text(value)
        return text if text is not value else from_messages(value)
    if hasattr(value, "content"):
        # A bare message (`chat_model | LayaGuardrail(...)` hands one over) is its content.
        # laya falls through to str() here and scores the repr, run id and metadata included.
        return content_text(value.content)
    return str(value)
