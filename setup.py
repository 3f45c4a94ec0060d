"""Builds kime's Cython kernels; all other metadata lives in pyproject.toml.

No OpenMP: the C kernels run on kime's own pthreads pool (`csrc/pool.c`), whose thread count
comes from the caller (kime.cpus) alone, so every build with POSIX threads (GCC, clang, Apple
clang, a cross compiler) runs multi-threaded, and no wheel carries an OpenMP runtime. The build
compiles and links with `-pthread`; MSVC builds run the pool's steps on the calling thread.

The hand-written C kernels in `kime/_cpu/csrc/` are compiled once into one static library that
every extension links (so each .so stays self-contained, as auditwheel wants), and the C files,
then the extensions, compile in parallel: one job per CPU unless `build_ext -j N` says otherwise.

Environment:
  KIME_DEBUG=1      turn Cython's boundscheck, wraparound and initializedcheck on.
  KIME_BUILD_JOBS=N compile with N jobs (default: the CPU count; `pip install .` passes no -j).
  KIME_LIMITED_API=0 build for this CPython only, not the stable ABI (default on 3.11+: abi3).

On CPython 3.11 and newer every extension is built against the stable ABI (PEP 384), so one
`cp311-abi3` wheel serves 3.11 and every later release; the C kernels are the same either way,
only Cython's glue calls the Limited API. 3.11 is the floor because typed memoryviews need the
buffer protocol, which entered the Limited API in 3.11: on 3.10 the build is version-specific.
Free-threaded CPython (3.13t, 3.14t) cannot load abi3 extensions and kime's kernels are not
checked for it: the build refuses it, naming the interpreter to use instead.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from glob import glob
from pathlib import Path

import numpy as np
from Cython.Build import cythonize
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

DEBUG = os.environ.get("KIME_DEBUG") == "1"

# The stable ABI's floor (see the module docstring) and the NumPy C API the extensions target,
# which is pyproject's runtime floor: a wheel built against NumPy 2 then loads on 1.23 too.
LIMITED_API_FLOOR = (3, 11)
NUMPY_TARGET = "NPY_1_23_API_VERSION"


def free_threaded() -> bool:
    """Whether this interpreter is a free-threaded (no-GIL) build."""
    return bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def limited_api(version: tuple[int, ...] = tuple(sys.version_info[:2]),
                env: dict[str, str] | None = None) -> bool:
    """Whether to build against the stable ABI: on CPython >= 3.11 unless KIME_LIMITED_API=0."""
    value = (os.environ if env is None else env).get("KIME_LIMITED_API", "")
    if value not in ("", "0", "1"):
        raise SystemExit(f"KIME_LIMITED_API is 0 or 1, not {value!r}")
    possible = sys.implementation.name == "cpython" and tuple(version) >= LIMITED_API_FLOOR
    if value == "1" and not possible:
        floor = ".".join(map(str, LIMITED_API_FLOOR))
        raise SystemExit(f"KIME_LIMITED_API=1 needs CPython {floor} or newer (typed memoryviews "
                         "need the buffer protocol in the Limited API)")
    return possible and value != "0"


def limited_api_macro(version: tuple[int, ...] = LIMITED_API_FLOOR) -> str:
    """Py_LIMITED_API's value for `version`: 0x030B0000 for 3.11."""
    return "0x%02X%02X0000" % (version[0], version[1])


LIMITED_API = False if free_threaded() else limited_api()

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


CSRC = sorted(glob("kime/_cpu/csrc/*.c"))
HEADERS = sorted(glob("kime/_cpu/csrc/*.h"))
CSRC_LIB = "kimecsrc"


def source_digest() -> str:
    """A digest of every C and Cython source the extensions compile, built into `_forward` as
    KIME_SOURCE_DIGEST. The packed-weight cache is keyed on it (kime/_cpu/weights.py): the
    packers live in these files, so weights packed by other code are never mapped, whether or
    not anyone remembered to bump a version."""
    digest = hashlib.sha256()
    for path in sorted(CSRC + HEADERS + glob("kime/_cpu/*.pyx") + glob("kime/_cpu/*.pxd")):
        digest.update(Path(path).as_posix().encode() + b"\0" + Path(path).read_bytes())
    return digest.hexdigest()[:16]

