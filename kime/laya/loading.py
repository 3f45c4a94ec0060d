"""Where a Laya checkpoint comes from, as Laya 0.4.15's `Agent.__init__` finds it: an existing
path as it is, a name or alias through the bundle repo, anything else through the Hub (cached
or downloaded, pinned and verified); and the spelling checks of Laya's torch-only switches.
"""
from __future__ import annotations

import os
from typing import Any, Optional, Tuple

from .. import hub, names
from ..checkpoint import read_agent_config
from ..errors import ModelNotFound
from .calibration import resolve_lang_temperatures
from .revisions import resolve_revision, snapshot_revision

DEFAULT_MODEL = "convaiinnovations/laya"
"""Laya's default checkpoint: the English model at the root of the bundle repo."""

BACKENDS = ("auto", "eager", "compile", "tilelang", "onnx")
_BACKEND_ALIASES = {"fast": "tilelang", "torch": "eager", "torch.compile": "compile",
                    "inductor": "compile"}


def backend_name(name: Any) -> str:
    """Laya's spelling check for `backend=` (the value itself changes nothing here)."""
    key = str(name).strip().lower().replace("_", "-") if name is not None else "eager"
    key = _BACKEND_ALIASES.get(key, key)
    if key not in BACKENDS:
        raise ValueError("unknown backend %r; use one of %s" % (name, ", ".join(BACKENDS)))
    return key


def checkpoint_dir(name: str, subfolder: Optional[str], revision: Optional[str],
                    token: Optional[str]) -> Tuple[str, Optional[str]]:
    """(the checkpoint's directory, the Hub commit it was loaded at), as Laya finds it: an
    existing path is used as it is; anything else is a Hub checkpoint, taken from the cache or
    downloaded. `subfolder` is a directory inside either."""
    commit: Optional[str] = None
    if os.path.exists(name):
        base = name
    elif names.is_explicit_path(name):
        raise ModelNotFound("Local model path not found: %r. Check that the directory exists and "
                            "that training saved the model successfully." % name)
    else:
        source = names.parse(name)
        if source.kind is names.Kind.PATH:
            base = str(hub.resolve(name))  # a path spelled with `~`: resolve names what is wrong
        else:
            repo = source.repo or names.BUNDLE_REPO
            inner = "/".join(p for p in (source.subfolder, subfolder) if p) or None
            pinned = resolve_revision(repo, revision)
            snapshot = hub.fetch(repo, subfolder=inner, revision=pinned, token=token)
            commit = snapshot_revision(str(snapshot)) or pinned
            base = str(snapshot / source.subfolder) if source.subfolder else str(snapshot)
    directory = os.path.join(base, subfolder) if subfolder else base
    if subfolder and not os.path.isdir(directory):
        raise ModelNotFound("Subfolder %r not found in %r." % (subfolder, name))
    return directory, commit


def resolved_languages(directory: str, lang_temperatures: Any) -> Any:
    """`lang_temperatures` resolved against the checkpoint's shipped temperatures before the
    engine loads, so its warnings come before the checkpoint's, as in Laya. (Resolving is
    idempotent: the Calibration resolves the result again without warning twice.) A
    checkpoint whose temperatures cannot be read is left to the engine to refuse."""
    if lang_temperatures is None:
        return None
    shipped = read_agent_config(directory).temperature
    if not isinstance(shipped, (list, tuple)) or len(shipped) != 3:
        return lang_temperatures
    return resolve_lang_temperatures(lang_temperatures, shipped)


def builtin_alias(name: Any, subfolder: Optional[str]) -> Tuple[Any, Optional[str]]:
    """`laya.load`'s reading of a built-in alias (`laya`, `ml`, ...): the bundle repo and the
    alias's subfolder; anything else is returned as it is."""
    if isinstance(name, str) and subfolder is None and not names.is_local_checkpoint_arg(name):
        spec = names.builtin_spec(name)
        if spec is not None:
            return spec
    return name, subfolder
