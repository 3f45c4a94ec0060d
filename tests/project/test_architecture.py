"""The layout's rules, checked on the source: data moves one way, so no module under `kime/`
imports in a circle (lazy imports inside functions count: they are circles too, only later),
and neither do its packages and top-level modules taken whole; the engine core knows nothing of
Laya's surface or the server; the compiled backends import only the contract they implement,
and only the factory imports them; no module reads another module's private names; and no test
or CLI code reaches into a private attribute of an engine or a backend.
"""
from __future__ import annotations

import ast
import functools
import warnings
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

import pytest

import kime

from ..paths import TESTS

ROOT = Path(kime.__file__).resolve().parent

CORE = ("kime.engine", "kime.executor", "kime.scheduler", "kime.backend", "kime.factory",
        "kime.answers", "kime.calibration", "kime.request", "kime.layout", "kime.render",
        "kime.split", "kime.buckets", "kime.batch", "kime.graph", "kime.checkpoint", "kime.hub",
        "kime.tokenizer", "kime.cache", "kime.errors", "kime.gpu_check")
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


@functools.lru_cache(maxsize=None)
def _graph() -> Dict[str, Set[str]]:
    """Every module's kime imports, parsed once per session (the tests only read it)."""
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


# --- packages: a loop between two of them is a loop, even when no two modules form one ---------


def _node(module: str) -> str:
    """The package-graph node a module belongs to: `kime.<first part>`, a package with all its
    modules (`kime.jobs`, `kime._cpu`, `kime.cli`, ...) or a top-level module (`kime.ray`,
    `kime.engine`); `kime` itself is kime/__init__.py."""
    return ".".join(module.split(".")[:2])


def _package_edges() -> Dict[Tuple[str, str], List[str]]:
    """(node, node) -> the module imports behind that edge, `a -> b` each."""
    edges: Dict[Tuple[str, str], List[str]] = {}
    for module, deps in _graph().items():
        for dep in sorted(deps):
            if _node(module) != _node(dep):
                edges.setdefault((_node(module), _node(dep)), []).append("%s -> %s" % (module, dep))
    return edges


