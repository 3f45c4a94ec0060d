"""Laya 0.4.15's supply-chain controls for checkpoints, with its rules and messages: `revision=`
(or `LAYA_REVISION`) pins the commit a Hub checkpoint is loaded at, and `expected_sha256` (or
`LAYA_SHA256_DIGESTS`) lists digests every named file must have before anything is parsed.
Both are opt-in: unset, a load behaves exactly as before.
"""
from __future__ import annotations

import hashlib
import json
import ntpath
import os
from typing import Any, Dict, Optional

PINNED_REVISIONS: Dict[str, str] = {
    "convaiinnovations/laya": "55cf4c4ebb4ebe31b2550e8bdf3bd21b99753851",
    "convaiinnovations/laya-multilingual": "e4e9ddf21a7b1903b7acffd8814ad4307bf63a67",
    "convaiinnovations/laya-typed-decisions": "1a793eb568e6718f15941d08f85432581df534e3",
}
"""The reviewed commits of the published checkpoints (Laya's table). Applied only when asked for
with `revision="reviewed"` or `LAYA_REVISION=reviewed`."""

REVIEWED = "reviewed"


def _pinned(repo: str) -> Optional[str]:
    """The reviewed commit of `repo`; Hub ids are case-insensitive, so the lookup is too."""
    wanted = repo.lower()
    return next((sha for name, sha in PINNED_REVISIONS.items() if name.lower() == wanted), None)


def resolve_revision(repo: str, revision: Optional[str] = None) -> Optional[str]:
    """The revision to load `repo` at: `revision`, else `LAYA_REVISION`, stripped; None for the
    default branch. `reviewed` means the repo's entry in `PINNED_REVISIONS`, and is refused for a
    repo without one rather than loading it unpinned. A blank but non-empty `revision` ("  ")
    means no pin at all, not even the environment's (Laya's rule)."""
    value = (revision or os.environ.get("LAYA_REVISION", "")).strip()
    if not value:
        return None
    if value != REVIEWED:
        return value
    pinned = _pinned(repo)
    if pinned is not None:
        return pinned
    if revision:
        raise ValueError("kime: revision= asked for 'reviewed', but %r has no reviewed SHA in "
                         "PINNED_REVISIONS; pass a commit, branch or tag in revision= instead"
                         % repo)
    raise ValueError("kime: LAYA_REVISION=reviewed, but %r has no reviewed SHA in "
                     "PINNED_REVISIONS; set LAYA_REVISION to a commit or unset it" % repo)


def snapshot_revision(path: str) -> Optional[str]:
    """The commit a huggingface_hub snapshot directory (`.../snapshots/<commit>`) holds, or None
    for any other directory."""
    parent, base = os.path.split(os.path.realpath(path).rstrip(os.sep))
    return base if os.path.basename(parent) == "snapshots" and base else None


def verify_digests(model_dir: str, expected: Optional[Dict[str, Any]] = None) -> None:
    """Check the SHA-256 of each file named in `expected` ({path under model_dir: hex digest};
    `LAYA_SHA256_DIGESTS`, a JSON object, when None). A missing file raises FileNotFoundError;
    a mismatch, or a path that is absolute or leaves the directory, raises ValueError."""
    if expected is None:
        raw = os.environ.get("LAYA_SHA256_DIGESTS", "").strip()
        if not raw:
            return
        try:
            expected = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError("LAYA_SHA256_DIGESTS must be a JSON object of artifact->sha256") \
                from exc
    if not isinstance(expected, dict):
        raise ValueError("expected_sha256 must be a mapping of artifact paths to digests")
    for rel, want in expected.items():
        name = str(rel).replace("\\", "/")
        if name.startswith("/") or os.path.isabs(name) or ntpath.isabs(name):
            raise ValueError("kime: unsafe absolute path in expected digests: %r" % (rel,))
        name = name.lstrip("/")
        if not name or name == ".." or name.startswith("../") or "/../" in name:
            raise ValueError("kime: unsafe path in expected digests: %r" % (rel,))
        path = os.path.join(model_dir, name)
        if not os.path.isfile(path):
            raise FileNotFoundError("kime: cannot verify %r: no such file under %s"
                                    % (rel, model_dir))
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
        got = digest.hexdigest()
        if got.lower() != str(want).strip().lower():
            raise ValueError("kime: SHA-256 mismatch for %s: expected %s, got %s. The artifact "
                             "does not match the reviewed digest; refusing to load it."
                             % (rel, want, got))