# Flags for one C file: "*" on every machine, else `sysconfig.get_platform()`'s last part (x86_64,
# aarch64, ...), for GCC and clang (MSVC never contracts across statements under /fp:precise).
# Every ISA-specific function carries its own target attribute, so the whole library is compiled
# for the generic baseline and dispatches at run time; these flags only pin what GCC would
# otherwise decide by its defaults (tests/toolchain.py compiles the C harnesses from this table).
# - Contraction (a * b + c into one FMA): off where plain C must round as the x86-64 baseline
#   does (attention.c: RoPE, softmax, the NEON/C tiles' scaling; forward.c: the norms, the
#   embedding sum, the scorer), since aarch64's baseline and the AVX-512 norm have FMA; on
#   everywhere else (GCC's own default for C, written out so that clang matches it).
# - qgemm_neon.c: no pre-allocation scheduling (see that file); attention.c likewise, for its
#   NEON tile (its k-loop keeps its 24 accumulators in registers). Instruction order only.
CONTRACT_OFF = ["-ffp-contract=off"]
CSRC_FLAGS: dict[str, dict[str, list[str]]] = {
    "attention.c": {"*": CONTRACT_OFF, "aarch64": ["-fno-schedule-insns"]},
    "forward.c": {"*": CONTRACT_OFF},
    "qgemm_neon.c": {"*": ["-ffp-contract=fast"], "aarch64": ["-fno-schedule-insns"]},
}
CSRC_DEFAULT_FLAGS = ["-ffp-contract=fast"]


def csrc_flags(name: str, machine: str) -> list[str]:
    """The extra flags `csrc/name` is compiled with on `machine` (GCC and clang)."""
    table = CSRC_FLAGS.get(name, {"*": CSRC_DEFAULT_FLAGS})
    return table.get("*", []) + table.get(machine, [])


def jobs() -> int:
    """The parallel jobs to compile with: KIME_BUILD_JOBS, else one per CPU this process may use."""
    value = os.environ.get("KIME_BUILD_JOBS", "")
    if value:
        if not value.isascii() or not value.isdigit() or int(value) < 1:
            raise SystemExit(f"KIME_BUILD_JOBS must be a positive integer, not {value!r}")
        return int(value)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS, Windows
        return max(1, os.cpu_count() or 1)


class BuildExt(build_ext):
    """Adds optimisation and POSIX threads to every extension; compiles the C kernels once into a
    static library the extensions link; builds in parallel."""

    def finalize_options(self) -> None:
        super().finalize_options()
        if not self.parallel:  # `pip install .` and plain `build_ext` give no -j
            self.parallel = jobs()

    def build_extensions(self) -> None:
        msvc = self.compiler.compiler_type == "msvc"
        # -pthread at the link names libpthread where glibc < 2.34 keeps pthread_create, so the
        # extensions' threads never rest on the interpreter having loaded it.
        compile_args = ["/O2"] if msvc else ["-O3", "-pthread"]
        link_args: list[str] = [] if msvc else ["-pthread"]
        stamp = self.flags_stamp("kime-build-flags.txt", compile_args + link_args)
        library = self.build_csrc(compile_args, stamp)
        # The C kernels do not depend on the Python ABI; only the extensions rebuild on a switch.
        abi = self.flags_stamp("kime-ext-flags.txt", compile_args + link_args,
                               f"limited_api={LIMITED_API}")
        for ext in self.extensions:
            ext.extra_compile_args = compile_args + list(ext.extra_compile_args or [])
            ext.extra_link_args = link_args + list(ext.extra_link_args or [])
            ext.extra_objects = list(ext.extra_objects or []) + [library]
            ext.depends = list(ext.depends or []) + [stamp, abi, library]
        super().build_extensions()

    def run(self) -> None:
        super().run()
        if self.inplace or getattr(self, "editable_mode", False):
            self.remove_shadowing()

    def remove_shadowing(self) -> None:
        """Deletes in-place extension files of the other build mode that this interpreter would
        import first: `.cpython-311-*.so` shadows `.abi3.so`, so a switch to the stable ABI would
        otherwise keep loading the old build."""
        from importlib.machinery import EXTENSION_SUFFIXES

        for ext in self.extensions:
            built = Path(self.get_ext_filename(ext.name))  # in the source tree, from its root
            stem = ext.name.rsplit(".", 1)[-1]
            for suffix in EXTENSION_SUFFIXES:
                other = built.with_name(stem + suffix)
                if other != built and other.is_file():
                    print(f"kime: removing {other} (it would shadow {built.name})", file=sys.stderr)
                    other.unlink()

    def build_csrc(self, compile_args: list[str], stamp: str) -> str:
        """Compiles each `csrc/*.c` whose object is older than it, a header or the flags, in
        parallel, and archives them; returns the static library's path."""
        out = Path(self.build_temp) / "csrc"
        machine = sysconfig.get_platform().rsplit("-", 1)[-1]
        obj_ext = self.compiler.obj_extension or ".o"
        msvc = self.compiler.compiler_type == "msvc"
        stale: list[tuple[str, list[str]]] = []
        objects: list[str] = []
        for source in CSRC:
            obj = out / (Path(source).stem + obj_ext)
            objects.append(str(obj))
            inputs = [source, stamp] + HEADERS
            if self.force or not obj.is_file() or any(
                Path(i).stat().st_mtime > obj.stat().st_mtime for i in inputs
            ):
                extra = [] if msvc else csrc_flags(Path(source).name, machine)
                stale.append((source, compile_args + extra))
        library = self.compiler.library_filename(CSRC_LIB, output_dir=str(out))
        if not stale and Path(library).is_file():
            return library

        def compile_one(item: tuple[str, list[str]]) -> list[str]:
            source, args = item
            # output_dir + a source path keeps the path under it; strip_dir keeps one folder.
            return self.compiler.compile(
                [source], output_dir=str(out), include_dirs=["kime/_cpu/csrc"],
                extra_postargs=args, debug=self.debug,
            )

        out.mkdir(parents=True, exist_ok=True)
        workers = min(len(stale), self.parallel if isinstance(self.parallel, int) else jobs())
        with ThreadPoolExecutor(max(1, workers)) as pool:
            built = [obj for objs in pool.map(compile_one, stale) for obj in objs]
        # compile() writes out/kime/_cpu/csrc/x.o; move each to out/x.o where the check looks.
        for obj in built:
            target = out / Path(obj).name
            if Path(obj) != target:
                os.replace(obj, target)
        Path(library).unlink(missing_ok=True)
        self.compiler.create_static_lib(objects, CSRC_LIB, output_dir=str(out))
        return library

    def flags_stamp(self, name: str, flags: list[str], extra: str = "") -> str:
        """A file rewritten only when the flags or directives change, listed as a dependency.

        build_ext skips an extension whose library is newer than its sources, so without this
        switching KIME_DEBUG or KIME_LIMITED_API, or editing CSRC_FLAGS, would keep the old
        library.
        """
        stamp = Path(self.build_temp) / name
        text = f"{flags}\n{sorted(DIRECTIVES.items())}\n{sorted(CSRC_FLAGS.items())}\n{extra}\n"
        if not stamp.is_file() or stamp.read_text() != text:
            stamp.parent.mkdir(parents=True, exist_ok=True)
            stamp.write_text(text)
        return str(stamp)


