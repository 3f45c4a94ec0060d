"""The layout's rules, checked on the source: data moves one way, so no module under `kime/`
imports in a circle (lazy imports inside functions count: they are circles too, only later);
the engine core knows nothing of Laya's surface or the server; the compiled backends import
only the contract they implement; and no test or CLI code reaches into a private attribute of
an engine or a backend.
"""
from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Dict, List, Set

import pytest

import kime

from ..paths import TESTS

ROOT = Path(kime.__file__).resolve().parent

CORE = ("kime.engine", "kime.executor", "kime.scheduler", "kime.backend", "kime.factory",
        "kime.answers", "kime.calibration", "kime.request", "kime.layout", "kime.render",
        "kime.split", "kime.buckets", "kime.batch", "kime.graph", "kime.checkpoint", "kime.hub",
        "kime.tokenizer", "kime.cache", "kime.errors")
BACKEND_MAY_IMPORT = {"kime.backend", "kime.graph", "kime.batch", "kime.buckets",
                      "kime.checkpoint", "kime.errors", "kime._version", "kime.layout"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> Dict[str, Path]:
    return {_module_name(p): p for p in ROOT.rglob("*.py")}


def _imports(name: str, path: Path, known: Set[str]) -> Set[str]:
    """Every kime module `name` imports, anywhere in the file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: Set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: List[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # `from . import hub` imports the module kime.hub; `from .x import y` imports kime.x.
            subs = ["%s.%s" % (stem, a.name) for a in node.names]
            targets = [t for t in subs if t in known]
            if len(targets) < len(subs):
                targets.append(stem)
        for t in targets:
            if t in known and t != name:
                out.add(t)
    return out


def _graph() -> Dict[str, Set[str]]:
    mods = _modules()
    known = set(mods)
    return {name: _imports(name, path, known) for name, path in mods.items()}


def test_nothing_under_kime_imports_in_a_circle():
    graph = _graph()
    cycles: List[List[str]] = []
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


def test_the_core_knows_nothing_of_laya_or_the_server():
    graph = _graph()
    leaks = {m: sorted(d for d in graph[m] if d.startswith(("kime.laya", "kime.serve", "kime.cli",
                                                             "kime.precision_gate")))
             for m in CORE if m in graph}
    assert not {m: d for m, d in leaks.items() if d}


def test_backends_import_only_the_contract():
    graph = _graph()
    bad = {}
    for name, deps in graph.items():
        if name.startswith(("kime._cpu", "kime._cuda")):
            outside = sorted(d for d in deps if not d.startswith(("kime._cpu", "kime._cuda"))
                             and d not in BACKEND_MAY_IMPORT)
            if outside:
                bad[name] = outside
    assert not bad


def _private_attributes(*objects: object) -> Set[str]:
    return {k for obj in objects for k in vars(obj) if k.startswith("_") and not k.startswith("__")}


def test_no_test_or_cli_code_reads_a_private_attribute_of_an_engine_or_backend(tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        engine = kime.Kime(str(tiny_path), device="cpu", threads=1)
    engine.decide({"state": "x", "questions": {"q": {"type": "noul", "instructions": "y"}}})
    private = _private_attributes(engine, engine.backend, engine.executor, engine.scheduler,
                                  engine.layouter)
    engine.close()
    assert private, "the engine has private state; this test must see it to mean anything"
    files = sorted(TESTS.rglob("*.py")) + sorted((ROOT / "cli").rglob("*.py"))
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id == "self")):
                found.append("%s:%d .%s" % (path.relative_to(TESTS.parent), node.lineno, node.attr))
    assert not found, found


@pytest.mark.parametrize("module", ["kime", "kime.engine", "kime.laya"])
def test_importing_the_api_imports_no_backend(module):
    """`import kime` must work without a compiler's output or CuPy: backends load on demand."""
    import subprocess
    import sys

    code = ("import sys, %s; bad = [m for m in sys.modules if m.startswith(('kime._cpu', "
            "'kime._cuda', 'cupy'))]; print(bad); sys.exit(1 if bad else 0)" % module)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
