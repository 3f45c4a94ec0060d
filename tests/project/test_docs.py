"""The docs stay true to the code, so a newcomer's first reading is not a stale one.

- `docs/architecture.md`'s module map names every module and package under `kime/`, and
  nothing that is not there. The map is the tables under its `## Module map` heading: a row
  whose first cell is a dotted module path in backticks (`| `kime.engine` | what it owns |`)
  names that module; a package is named by its dotted path (its `__init__.py`).
- Every relative link in README.md and docs/*.md reaches a file (and, with `#anchor`, a heading
  of that file), and the README links every page of docs/.
- The README stays short: at most 220 lines.

These read the source checkout; an installed-wheel run (tools/test_wheel.sh copies tests/ alone)
has no docs to check and skips.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

from ..paths import ROOT

DOCS = ROOT / "docs"
README = ROOT / "README.md"
MAP = DOCS / "architecture.md"
README_MAX_LINES = 220

MAP_ROW = re.compile(r"^\|\s*`(kime(?:\.\w+)*)`\s*\|")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)
INLINE_CODE = re.compile(r"`[^`\n]*`")

pytestmark = pytest.mark.skipif(not (MAP.is_file() and (ROOT / "kime").is_dir()),
                                reason="not a source checkout: no docs/ or kime/ beside tests/")


def code_modules() -> Set[str]:
    """Every module and package under kime/, dotted: `kime/laya/__init__.py` is `kime.laya`."""
    out: Set[str] = set()
    for path in (ROOT / "kime").rglob("*.py"):
        if "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.add(".".join(parts))
    return out


def section(text: str, heading: str) -> str:
    """The text under `## heading`, up to the next `## ` heading."""
    match = re.search(r"^## %s\s*$(.*?)(?=^## |\Z)" % re.escape(heading), text, re.S | re.M)
    if match is None:
        raise AssertionError("docs/architecture.md has no '## %s' section" % heading)
    return match.group(1)


def map_modules(text: str) -> List[str]:
    """The dotted paths the module map's rows name, in order (duplicates kept)."""
    body = FENCE.sub("", section(text, "Module map"))
    return [m.group(1) for m in map(MAP_ROW.match, body.splitlines()) if m]


def test_the_map_parser_reads_rows_and_nothing_else():
    text = ("# A\n\n## Module map\n\n| module | owns |\n|---|---|\n| `kime.engine` | the engine |\n"
            "| `kime` | the package |\n| kime.not_code | no backticks |\n"
            "```\n| `kime.in_a_fence` | x |\n```\n\n## Data flow\n\n| `kime.after` | x |\n")
    assert map_modules(text) == ["kime.engine", "kime"]


def test_the_module_map_names_every_module_under_kime_and_only_those():
    named = map_modules(MAP.read_text(encoding="utf-8"))
    twice = sorted({m for m in named if named.count(m) > 1})
    code = code_modules()
    missing = sorted(code - set(named))
    stale = sorted(set(named) - code)
    assert not (missing or stale or twice), (
        "docs/architecture.md's module map is out of date:\n"
        "  in kime/ but not in the map: %s\n  in the map but not in kime/: %s\n"
        "  named twice: %s" % (missing or "-", stale or "-", twice or "-"))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> Set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)}


def links_in(text: str) -> List[Tuple[int, str]]:
    """(line, target) of every link outside code, fenced or inline."""
    text = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
    out: List[Tuple[int, str]] = []
    for number, line in enumerate(text.splitlines(), 1):
        for m in LINK.finditer(INLINE_CODE.sub("", line)):
            out.append((number, m.group(1) or m.group(2)))
    return out


def links(path: Path) -> List[Tuple[int, str]]:
    return links_in(path.read_text(encoding="utf-8"))


def pages() -> List[Path]:
    return [README] + sorted(DOCS.glob("*.md"))


def test_the_link_reader_skips_code_and_reads_titles_and_images():
    text = ("see [a](docs/a.md) and `[b](no.md)`\n```\n[c](no.md)\n```\n"
            "[d](x.md \"title\") ![e](img.png)\n")
    assert links_in(text) == [(1, "docs/a.md"), (5, "x.md"), (5, "img.png")]


def test_every_relative_link_in_the_readme_and_docs_reaches_a_file_and_heading():
    broken: List[str] = []
    cache: Dict[Path, Set[str]] = {}
    for page in pages():
        for number, target in links(page):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto: ...
                continue
            file_part, _, anchor = target.partition("#")
            dest = (page.parent / file_part).resolve() if file_part else page
            where = "%s:%d: %s" % (page.relative_to(ROOT), number, target)
            if not dest.exists():
                broken.append(where + " (no such file)")
            elif anchor and dest.suffix == ".md":
                if anchor not in cache.setdefault(dest, anchors(dest)):
                    broken.append(where + " (no such heading)")
    assert not broken, "broken links:\n  " + "\n  ".join(broken)


def test_the_readme_links_every_docs_page():
    linked = {(README.parent / t.partition("#")[0]).resolve() for _, t in links(README)}
    unlinked = [p.name for p in sorted(DOCS.glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, "README.md does not link docs/%s" % ", docs/".join(unlinked)


def test_the_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, "README.md is %d lines; keep it to %d and move the rest to " \
        "docs/" % (n, README_MAX_LINES)


def test_the_readme_keeps_the_test_command_ci_runs():
    """`.ci/run` runs the README's test command; the two must not drift apart."""
    command = "python -m pytest -q"
    assert command in README.read_text(encoding="utf-8")
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
