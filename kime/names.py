"""What a model name means: the one module that reads a string naming a Laya checkpoint.

It owns the built-in names and their aliases, the bundle repo, the standalone repos and the
published ids, the `hf://` reference grammar, the repo-id grammar, Laya's rule for telling a
path from a name, and the canonical spelling. `parse` reads any model string into a typed
`ModelName` (a built-in or alias, an `hf://` reference, the bundle id, another repo id, or a
path). The modules that act on a name (`hub` finds directories, `laya.loading` loads,
`laya.routing` routes, `serve` pins or refuses) ask here and decide nothing about spelling.

The spellings are Laya 0.4.15's: `laya/router.py` (names, aliases, `canonical_name`, the
registrable-name rule) and `laya/agent.py` (`_is_local_checkpoint_arg`, and `Agent.__init__`'s
"a path that does not exist is an error, not a Hub id"), so a string that loads a checkpoint in
Laya names the same one here. Imports only `errors` and the standard library.
"""
from __future__ import annotations

import enum
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .errors import ModelNotFound

BUNDLE_REPO = "convaiinnovations/laya"
"""The Hub repo that bundles the three published checkpoints, one per subfolder."""

MODELS: Dict[str, Optional[str]] = {
    "english": None,
    "multilingual": "multilingual",
    "typed-decisions": "typed-decisions",
}
"""Each built-in name's subfolder of `BUNDLE_REPO`; None is the repo root."""

ALIASES: Dict[str, str] = {
    "en": "english", "laya": "english", "default": "english",
    "multi": "multilingual", "ml": "multilingual", "laya-multilingual": "multilingual",
    "typed": "typed-decisions", "typed_decisions": "typed-decisions",
    "laya-typed-decisions": "typed-decisions", "decisions": "typed-decisions",
}
"""Spellings people type, after trimming and lowercasing, mapped to a name in `MODELS`."""

STANDALONE_REPOS: Dict[str, str] = {
    "english": "convaiinnovations/laya",
    "multilingual": "convaiinnovations/laya-multilingual",
    "typed-decisions": "convaiinnovations/laya-typed-decisions",
}
"""The same checkpoints in their own repos (`Router(standalone_repos=True)`)."""

PUBLISHED_IDS: Dict[str, str] = {repo: name for name, repo in STANDALONE_REPOS.items()
                                 if repo != BUNDLE_REPO}
"""The Hub ids that publish one built-in each. The bundle id is not among them: it holds all
three, so naming it picks none."""

CONFIG_FILE = "rl_agent_config.json"
"""The file whose presence makes a directory a Laya checkpoint."""

HF_PREFIX = "hf://"

REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
"""A Hub repo id, `org/repo`."""

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
"""A name a caller may register a checkpoint under (after trimming and lowercasing): no `/`,
because a repo id or a path is a source, not a name."""


class Kind(str, enum.Enum):
    """What a model string is."""

    BUILTIN = "builtin"  # a built-in name or one of its aliases
    HF_REF = "hf"  # hf://org/repo[/subfolder]
    BUNDLE = "bundle"  # the bundle repo's own id, convaiinnovations/laya
    REPO_ID = "repo"  # any other org/repo that is not a directory here
    PATH = "path"  # a local directory (it may not exist, or not hold a checkpoint)


@dataclass(frozen=True)
class ModelName:
    """A model string, read: a Hub repo and optional subfolder, or a local directory.

    `name` is the string as given, trimmed; `builtin` the built-in it names, for an alias.
    """

    name: str
    kind: Kind
    repo: Optional[str] = None
    subfolder: Optional[str] = None
    path: Optional[Path] = None
    builtin: Optional[str] = None

    def describe(self) -> str:
        """Where the name points, in words, for messages (`subfolder 'x' of Hugging Face ...`)."""
        if self.path is not None:
            return f"local directory {self.path}"
        where = f"subfolder {self.subfolder!r} of " if self.subfolder else "root of "
        return f"{where}Hugging Face repo {self.repo}"


def hub_checkpoint(repo: str, subfolder: Optional[str] = None) -> ModelName:
    """The checkpoint in `subfolder` (or at the root) of Hub repo `repo`, named `repo/subfolder`:
    what a caller that already split a source (Laya's `load(repo, subfolder=...)`) names."""
    name = repo if not subfolder else f"{repo}/{subfolder}"
    kind = Kind.HF_REF if subfolder else (Kind.BUNDLE if is_bundle_id(repo) else Kind.REPO_ID)
    return ModelName(name, kind, repo, subfolder)


# --- spelling ----------------------------------------------------------------------------------

def canonical_name(name: Any) -> str:
    """`name` trimmed, lowercased and de-aliased; whether it names a checkpoint is not asked
    (Laya's `canonical_name`: a Router applies it before looking in its own registry)."""
    key = str(name).strip().lower()
    return ALIASES.get(key, key)


def builtin(name: Any) -> Optional[str]:
    """The built-in checkpoint `name` names (a built-in name or an alias, any case, padded or
    not), or None."""
    key = canonical_name(name)
    return key if key in MODELS else None