def _strongly_connected(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Tarjan's components of `graph` with more than one node: each is a set of nodes that
    import one another around some circle."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_two_packages_or_top_level_modules_import_each_other():
    """Collapse every module to its node (`_node`: a package of kime with everything under it, or
    a top-level module on its own) and refuse any circle between nodes, lazy imports inside
    functions and `TYPE_CHECKING` imports included (a circle that only waits for a call, or for
    the type checker, is still a circle in the layering).

    What a package's `__init__` imports is part of that package, so its re-exports add edges
    from it, never into it from its own modules. `kime/__init__.py` is the node `kime`: the
    public face, at the top, which nothing under kime/ imports (`from .. import hub` imports
    the module kime.hub, not kime; `from .. import name` of a name defined in kime/__init__ is
    an edge into `kime`, and so a circle with everything kime re-exports)."""
    edges = _package_edges()
    graph: Dict[str, Set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
    loops = []
    for component in _strongly_connected(graph):
        inside = ["%s (%s)" % (" -> ".join(edge), "; ".join(why[:3]))
                  for edge, why in sorted(edges.items())
                  if edge[0] in component and edge[1] in component]
        loops.append("{%s}: %s" % (", ".join(component), " | ".join(inside)))
    assert not loops, "packages or modules importing each other:\n" + "\n".join(loops)


def test_only_the_factory_imports_a_backend():
    """`kime.factory` opens backends and reports on them; everything else (the engine, the
    server's /health, `kime doctor`) asks it or the backend contract (`kime.backend`), so the
    compiled kernels and CuPy stay behind one door."""
    reach = sorted("%s -> %s" % (module, dep) for module, deps in _graph().items()
                   for dep in deps
                   if _node(dep) in ("kime._cpu", "kime._cuda")
                   and _node(module) not in ("kime._cpu", "kime._cuda", "kime.factory"))
    assert not reach, reach


# --- private names: `_x` belongs to the module (or, for a module, the package) that defines it --

NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
"""Underscored by NamedTuple to keep out of the field names' way, but public API."""


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__") and name not in NAMEDTUPLE_API


def _private_module_problem(importer: str, module: str) -> Optional[str]:
    """Why `importer` may not import `module` (None: it may): a module or package named `_x` is
    private to the package holding it, so only modules inside that package import it."""
    parts = module.split(".")
    for i in range(1, len(parts)):
        owner = ".".join(parts[:i])
        if _private(parts[i]) and not (importer == owner or importer.startswith(owner + ".")):
            return "%s is private to %s" % (".".join(parts[:i + 1]), owner)
    return None


def _annotation_names(node: Optional[ast.AST]) -> Set[str]:
    """Every plain or dotted name an annotation mentions, strings (forward references) included:
    `Optional["Router"]` -> {"Optional", "Router"}; `laya.Agent` -> {"laya.Agent"}."""
    names: Set[str] = set()
    if node is None:
        return names
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            names.add(sub.id)
        elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name):
            names.add("%s.%s" % (sub.value.id, sub.attr))
        elif isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                names |= _annotation_names(ast.parse(sub.value, mode="eval"))
            except SyntaxError:
                pass
    return names


def _private_reads(name: str, path: Path, known: Set[str]) -> List[str]:
    """Each place `name` reads a private name of another kime module (see the test's rule)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = "%s:%%d" % path.relative_to(ROOT.parent)
    found: List[str] = []
    modules: Dict[str, str] = {}  # local name -> the kime module it is bound to
    imported: Set[str] = set()  # local names of other things imported from other kime modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "kime":
                    continue
                why = _private_module_problem(name, a.name)
                if why:
                    found.append("%s import %s: %s" % (where % node.lineno, a.name, why))
                modules[a.asname or "kime"] = a.name if a.asname else "kime"
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            if stem.split(".")[0] != "kime":
                continue
            why = _private_module_problem(name, stem)
            if why:
                found.append("%s from %s import ...: %s" % (where % node.lineno, stem, why))
            for a in node.names:
                full = "%s.%s" % (stem, a.name)
                local = a.asname or a.name
                if full in known:
                    modules[local] = full
                    why = _private_module_problem(name, full)
                    if why:
                        found.append("%s from %s import %s: %s" % (where % node.lineno, stem,
                                                                  a.name, why))
                elif stem != name:
                    imported.add(local)
                    if _private(a.name):
                        found.append("%s from %s import %s" % (where % node.lineno, stem, a.name))

    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in modules and _private(node.attr)):
            full = "%s.%s" % (modules[node.value.id], node.attr)
            why = _private_module_problem(name, full) if full in known else "private to %s" % (
                modules[node.value.id])
            if why:
                found.append("%s %s.%s: %s" % (where % node.lineno, node.value.id, node.attr,
                                               why))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in ("getattr", "setattr", "hasattr") and len(node.args) >= 2
              and isinstance(node.args[0], ast.Name) and node.args[0].id in modules
              and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
              and _private(node.args[1].value)):
            found.append("%s %s(%s, %r)" % (where % node.lineno, node.func.id, node.args[0].id,
                                             node.args[1].value))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args.posonlyargs + node.args.args + node.args.kwonlyargs
            typed = {}
            for arg in args:
                classes = {n for n in _annotation_names(arg.annotation)
                           if n in imported or n.split(".")[0] in modules}
                if classes and arg.arg not in ("self", "cls"):
                    typed[arg.arg] = sorted(classes)[0]
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name)
                        and sub.value.id in typed and _private(sub.attr)):
                    found.append("%s %s._%s on a %s" % (where % sub.lineno, sub.value.id,
                                                        sub.attr[1:], typed[sub.value.id]))
    return found


def test_no_module_reads_another_modules_private_names():
    """A name that starts with one underscore belongs to the module that defines it, and a
    module or package named `_x` to the package that holds it (so `kime._cpu` is for kime's
    modules, `kime._cpu._gemm` only for `kime._cpu`'s). Checked in every module under kime/:

    - `from M import _x` where `_x` is not a module of M, and `M._x` or `getattr(M, "_x")`
      where M is a name this module bound to a kime module;
    - importing a private module or package from outside the package that holds it;
    - `p._x` where `p` is a parameter annotated with a class (or anything else) imported from
      another kime module: `def f(router: Router): router._engines`.

    Not seen: private reads through `self.attr._x`, locals or parameters typed `Any` (what the
    type checker cannot see, this test cannot either). Dunders and NamedTuple's `_replace`,
    `_asdict`, `_fields`, `_make` are public."""
    mods = _modules()
    # kime._cpu._gemm, ...: from the sources in a checkout, from the built modules in a wheel
    compiled = ({_module_name(p) for p in ROOT.rglob("*.pyx")}
                | {_module_name(p.with_name(p.name.split(".")[0] + ".py"))
                   for suffix in EXTENSION_SUFFIXES for p in ROOT.rglob("*" + suffix)})
    assert compiled, "no compiled modules found: the rule on private modules would see none"
    known = set(mods) | compiled
    found = [line for name, path in sorted(mods.items())
             for line in _private_reads(name, path, known)]
    assert not found, "private names read from another module:\n" + "\n".join(found)
