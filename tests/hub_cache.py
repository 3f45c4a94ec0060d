"""A real, offline Hugging Face cache holding Laya's bundle repo, made of the committed test
checkpoints: what a bare `kime serve` or `--model auto` resolves Laya's default registry from."""
import shutil
from pathlib import Path

from .paths import CHECKPOINTS


def bundle_cache(root: Path) -> Path:
    """`root` as HF_HUB_CACHE with the bundle repo at one commit: english and typed-decisions
    are the tiny checkpoint, multilingual the multilingual-tiny one."""
    repo = root / "models--convaiinnovations--laya"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = repo / "snapshots" / commit
    shutil.copytree(CHECKPOINTS / "tiny", snapshot)
    shutil.copytree(CHECKPOINTS / "multilingual-tiny", snapshot / "multilingual")
    shutil.copytree(CHECKPOINTS / "tiny", snapshot / "typed-decisions")
    return root
