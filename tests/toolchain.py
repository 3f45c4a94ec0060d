"""A compiler or emulator that is on PATH *and works*: tools/test_wheel.sh puts stubs that exit
127 in front of every compiler name to prove the wheel needs none, so `shutil.which` alone would
send the tests that build C (the aarch64 harnesses, the nvcc check) into those stubs. And the
C harnesses' build: each kernel source with the flags setup.py gives it."""
from __future__ import annotations

import ast
import shlex
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence


def working(name: str) -> Optional[str]:
    """The path of `name` when it runs (`name --version` exits 0), else None."""
    path = shutil.which(name)
    if path is None:
        return None
    try:
        done = subprocess.run([path, "--version"], capture_output=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return path if done.returncode == 0 else None


SETUP = Path(__file__).resolve().parents[1] / "setup.py"
CSRC = SETUP.parent / "kime" / "_cpu" / "csrc"
_TABLE = ("CONTRACT_OFF", "CSRC_FLAGS", "CSRC_DEFAULT_FLAGS", "csrc_flags")


@lru_cache(maxsize=None)
def _setup_table() -> Callable[[str, str], List[str]]:
    """setup.py's per-file flags (CSRC_FLAGS and csrc_flags), read from its source: running
    setup.py would build, and the table must be the one the wheel was built with."""
    tree = ast.parse(SETUP.read_text(), str(SETUP))
    keep = [node for node in tree.body
            if (isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
                isinstance(t, ast.Name) and t.id in _TABLE
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])))
            or (isinstance(node, ast.FunctionDef) and node.name in _TABLE)]
    namespace: Dict[str, Any] = {}
    exec(compile(ast.Module(body=keep, type_ignores=[]), str(SETUP), "exec"), namespace)
    return namespace["csrc_flags"]  # type: ignore[no-any-return]


def csrc_flags(name: str, machine: str) -> List[str]:
    """The extra flags setup.py compiles `kime/_cpu/csrc/name` with on `machine`."""
    return list(_setup_table()(name, machine))


def build_program(compiler: str, machine: str, harness: Path, sources: Sequence[str],
                  out: Path, static: bool = False,
                  link_flags: Sequence[str] = ()) -> "subprocess.Popen[bytes]":
    """Starts compiling a C test harness with the kernel `sources` (csrc file names), each with
    its own flags from setup.py as the extension build gives them, then linking `out`; -O3 and
    -pthread as setup.py's (no OpenMP: the pool is pthreads). The returned process's output is
    the compilers' log."""
    objects = out.parent / (out.name + ".objects")
    objects.mkdir(parents=True, exist_ok=True)
    base = [compiler, "-O3", "-pthread", "-Wall", "-I", str(CSRC)]
    steps = [base + ["-c", str(harness), "-o", str(objects / "harness.o")]]
    for name in sources:
        steps.append(base + csrc_flags(name, machine)
                     + ["-c", str(CSRC / name), "-o", str(objects / (name + ".o"))])
    link = [compiler, "-pthread", *(step[-1] for step in steps), "-lm", "-o", str(out)]
    link += (["-static"] if static else []) + list(link_flags)
    script = " && ".join(shlex.join(step) for step in steps + [link])
    return subprocess.Popen(["sh", "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
