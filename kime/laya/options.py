"""Laya 0.4.15's per-call options as one frozen value, `CallOptions`, gathered once at each edge
(an `Agent`'s or a `Router`'s keyword arguments, an MCP tool's arguments, an integration's
constructor, a client's request) and handed down whole, so no layer forwards them by hand.

The options are the ones Laya's `predict` family takes besides the state and the questions: the
routing hints (`model`, `task`, `lang`, `lang_guess`), the token budgets (`max_len`,
`head_max_len`), the `min_confidence` gate, and the per-call hooks (`hooks`,
`on_predict_start`, `on_predict_end`, `hooks_raise`, `hooks_timeout`). `None` means "not set":
the answerer's own default holds (Laya's rule; `lang=""`, `min_confidence=0.0`, `hooks=[]` and
`hooks_raise=False` are set). Values are checked where Laya checks them, in the call
(`kime.laya.scope`), so a refusal comes in Laya's order and wording; this module only holds them
and says which of them a given answerer can read.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass, fields, replace
from typing import Any, Callable, Dict, Mapping, Optional, Tuple


@dataclass(frozen=True)
class CallOptions:
    """The options of one call (all unset by default). Build it with `take` from a call's
    arguments, or by name; `given()` is what is set, in this field order."""

    model: Optional[str] = None
    task: Optional[str] = None
    lang: Optional[str] = None
    lang_guess: Any = None
    max_len: Optional[int] = None
    head_max_len: Optional[int] = None
    min_confidence: Any = None
    hooks: Any = None
    on_predict_start: Any = None
    on_predict_end: Any = None
    hooks_raise: Optional[bool] = None
    hooks_timeout: Optional[float] = None

    @classmethod
    def take(cls, values: Mapping[str, Any]) -> "CallOptions":
        """The options among `values` (a call's `locals()`, a request body, a constructor's
        arguments): every key that names an option, the rest left alone."""
        return cls(**{name: values[name] for name in OPTION_NAMES if name in values})

    def given(self, *names: str) -> Dict[str, Any]:
        """The options that are set (of `names`, when given), as keyword arguments."""
        wanted = names or OPTION_NAMES
        return {name: getattr(self, name) for name in wanted if getattr(self, name) is not None}

    def but(self, **changes: Any) -> "CallOptions":
        """A copy with `changes` applied (`None` unsets)."""
        return replace(self, **changes)

    def without(self, *names: str) -> "CallOptions":
        """A copy with `names` unset."""
        return replace(self, **dict.fromkeys(names))

    @property
    def hooked(self) -> Dict[str, Any]:
        """The hook options that are set."""
        return self.given(*HOOK_OPTIONS)

    @property
    def budgets(self) -> Dict[str, Any]:
        """The token budgets that are set."""
        return self.given(*BUDGET_OPTIONS)


OPTION_NAMES: Tuple[str, ...] = tuple(f.name for f in fields(CallOptions))
ROUTING_HINTS = ("task", "lang_guess")
"""What only a Router (or a server, which routes) reads: they choose a checkpoint."""
BUDGET_OPTIONS = ("max_len", "head_max_len")
HOOK_OPTIONS = ("hooks", "on_predict_start", "on_predict_end", "hooks_raise", "hooks_timeout")
"""Python callables and flags run inside the call: a server cannot receive them."""
PER_REQUEST = ("model", "task", "lang", "lang_guess", "max_len", "head_max_len")
"""What one request of a Router's batch carries (the rest is the batch call's)."""
NO_OPTIONS = CallOptions()


def reads(target: Optional[Callable[..., Any]], name: str) -> bool:
    """Whether calling `target` can take keyword `name` (yes when it cannot be inspected or
    takes `**kwargs`, and for no target at all): asked before a call, never by retrying one."""
    if target is None:
        return True
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return True
    return any((p.name == name and p.kind is not p.POSITIONAL_ONLY) or p.kind is p.VAR_KEYWORD
               for p in params.values())


def refuse_unread(options: CallOptions, target: Optional[Callable[..., Any]], where: str,
                  names: Tuple[str, ...] = ROUTING_HINTS) -> None:
    """A ValueError (Laya's integrations' wording) when a routing hint of `options` is set and
    `target` (named `where`, as `Agent.predict`) cannot read it: it answers on the checkpoint it
    was built with, so dropping the hint silently would answer another question."""
    unread = [name for name in names if getattr(options, name) is not None
              and not reads(target, name)]
    if unread:
        one = len(unread) == 1
        raise ValueError(
            "%s %s a routing hint, and %s does not read it: this runner answers on the "
            "checkpoint it was built with. Pass a Router as `agent=`, or drop %s."
            % (", ".join(unread), "is" if one else "are", where, "it" if one else "them"))


__all__ = ["BUDGET_OPTIONS", "CallOptions", "HOOK_OPTIONS", "NO_OPTIONS", "OPTION_NAMES",
           "PER_REQUEST", "ROUTING_HINTS", "reads", "refuse_unread"]
