"""Builds kime's Cython kernels; all other metadata lives in pyproject.toml.

OpenMP is optional: the kernels parallelise over rows with `prange`, and without OpenMP the same
code runs on one thread with the same results. Whether the compiler supports it is probed with the
very compiler setuptools is about to use, because a flag that works for `cc` on PATH may not work
for the one distutils picked (Apple clang, MSVC, a cross compiler).

Environment:
  KIME_NO_OPENMP=1  build without OpenMP even when the compiler has it (tests use this path).
  KIME_DEBUG=1      turn Cython's boundscheck, wraparound and initializedcheck on.
"""
from __future__ import annotations

import os
import sys
import tempfile
from glob import glob
from pathlib import Path
from typing import Any

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("KIME_DEBUG") == "1"
NO_OPENMP = os.environ.get("KIME_NO_OPENMP") == "1"

OPENMP_TEST = """
#include <omp.h>
int main(void) { return omp_get_max_threads() > 0 ? 0 : 1; }
"""

if DEBUG:
    DIRECTIVES = {
        "language_level": 3,
        "boundscheck": True,
        "wraparound": True,
        "initializedcheck": True,
        "cdivision": True,
    }
else:
    DIRECTIVES = {
        "language_level": 3,
        "boundscheck": False,
        "wraparound": False,
        "initializedcheck": False,
        "cdivision": True,
    }


def openmp_flags(compiler: Any) -> list[str] | None:
    """The OpenMP flags `compiler` accepts for a compile and a link, or None when it has none."""
    flag = "/openmp" if compiler.compiler_type == "msvc" else "-fopenmp"
    with tempfile.TemporaryDirectory(prefix="kime-openmp-") as tmp:
        source = os.path.join(tmp, "probe.c")
        with open(source, "w") as handle:
            handle.write(OPENMP_TEST)
        try:
            objects = compiler.compile([source], output_dir=tmp, extra_postargs=[flag])
            link_args = [] if compiler.compiler_type == "msvc" else [flag]
            compiler.link_executable(objects, "probe", output_dir=tmp, extra_postargs=link_args)
        except Exception:  # CompileError, LinkError, or a missing toolchain piece
            return None
    return [flag]


class BuildExt(build_ext):
    """Adds optimisation and, where the compiler has it, OpenMP to every extension."""

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        compile_args = ["/O2"] if msvc else ["-O3"]
        link_args: list[str] = []
        flags = None if NO_OPENMP else openmp_flags(self.compiler)
        if flags is None:
            reason = "KIME_NO_OPENMP=1" if NO_OPENMP else "the compiler has no OpenMP"
            print(f"kime: {reason}; building single-threaded kernels", file=sys.stderr)
        else:
            compile_args += flags
            link_args += [] if msvc else flags
        stamp = self.flags_stamp(compile_args + link_args)
        for ext in self.extensions:
            ext.extra_compile_args = compile_args + list(ext.extra_compile_args or [])
            ext.extra_link_args = link_args + list(ext.extra_link_args or [])
            ext.depends = list(ext.depends or []) + [stamp]
        super().build_extensions()

    def flags_stamp(self, flags: list[str]) -> str:
        """A file rewritten only when the flags or directives change, listed as a dependency.

        build_ext skips an extension whose library is newer than its sources, so without this
        switching KIME_NO_OPENMP or KIME_DEBUG would keep the old library.
        """
        stamp = Path(self.build_temp) / "kime-build-flags.txt"
        text = f"{flags}\n{sorted(DIRECTIVES.items())}\n"
        if not stamp.is_file() or stamp.read_text() != text:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(text)
        return str(stamp)


def extensions() -> list[Extension]:
    """One extension per `kime/_cpu/*.pyx`, named after its path. Each links the hand-written C
    kernels in `kime/_cpu/csrc/` (an extension is loaded with local symbols, so the copies never
    meet); the C is compiled for a generic x86-64 and picks AVX2 or AVX-512 code at run time."""
    sources = sorted(glob("kime/_cpu/*.pyx"))
    csrc = sorted(glob("kime/_cpu/csrc/*.c"))
    headers = sorted(glob("kime/_cpu/csrc/*.h"))
    return [
        Extension(
            Path(source).with_suffix("").as_posix().replace("/", "."),
            [source] + csrc,
            depends=headers + csrc,
            include_dirs=[np.get_include(), "kime/_cpu/csrc"],
            define_macros=[("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION")],
        )
        for source in sources
    ]


# Generated C goes under build/, one folder per directive set, so switching KIME_DEBUG regenerates
# it instead of reusing C made with the other checks.
setup(
    ext_modules=cythonize(
        extensions(),
        compiler_directives=DIRECTIVES,
        build_dir=str(Path("build") / ("cython-debug" if DEBUG else "cython")),
    ),
    cmdclass={"build_ext": BuildExt},
)
