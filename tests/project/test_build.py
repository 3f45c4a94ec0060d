"""setup.py builds the C kernels once and in parallel (issue 25): each extension holds only its
Cython module and links one static library of `kime/_cpu/csrc/*.c`; the job count comes from
KIME_BUILD_JOBS or the CPUs. The build has no OpenMP and still runs multi-threaded (issue 54).
Skipped outside a source checkout (the wheel run)."""
from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ..paths import ROOT as SOURCE


@pytest.fixture(scope="module")
def setup_py() -> ModuleType:
    path = SOURCE / "setup.py"
    if not path.is_file() or not (SOURCE / "kime/_cpu/csrc").is_dir():
        pytest.skip("not a source checkout (the suite runs against an installed wheel)")
    pytest.importorskip("Cython")
    spec = importlib.util.spec_from_file_location("kime_setup_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    cwd = os.getcwd()
    os.chdir(SOURCE)  # its globs are relative, as under pip
    try:
        spec.loader.exec_module(module)  # not __main__: defines the helpers, builds nothing
    finally:
        os.chdir(cwd)
    return module


def test_extensions_hold_only_their_cython_module(setup_py):
    cwd = os.getcwd()
    os.chdir(SOURCE)
    try:
        exts = setup_py.extensions()
    finally:
        os.chdir(cwd)
    pyx = sorted(p.stem for p in (SOURCE / "kime/_cpu").glob("*.pyx"))
    assert [e.name.rsplit(".", 1)[1] for e in exts] == pyx
    for ext in exts:
        assert len(ext.sources) == 1 and ext.sources[0].endswith(".pyx"), ext.sources
        # ...and a change to any C file or header still rebuilds it.
        assert set(setup_py.CSRC) <= set(ext.depends)
    assert sorted(Path(c).name for c in setup_py.CSRC) == sorted(
        p.name for p in (SOURCE / "kime/_cpu/csrc").glob("*.c"))
    for name in setup_py.CSRC_FLAGS:
        assert (SOURCE / "kime/_cpu/csrc" / name).is_file(), name


def test_every_c_file_pins_its_contraction(setup_py):
    """No kernel's bits rest on GCC's default -ffp-contract or on an optimize attribute: each
    file is given its contraction on every machine, and the harnesses read the same table."""
    from tests.toolchain import csrc_flags

    for source in setup_py.CSRC:
        name = Path(source).name
        for machine in ("x86_64", "aarch64"):
            flags = setup_py.csrc_flags(name, machine)
            assert [f for f in flags if f.startswith("-ffp-contract=")] in (
                ["-ffp-contract=off"], ["-ffp-contract=fast"]), (name, machine, flags)
            assert csrc_flags(name, machine) == flags
    for source in setup_py.CSRC + setup_py.HEADERS:
        text = Path(source).read_text()
        assert "optimize(" not in text and "pragma GCC optimize" not in text, source


def test_stable_abi_from_3_11_unless_switched_off(setup_py):
    """abi3 on CPython 3.11+ (typed memoryviews need 3.11's buffer API), version-specific on 3.10
    or with KIME_LIMITED_API=0; a request the interpreter cannot meet is refused by name."""
    assert [setup_py.limited_api(v, {}) for v in ((3, 10), (3, 11), (3, 13), (3, 14))] == [
        False, True, True, True]
    assert not setup_py.limited_api((3, 12), {"KIME_LIMITED_API": "0"})
    assert setup_py.limited_api((3, 12), {"KIME_LIMITED_API": "1"})
    with pytest.raises(SystemExit, match="KIME_LIMITED_API=1 needs CPython 3.11"):
        setup_py.limited_api((3, 10), {"KIME_LIMITED_API": "1"})
    with pytest.raises(SystemExit, match="KIME_LIMITED_API is 0 or 1, not 'yes'"):
        setup_py.limited_api((3, 12), {"KIME_LIMITED_API": "yes"})
    # the macro is the floor's hex version, as Python.h compares it with PY_VERSION_HEX
    assert int(setup_py.limited_api_macro((3, 11)), 16) == (3 << 24) | (11 << 16)
    macros = dict(m for ext in _in_source(setup_py.extensions) for m in ext.define_macros)
    assert ("Py_LIMITED_API" in macros) == setup_py.LIMITED_API
    assert macros["NPY_TARGET_VERSION"] == "NPY_1_23_API_VERSION"


def test_this_build_is_the_stable_abi_on_3_11_and_later():
    """The extensions this checkout imports are the mode setup.py picks for this interpreter."""
    from kime._cpu import _forward

    where = Path(_forward.__file__ or "")
    if SOURCE not in where.resolve().parents:
        pytest.skip("kime is not imported from this checkout")
    abi3 = sys.version_info >= (3, 11) and os.environ.get("KIME_LIMITED_API") != "0"
    assert where.name.endswith(".abi3.so") == abi3, where.name


def test_free_threaded_python_is_refused_with_a_message():
    """setup.py under a free-threaded interpreter (simulated: no such build is on these machines)
    stops before building, naming what to use instead."""
    probe = ("import runpy, sys, sysconfig\n"
             "real = sysconfig.get_config_var\n"
             "sysconfig.get_config_var = lambda n: 1 if n == 'Py_GIL_DISABLED' else real(n)\n"
             "sys.argv = ['setup.py', '--name']\n"
             "runpy.run_path('setup.py', run_name='__main__')\n")
    if not (SOURCE / "setup.py").is_file():
        pytest.skip("not a source checkout")
    pytest.importorskip("Cython")
    done = subprocess.run([sys.executable, "-c", probe], cwd=SOURCE, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode != 0
    assert "free-threaded CPython" in done.stderr and "standard build of Python" in done.stderr, (
        done.stderr[-2000:])


def _in_source(call):
    cwd = os.getcwd()
    os.chdir(SOURCE)
    try:
        return call()
    finally:
        os.chdir(cwd)


def test_jobs_follow_kime_build_jobs(setup_py, monkeypatch):
    monkeypatch.setenv("KIME_BUILD_JOBS", "3")
    assert setup_py.jobs() == 3
    monkeypatch.delenv("KIME_BUILD_JOBS")
    assert setup_py.jobs() == len(os.sched_getaffinity(0))


@given(st.text(min_size=1, max_size=6).filter(
    lambda s: not (s.isascii() and s.isdigit() and int(s) >= 1)))
def test_bad_kime_build_jobs_is_refused_by_name(setup_py, value):
    if "\x00" in value:
        return  # an environment value cannot hold NUL
    old = os.environ.get("KIME_BUILD_JOBS")
    os.environ["KIME_BUILD_JOBS"] = value
    try:
        with pytest.raises(SystemExit, match="KIME_BUILD_JOBS must be a positive integer"):
            setup_py.jobs()
    finally:
        if old is None:
            del os.environ["KIME_BUILD_JOBS"]
        else:
            os.environ["KIME_BUILD_JOBS"] = old


# The pool's probe on two threads, until the worker has run a task (the caller may take every
# task of a step before its worker wakes): prints whether the build is threaded and who ran tasks.
THREADS_PROBE = """
import numpy as np
from kime._cpu import _forward
print("threaded" if _forward.pool_threaded() else "one-thread")
tids = np.full(64, -1, np.int32)
for _ in range(50):
    tids[:] = -1
    _forward.pool_probe(np.full(64, 200, np.int32), tids, 2)
    if 1 in tids:
        break
print(",".join(map(str, sorted(set(tids.tolist())))))
"""


def _needed(path: Path) -> list[str]:
    """The shared libraries an ELF file names (DT_NEEDED)."""
    from elftools.elf.dynamic import DynamicSection  # pyelftools: auditwheel's, in kime[dev]
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        return [tag.needed for section in ELFFile(f).iter_sections()
                if isinstance(section, DynamicSection)
                for tag in section.iter_tags() if tag.entry.d_tag == "DT_NEEDED"]


@pytest.mark.slow
@pytest.mark.timeout(1800)  # four builds of a copy: minutes on a loaded 2-core machine
def test_build_compiles_each_c_file_once(tmp_path):
    """A real build of a copy: each csrc/*.c is compiled exactly once, into the static library,
    and a second build compiles nothing."""
    if not (SOURCE / "setup.py").is_file() or shutil.which("cc") is None:
        pytest.skip("needs a source checkout and a C compiler")
    pytest.importorskip("Cython")
    copy = tmp_path / "src"
    for part in ("setup.py", "pyproject.toml", "kime"):
        src = SOURCE / part
        if src.is_dir():
            shutil.copytree(src, copy / part, ignore=shutil.ignore_patterns(
                "*.so", "__pycache__", "_*.c"))
        else:
            copy.mkdir(exist_ok=True)
            shutil.copy(src, copy / part)
    env = {**os.environ, "KIME_BUILD_JOBS": "2"}

    def build() -> str:
        done = subprocess.run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=copy,
                              env=env, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stderr[-3000:]
        return done.stdout + done.stderr

    log = build()
    for c in sorted((copy / "kime/_cpu/csrc").glob("*.c")):
        compiles = [line for line in log.splitlines() if f"-c kime/_cpu/csrc/{c.name}" in line]
        assert len(compiles) == 1, (c.name, compiles)
    built = list((copy / "kime/_cpu").glob("_*.so"))
    assert len(built) == len(list((copy / "kime/_cpu").glob("*.pyx")))
    # No OpenMP (issue 54): nothing compiles or links with it, no extension needs its runtime,
    # and this build's kernels still run a step's tasks on two threads (kime's own pool).
    assert "-fopenmp" not in log and "-pthread" in log
    for so in built:
        needed = _needed(so)
        assert not [n for n in needed if n.startswith(("libgomp", "libomp", "libiomp"))], needed
    threads = subprocess.run([sys.executable, "-c", THREADS_PROBE], cwd=copy, capture_output=True,
                             text=True, timeout=120)
    assert threads.stdout.split() == ["threaded", "0,1"], threads.stdout + threads.stderr[-2000:]
    again = build()
    assert "kime/_cpu/csrc/" not in again.replace("-Ikime/_cpu/csrc", "")
    if sys.version_info < (3, 11):
        return
    # A switch of ABI mode rebuilds the extensions, not the C kernels, and the old files go, since
    # `.cpython-3XY-*.so` would shadow `.abi3.so` (and the reverse would leave two builds).
    modes = {}
    for mode in ("0", "1"):
        env["KIME_LIMITED_API"] = mode
        log = build()
        assert "kime/_cpu/csrc/" not in log.replace("-Ikime/_cpu/csrc", "")
        assert "-DPy_LIMITED_API" in log if mode == "1" else "Py_LIMITED_API" not in log
        modes[mode] = sorted(p.name for p in (copy / "kime/_cpu").glob("_*.so"))
        loaded = subprocess.run([sys.executable, "-c", "from kime._cpu import _ops; "
                                 "print(_ops.__file__.rsplit('/', 1)[1])"], cwd=copy,
                                capture_output=True, text=True, timeout=60)
        assert loaded.stdout.strip() in modes[mode], (loaded.stdout, loaded.stderr[-1000:])
    suffix = sysconfig.get_config_var("EXT_SUFFIX")
    assert modes["0"] and all(name.endswith(suffix) for name in modes["0"]), modes
    assert modes["1"] and all(name.endswith(".abi3.so") for name in modes["1"]), modes


def test_the_build_carries_the_digest_of_its_sources(setup_py):
    """The packed-weight cache is keyed on `_forward.source_digest()` (issue 53: it was keyed on
    a version nobody bumped): it must be setup.py's digest of the sources in this checkout, so
    a change to a packer changes the key once built. A failure here means the extensions were
    built from other sources: rebuild (`setup.py build_ext --inplace`)."""
    from kime._cpu import _forward

    if SOURCE not in Path(_forward.__file__ or "").resolve().parents:
        pytest.skip("kime is not imported from this checkout")
    cwd = os.getcwd()
    os.chdir(SOURCE)
    try:
        want = setup_py.source_digest()
        macros = dict(setup_py.extensions()[0].define_macros)
    finally:
        os.chdir(cwd)
    assert _forward.source_digest() == want and macros["KIME_SOURCE_DIGEST"] == '"%s"' % want
