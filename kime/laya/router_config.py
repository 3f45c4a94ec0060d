"""What a `Router` is built from, checked as Laya 0.4.15 checks it: `agent_kwargs` (what each
Agent it builds receives), `max_loaded`, `idle_unload_seconds`, revisions, and the
`sha256_digests` per checkpoint (from the argument and `LAYA_SHA256_DIGESTS`).
"""
from __future__ import annotations

import inspect
import json
import math
import os
import warnings
from typing import Any, Dict, Optional, Tuple

from .agent import Agent
from . import routing
from .routing import refusal

# What the Router passes to every Agent it builds, and the hook family (which belongs on the
# Router, or it would fire from two registries): `agent_kwargs` may not name them.
_ROUTER_OWNED_AGENT_ARGS = frozenset({
    "model_id_or_path", "device", "token", "subfolder", "revision", "hooks", "on_predict_start",
    "on_predict_end", "hooks_raise", "hooks_concurrent", "hooks_timeout"})


def check_agent_kwargs(agent_kwargs: Dict[str, Any]) -> None:
    """Refuse, before anything loads, an `agent_kwargs` name the Router sets itself or that
    `Agent` does not take (read from `Agent.__init__`, so the list cannot go stale)."""
    accepted = set(inspect.signature(Agent.__init__).parameters) - {"self"}
    reserved = sorted(set(agent_kwargs) & _ROUTER_OWNED_AGENT_ARGS)
    if reserved:
        raise refusal(
            ["agent_kwargs"], "Router sets %s itself; pass them to Router(...) instead of in "
            "agent_kwargs" % ", ".join(repr(n) for n in reserved), reserved)
    unknown = sorted(set(agent_kwargs) - accepted)
    if unknown:
        accepts = sorted(accepted - _ROUTER_OWNED_AGENT_ARGS)
        raise refusal(["agent_kwargs"], "Agent accepts none of %s; it accepts %s"
                      % (", ".join(repr(n) for n in unknown), accepts), unknown)


def digests_from_env(names: Any, resolve: Any) -> Dict[str, Optional[Dict[str, str]]]:
    """`LAYA_SHA256_DIGESTS` when it is keyed by checkpoint (`{"english": {file: digest}}`):
    each named checkpoint's map, and `{}` for the others so the nested map is never read as a
    flat one. A flat map is `verify_digests`' own reading and gives `{}` here."""
    raw = os.environ.get("LAYA_SHA256_DIGESTS", "").strip()
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return {}
    if not isinstance(data, dict) or not data or all(isinstance(v, str) for v in data.values()):
        return {}
    if not all(isinstance(v, dict) for v in data.values()):
        raise refusal(
            ["LAYA_SHA256_DIGESTS"], "LAYA_SHA256_DIGESTS must be either {artifact: digest} "
            "for every checkpoint or {model: {artifact: digest}} per checkpoint; %s mixes the "
            "two or holds a value that is neither" % sorted(data), sorted(data))
    per_model: Dict[str, Optional[Dict[str, str]]] = {resolve(k): dict(v)
                                                      for k, v in data.items()}
    for name in names:
        per_model.setdefault(resolve(name), {})
    return per_model


def expected_digests(shared: Any, own: Any) -> Any:
    """One checkpoint's `expected_sha256`: the shared map (`agent_kwargs`) and its own entry
    merged file by file, its own winning; None when neither says anything, so `verify_digests`
    falls back to the environment. A non-mapping is passed on for `verify_digests` to refuse."""
    if own is not None and not isinstance(own, dict):
        return own
    if shared is not None and not isinstance(shared, dict):
        return shared
    if shared is None and own is None:
        return None
    return {**(shared or {}), **(own or {})}


ABSENT = object()


def count_loaded(max_loaded: Any) -> int:
    """`max_loaded` as Laya reads it: `int()` of it, at least 1; `int()`'s refusal, as a kime
    error with the same message."""
    try:
        return max(1, int(max_loaded))
    except (TypeError, ValueError) as exc:
        raise refusal(
            ["max_loaded"], str(exc), repr(max_loaded),
            "type_error" if isinstance(exc, TypeError) else "value_error") from None


def idle_seconds(value: Any) -> float:
    """`idle_unload_seconds` as a number of seconds, 0 for never (None or 0)."""
    try:
        seconds = 0.0 if value is None or isinstance(value, bool) and not value else float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not math.isfinite(seconds) or seconds < 0:
        raise refusal(["idle_unload_seconds"], "idle_unload_seconds must be a finite number of "
                      "seconds >= 0 (0 or None: never), got %r" % (value,), repr(value))
    return seconds


def pin(value: Optional[str]) -> Optional[str]:
    """A revision, or None for unset and blank alike (an unfilled configuration line)."""
    return value if value is not None and str(value).strip() else None


def agent_options(device: Any, token: Any, subfolder: Optional[str], revision: Optional[str],
                  agent_kwargs: Dict[str, Any], digests: Any) -> Dict[str, Any]:
    """The keyword arguments of the `Agent` a Router builds for one checkpoint: the Router's
    device and token, the checkpoint's pin (None: none), the Router's `agent_kwargs`, and the
    checkpoint's digests (`digests`: its `sha256_digests` entry, `ABSENT` for none) merged
    with theirs."""
    options: Dict[str, Any] = {"device": device, "token": token, "subfolder": subfolder}
    if revision is not None:
        options["revision"] = revision
    options.update(agent_kwargs)
    # no entry: None (the environment may still pin); an entry of None: pins no file
    own = None if digests is ABSENT else {} if digests is None else digests
    expected = expected_digests(options.pop("expected_sha256", None), own)
    if expected is not None:
        options["expected_sha256"] = expected
    return options


def checked_registration(name: Any, source: Any) -> Tuple[str, Any]:
    """(the canonical name, the source) of a checkpoint registered under `name`, with Laya's
    refusals: a name that is no checkpoint name (or is `auto`), a source of the wrong type.
    A leading `~` is expanded; a name one edit from a built-in warns (a typo, most likely)."""
    key = routing.canonical_name(name)
    if key not in routing.DEFAULT_MODELS:
        if not isinstance(name, str) or not routing.NAME.match(key):
            raise refusal(
                ["models", str(name)], "invalid checkpoint name %r: use lowercase letters, "
                "digits, '.', '_' or '-', starting with a letter or digit" % (name,), name)
        if key == "auto":
            raise refusal(
                ["models", key], "invalid checkpoint name %r: 'auto' means automatic "
                "routing in every model= argument" % (name,), name)
    if source is not None and not isinstance(source, (str, tuple, list)):
        raise refusal(
            ["models", key], "checkpoint source for %r must be a repo id, a local path or "
            "a (repo, subfolder) pair, got %s" % (name, type(source).__name__),
            repr(source), "type_error")
    if isinstance(source, str) and source.startswith("~"):
        source = os.path.expanduser(source)
    near = routing.near_builtin(key) if key not in routing.DEFAULT_MODELS else None
    if near is not None:  # stacklevel: past _add and Router's constructor or register
        warnings.warn("kime: checkpoint name %r is one edit from the built-in %r; it is "
                      "registered as a separate checkpoint and %r is unchanged."
                      % (key, near, near), RuntimeWarning, stacklevel=4)
    return key, source


__all__ = ["check_agent_kwargs", "checked_registration"]
