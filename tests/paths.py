"""Where the tests' data lies, named once from the repository root, so a test file can move to
another directory without its paths moving with it."""
from __future__ import annotations

from pathlib import Path

#: The checkout (or the copy of tests/ and bench/ that tools/test_wheel.sh runs from).
ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
GOLDENS = TESTS / "goldens"
CHECKPOINTS = GOLDENS / "checkpoints"
TINY = CHECKPOINTS / "tiny"
MULTILINGUAL_TINY = CHECKPOINTS / "multilingual-tiny"
#: The venv with Laya 0.4.15 itself, where a checkout has one (tools/make_goldens.py's oracle).
ORACLE = ROOT / ".oracle" / "bin" / "python"