def extensions() -> list[Extension]:
    """One extension per `kime/_cpu/*.pyx`, named after its path. Each links the static library
    of the hand-written C kernels in `kime/_cpu/csrc/` (an extension is loaded with local symbols,
    so the copies never meet); the C is compiled for a generic x86-64 or aarch64 and picks the
    AVX2/AVX-512 or NEON/dotprod/i8mm/bf16 code at run time."""
    sources = sorted(glob("kime/_cpu/*.pyx"))
    macros = [("NPY_NO_DEPRECATED_API", "NPY_1_7_API_VERSION"),
              ("NPY_TARGET_VERSION", NUMPY_TARGET),
              ("KIME_SOURCE_DIGEST", '"%s"' % source_digest())]
    if LIMITED_API:
        macros.append(("Py_LIMITED_API", limited_api_macro()))
    return [
        Extension(
            Path(source).with_suffix("").as_posix().replace("/", "."),
            [source],
            depends=HEADERS + CSRC,
            include_dirs=[np.get_include(), "kime/_cpu/csrc"],
            define_macros=macros,
            py_limited_api=LIMITED_API,
        )
        for source in sources
    ]


def cython_jobs() -> int:
    """Cython's worker processes: parallel only where multiprocessing forks, since a spawned or
    forkserver worker would import this script again and run setup() in itself."""
    if sys.platform != "linux" or multiprocessing.get_start_method() != "fork":
        return 0
    return jobs() if jobs() > 1 else 0


# Generated C goes under build/, one folder per directive set, so switching KIME_DEBUG regenerates
# it instead of reusing C made with the other checks. setuptools' build backend runs this file as
# __main__ too; the guard lets tests import the helpers above without building.
if __name__ == "__main__":
    if free_threaded():
        raise SystemExit(
            f"kime: free-threaded CPython ({sys.version.split()[0]}, no GIL) is not supported: its "
            "kernels are not checked for it and it cannot load the cp311-abi3 wheel. Use the "
            f"standard build of Python {sys.version_info[0]}.{sys.version_info[1]} (python3 "
            "rather than python3t), which installs kime's binary wheel.")
    setup(
        ext_modules=cythonize(
            extensions(),
            compiler_directives=DIRECTIVES,
            nthreads=cython_jobs(),
            build_dir=str(Path("build") / ("cython-debug" if DEBUG else "cython")),
        ),
        cmdclass={"build_ext": BuildExt},
        # the wheel's tag: cp311-abi3 for a stable-ABI build, else this interpreter's own
        options={"bdist_wheel": {"py_limited_api": "cp%d%d" % LIMITED_API_FLOOR}}
        if LIMITED_API else {},
    )