def builtin_spec(name: Any) -> Optional[Tuple[str, Optional[str]]]:
    """(bundle repo, subfolder) of a built-in name or alias, or None for anything else (a repo
    id, a path), which callers pass on untouched (Laya's `resolve_model_spec`)."""
    key = builtin(name)
    return (BUNDLE_REPO, MODELS[key]) if key is not None else None


def is_checkpoint_name(text: str) -> bool:
    """Whether `text`, trimmed and lowercased, may name a registered checkpoint (`NAME`)."""
    return NAME.match(text.strip().lower()) is not None


def is_bundle_id(text: str) -> bool:
    """Whether `text` is the bundle repo's id, which holds every built-in and so pins none."""
    return text.strip().lower() == BUNDLE_REPO


def published_builtin(text: str) -> Optional[str]:
    """The built-in a published standalone repo id holds (`convaiinnovations/laya-multilingual`
    is `multilingual`), any case; None for any other string, the bundle id included."""
    return PUBLISHED_IDS.get(text.strip().lower())


def known_names() -> str:
    """What a model string may be, for a refusal's message."""
    return (
        f"known names: {', '.join(MODELS)} (aliases: {', '.join(sorted(ALIASES))}); "
        "or pass hf://org/repo[/subfolder], an org/repo id, or a checkpoint directory"
    )


# --- is this a path? ---------------------------------------------------------------------------
#
# Four questions, each a caller's: the spelling alone (a server must not look at its disk for a
# client's string), the spelling or the disk (Laya's load), and "a path that must exist".

def has_separator(text: str) -> bool:
    """Whether `text` holds a slash or backslash (`os.sep` is one of them): a path, a repo id or
    an `hf://` reference, never a bare name."""
    return "/" in text or "\\" in text or os.sep in text


def written_as_source(text: str) -> bool:
    """Whether `text` is written as a path or a repo id (a slash or backslash, or a leading `.`
    or `~`), not as a name; the disk is not asked. laya serve reads a `model` field this way."""
    return bool(text) and (text.startswith((".", "~")) or has_separator(text))


def holds_checkpoint(text: str) -> bool:
    """Whether `text` is a directory holding a Laya checkpoint (`rl_agent_config.json`)."""
    return bool(text) and os.path.isfile(os.path.join(text, CONFIG_FILE))


def is_local_checkpoint_arg(text: str) -> bool:
    """Laya's `_is_local_checkpoint_arg`: `text` is a path when it is written as one
    (`written_as_source`) or names a directory holding a checkpoint; anything else is a name
    or alias. So `laya` is the alias even beside an empty `./laya`, and `./laya` is the path."""
    return written_as_source(text) or holds_checkpoint(text)


def is_explicit_path(text: str) -> bool:
    """Whether `text` can only be a local path (absolute, or starting `./` or `../`): Laya's
    `Agent.__init__` refuses such a path that does not exist instead of asking the Hub."""
    return text.startswith(("/", "./", "../")) or os.path.isabs(text)


# --- the parse ---------------------------------------------------------------------------------

def parse(name: Any) -> ModelName:
    """Read a model string by Laya's rules; the disk is asked only to tell a path from a name.

    An `hf://` reference first (any case); then a name that is not a path is a built-in or
    alias, else an existing directory, else unknown; a path that does not exist but reads as
    `org/repo` is a repo id. Raises ModelNotFound for an empty string, an unknown bare name
    and a malformed `hf://` reference, naming what is accepted.
    """
    text = str(name).strip()
    if not text:
        raise ModelNotFound(f"empty model name; {known_names()}")
    if text.lower().startswith(HF_PREFIX):
        return _parse_hf(text)
    if not is_local_checkpoint_arg(text):
        key = builtin(text)
        if key is not None:
            return ModelName(text, Kind.BUILTIN, BUNDLE_REPO, MODELS[key], builtin=key)
        if os.path.isdir(text):
            return ModelName(text, Kind.PATH, path=Path(os.path.abspath(text)))
        raise ModelNotFound(f"unknown model {text!r}; {known_names()}")
    expanded = os.path.expanduser(text)
    if not os.path.exists(expanded) and REPO_ID.match(text):
        return ModelName(text, Kind.BUNDLE if is_bundle_id(text) else Kind.REPO_ID, text)
    return ModelName(text, Kind.PATH, path=Path(os.path.abspath(expanded)))


def _parse_hf(text: str) -> ModelName:
    parts = [part for part in text[len(HF_PREFIX):].split("/") if part]
    repo = "/".join(parts[:2])
    if len(parts) < 2 or not REPO_ID.match(repo) or any(part in (".", "..") for part in parts):
        raise ModelNotFound(
            f"bad Hub reference {text!r}: expected hf://org/repo or hf://org/repo/sub/folder"
        )
    return ModelName(text, Kind.HF_REF, repo, "/".join(parts[2:]) or None)


__all__ = ["ALIASES", "BUNDLE_REPO", "CONFIG_FILE", "HF_PREFIX", "Kind", "MODELS", "ModelName",
           "NAME", "PUBLISHED_IDS", "REPO_ID", "STANDALONE_REPOS", "builtin", "builtin_spec",
           "canonical_name", "has_separator", "holds_checkpoint", "hub_checkpoint",
           "is_bundle_id", "is_checkpoint_name", "is_explicit_path", "is_local_checkpoint_arg",
           "known_names", "parse", "published_builtin", "written_as_source"]
