"""A model string -> a local checkpoint directory: finding it, and fetching it from the Hub.

What a string means (a built-in or alias, an `hf://` reference, a repo id or a path) is
`kime.names`'s to say; this module only finds the directory it points at. `kime.Kime` never
downloads: `resolve` looks names up offline. Two functions here do download: `pull` (behind
`kime pull`) and `fetch`, which Laya's surface (`kime.load`) calls because `laya.load`
downloads a checkpoint missing from the cache on first use.

Hub checkpoints are looked up in huggingface_hub's own cache with `local_files_only=True`: the
engine must start the same way with or without a network, and fetching is an explicit step
(`kime pull`), not a side effect of loading an engine.
"""
from __future__ import annotations

import os
from pathlib import Path

from .errors import ModelNotFound
from .names import ALIASES, BUNDLE_REPO, CONFIG_FILE, HF_PREFIX, MODELS, hub_checkpoint, parse
from .names import ModelName as Source

# Only the files a checkpoint needs, as Laya asks for them: the bundle's root also holds the
# sibling checkpoints, which an unfiltered snapshot would count as part of the root one.
CHECKPOINT_PATTERNS = (CONFIG_FILE, "model.safetensors", "tokenizer/*", "encoder/*")


def resolve(name: str, *, cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The directory holding `name`'s checkpoint (`rl_agent_config.json` and the rest).

    `cache_dir` overrides huggingface_hub's cache (HF_HUB_CACHE / HF_HOME, read when
    huggingface_hub is first imported). Raises ModelNotFound naming what was looked for and where.
    """
    source = locate(name)
    if source.path is not None:
        return _local(source, source.path)
    return _from_cache(source, cache_dir)


def describe(name: str) -> str:
    """What `name` resolves to, in words, without touching the disk beyond telling a path."""
    return locate(name).describe()


def locate(name: str) -> Source:
    """Where `name` points, as `kime.names.parse` reads it: the start of every lookup here."""
    return parse(name)


def _local(source: Source, directory: Path) -> Path:
    if not directory.is_dir():
        raise ModelNotFound(f"model {source.name!r}: no directory at {directory}")
    if not (directory / CONFIG_FILE).is_file():
        raise ModelNotFound(
            f"model {source.name!r}: {directory} is not a Laya checkpoint (no {CONFIG_FILE}); "
            "pass the directory that holds it"
        )
    return directory


def _from_cache(source: Source, cache_dir: str | os.PathLike[str] | None) -> Path:
    # Imported here: huggingface_hub is slow to import and only this path needs it.
    from huggingface_hub import constants, snapshot_download

    repo = source.repo or BUNDLE_REPO
    cache = str(cache_dir) if cache_dir is not None else constants.HF_HUB_CACHE
    prefix = f"{source.subfolder}/" if source.subfolder else ""
    try:
        snapshot = snapshot_download(
            repo,
            allow_patterns=allow_patterns(source.subfolder),
            local_files_only=True,
            cache_dir=cache,
        )
    except (OSError, ValueError) as err:
        # A plain miss says nothing useful ("pass local_files_only=False"); anything else might.
        # Matched by name: the class moved between huggingface_hub versions.
        if _cache_miss(err):
            reason = _miss_reason(err)
        else:
            reason = f"no usable snapshot ({type(err).__name__}: {err})"
        raise ModelNotFound(_missing_message(source, cache, reason, cache_dir)) from err
    directory = Path(snapshot) / prefix
    if not (directory / CONFIG_FILE).is_file():
        reason = f"its snapshot {snapshot} has no {prefix}{CONFIG_FILE}"
        raise ModelNotFound(_missing_message(source, cache, reason, cache_dir))
    return directory


def allow_patterns(subfolder: str | None) -> list[str]:
    """The files Laya downloads for a checkpoint in `subfolder` of a repo (None: the root)."""
    prefix = f"{subfolder}/" if subfolder else ""
    return [prefix + pattern for pattern in CHECKPOINT_PATTERNS]


def pull(name: str, revision: str | None = None, token: str | None = None) -> Path:
    """Download `name`'s checkpoint into huggingface_hub's cache; returns its local directory.

    Only the checkpoint's files are fetched (`allow_patterns`), with huggingface_hub's own
    progress bars. `token` defaults to $HF_TOKEN. A local path has nothing to pull; a failure
    (no network, HF_HUB_OFFLINE=1 and no cached copy, an unknown repo or revision) raises
    ModelNotFound naming the repo.
    """
    source = locate(name)
    if source.path is not None:
        raise ModelNotFound(
            f"model {source.name!r} is the local directory {source.path}: there is nothing to pull"
        )
    import huggingface_hub  # slow to import; looked up at call time so tests can patch it

    repo = source.repo or BUNDLE_REPO
    token = token or os.environ.get("HF_TOKEN") or None
    what = f"{source.describe()}" + (f" at revision {revision!r}" if revision else "")
    try:
        snapshot = huggingface_hub.snapshot_download(
            repo, allow_patterns=allow_patterns(source.subfolder), revision=revision, token=token,
        )
    except Exception as err:  # network, auth, offline and not-found errors differ by version
        detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
        reason = f"{type(err).__name__}" + (f": {detail}" if detail else "")
        if _offline() and "HF_HUB_OFFLINE" not in reason:
            reason += " (HF_HUB_OFFLINE is set: unset it to download)"
        raise ModelNotFound(f"cannot pull model {source.name!r} ({what}): {reason}") from err
    prefix = f"{source.subfolder}/" if source.subfolder else ""
    directory = Path(snapshot) / prefix
    if not (directory / CONFIG_FILE).is_file():
        raise ModelNotFound(
            f"pulled model {source.name!r} ({what}), but its snapshot {snapshot} has no "
            f"{prefix}{CONFIG_FILE}: it is not a Laya checkpoint"
        )
    return directory


def fetch(repo: str, *, subfolder: str | None = None, revision: str | None = None,
          token: str | None = None) -> Path:
    """The snapshot directory holding `repo`'s checkpoint (in `subfolder`, or at its root) in
    huggingface_hub's cache, downloading only when the cache has no copy: Laya's load.

    The cached copy (of `revision`, else the default branch) is used without asking the network,
    so a load that worked offline keeps working. Otherwise the checkpoint's files alone
    (`allow_patterns`) are downloaded with huggingface_hub's own progress bars; `token` defaults
    to $HF_TOKEN. With HF_HUB_OFFLINE=1 a miss raises the same ModelNotFound as `resolve`.
    Returns the snapshot root (its name is the commit), not the subfolder.
    """
    import huggingface_hub  # slow to import; looked up at call time so tests can patch it
    from huggingface_hub import constants

    source = hub_checkpoint(repo, subfolder)
    cache = constants.HF_HUB_CACHE
    prefix = f"{subfolder}/" if subfolder else ""
    patterns = allow_patterns(subfolder)
    try:
        snapshot = huggingface_hub.snapshot_download(
            repo, allow_patterns=patterns, revision=revision, local_files_only=True,
            cache_dir=cache)
        if (Path(snapshot) / prefix / CONFIG_FILE).is_file():
            return Path(snapshot)
        reason = f"its snapshot {snapshot} has no {prefix}{CONFIG_FILE}"
    except (OSError, ValueError) as err:
        if not _cache_miss(err):
            raise ModelNotFound(_missing_message(source, cache, "no usable snapshot (%s: %s)"
                                                 % (type(err).__name__, err), None)) from err
        reason = _miss_reason(err) + (f" at revision {revision!r}" if revision else "")
    if _offline():
        raise ModelNotFound(_missing_message(source, cache, reason, None, offline=True))
    what = source.describe() + (f" at revision {revision!r}" if revision else "")
    try:
        snapshot = huggingface_hub.snapshot_download(
            repo, allow_patterns=patterns, revision=revision, cache_dir=cache,
            token=token or os.environ.get("HF_TOKEN") or None)
    except Exception as err:  # network, auth and not-found errors differ by version
        detail = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ModelNotFound(f"cannot download model {source.name!r} ({what}): "
                            f"{type(err).__name__}" + (f": {detail}" if detail else "")) from err
    if not (Path(snapshot) / prefix / CONFIG_FILE).is_file():
        raise ModelNotFound(f"downloaded model {source.name!r} ({what}), but its snapshot "
                            f"{snapshot} has no {prefix}{CONFIG_FILE}: it is not a Laya checkpoint")
    return Path(snapshot)


def _cache_miss(err: BaseException) -> bool:
    """A cache lookup that found nothing to use: no snapshot, or one missing some of the files
    asked for (a sibling checkpoint of the same repo downloaded alone, huggingface_hub 1.x+'s
    IncompleteSnapshotError, a LocalEntryNotFoundError subclass). Matched by name: the classes
    moved between huggingface_hub versions."""
    return any(cls.__name__ == "LocalEntryNotFoundError" for cls in type(err).__mro__)


def _miss_reason(err: BaseException) -> str:
    if type(err).__name__ == "IncompleteSnapshotError":
        return "its snapshot there lacks this checkpoint's files"
    return "no snapshot of it there"


def _offline() -> bool:
    try:
        from huggingface_hub import constants

        return bool(constants.HF_HUB_OFFLINE)
    except Exception:  # pragma: no cover - huggingface_hub is a dependency
        return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _missing_message(source: Source, cache: str, reason: str,
                     cache_dir: str | os.PathLike[str] | None, offline: bool = False) -> str:
    """Names the model, what it resolved to, the cache looked in, and the commands that fix it.
    `offline`: the miss is final because HF_HUB_OFFLINE is set (kime.load downloads otherwise)."""
    patterns = [f"{source.subfolder}/*"] if source.subfolder else list(CHECKPOINT_PATTERNS)
    include = " ".join(f"--include '{pattern}'" for pattern in patterns)
    cache_flag = f" --cache-dir {cache}" if cache_dir is not None else ""
    why = ("HF_HUB_OFFLINE is set, so nothing is downloaded: unset it, or" if offline
           else "kime never downloads while loading:")
    return (
        f"model {source.name!r} ({source.describe()}) is not in the Hugging Face cache at {cache}: "
        f"{reason}. {why} run `kime pull {source.builtin or source.name}`"
        f" or `hf download {source.repo} {include}{cache_flag}`, or pass the checkpoint's directory"
    )


__all__ = ["ALIASES", "BUNDLE_REPO", "CHECKPOINT_PATTERNS", "CONFIG_FILE", "HF_PREFIX", "MODELS",
           "Source", "allow_patterns", "describe", "fetch", "locate", "pull", "resolve"]
