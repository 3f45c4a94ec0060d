"""The size limits of Laya's surfaces, each in one place (issue 53: `MAX_SCORE_LEVELS` was 32
in the server's checks and 10 in the schema planner under one name, and two modules held their
own `MAX_STATE_CHARS`).

laya 0.4.15 bounds what it takes from outside the process: laya serve's body checks
(`laya/serve.py`) and its structured planner (`laya/structured.py`); its Python API bounds
nothing but the model's own rules (`kime.request`). Each limit here is named for what it
bounds, and every surface that applies one reads it here: `kime serve` (`kime.serve.limits`),
`kime mcp` (`kime.mcp.validate`), the planner (`kime.laya.schemas`, which keeps laya's names
at laya's import path). Where two of laya's surfaces bound the same thing differently, both
limits are here, side by side, and `tests/project/test_limits.py` says why.
"""
from __future__ import annotations

import json
from typing import Any

STATE_CHARS = 50000
"""A state's length in characters (`state_chars`): laya serve's `MAX_STATE_CHARS` (413), and
the default of `kime mcp --max-state-chars`. A state is read from its first window, so past
this it only costs tokenizing."""
QUESTIONS = 64
"""Questions in one body (laya serve's `MAX_QUESTIONS`, 413)."""
BATCH_STATES = 64
"""States in one batch body (laya serve's `MAX_BATCH_STATES`, 413)."""
BODY_BYTES = 2 * 1024 * 1024
"""A request body's bytes (laya serve's `MAX_BODY_BYTES`, 413)."""
CHOICE_OPTIONS = 100
"""Options of one choice in a body, answered in one pass (laya serve's `MAX_CHOICE_OPTIONS`)."""
TOURNAMENT_CHOICE_OPTIONS = 255
"""A choice's options with `tournament_group` on: Jev's, since the choice is read in groups."""
BODY_SCORE_LEVELS = 32
"""Levels of one score question in a body (laya serve's `MAX_SCORE_LEVELS`, 413)."""
TOTAL_OPTIONS = 512
"""Options across a body's questions (laya serve's `MAX_TOTAL_OPTIONS`, 413)."""
SCHEMA_PROPERTIES = 32
"""Properties of a schema planned as questions (laya.structured's `MAX_PROPERTIES`)."""
SCHEMA_OPTIONS = 32
"""Options of one enum property (laya.structured's `MAX_OPTIONS`)."""
SCHEMA_SCORE_LEVELS = 10
"""Levels an integer range may become as a score question (laya.structured's
`MAX_SCORE_LEVELS`): a plan, not a body, so not `BODY_SCORE_LEVELS`."""


def state_chars(state: Any) -> int:
    """A state's length as laya serve counts it: a string's characters, anything else's JSON
    text with non-ASCII kept. Raises `ValueError` for a state JSON cannot write (each surface
    words the refusal its own way)."""
    if isinstance(state, str):
        return len(state)
    try:
        return len(json.dumps(state, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError) as e:
        raise ValueError("the state is not JSON-serializable: %s" % type(e).__name__) from None


__all__ = ["BATCH_STATES", "BODY_BYTES", "BODY_SCORE_LEVELS", "CHOICE_OPTIONS", "QUESTIONS",
           "SCHEMA_OPTIONS", "SCHEMA_PROPERTIES", "SCHEMA_SCORE_LEVELS", "STATE_CHARS",
           "TOTAL_OPTIONS", "TOURNAMENT_CHOICE_OPTIONS", "state_chars"]
