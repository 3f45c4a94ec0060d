"""kime installed from its wheel, run the way a user on a CPU server without a compiler runs it.

Skipped unless KIME_WHEEL names the wheel (tools/build_wheel.sh prints its path) installed in
the Python running these tests. `.ci/run` installs it into a fresh virtual environment with no
compiler on PATH and runs the whole suite from a copy of tests/ outside the source tree, so every
test exercises the wheel; this file checks what only a wheel can get wrong: that the import is the
installed package, that it carries exactly its files (no OpenMP runtime: the kernels run on
kime's own pthreads pool), that its kernels run on several threads, and that the console script
works under each ISA cap, with and without the serve extra.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest

from ..wheel_answers import ISA_ORDER, QUESTIONS

WHEEL = os.environ.get("KIME_WHEEL", "")
#: tests/wheel_answers.py's record from the reference interpreter (tools/test_wheels.sh sets it)
REFERENCE = os.environ.get("KIME_WHEEL_REFERENCE", "")
pytestmark = pytest.mark.skipif(
    not WHEEL, reason="KIME_WHEEL is not set: tests of an installed wheel (build one with "
    "tools/build_wheel.sh, install it in a fresh venv, set KIME_WHEEL to its path; .ci/run does)")

BIN = Path(sys.executable).parent


def kime_cli(*argv: str, isa: str | None = None,
             timeout: float = 120) -> subprocess.CompletedProcess:
    """The `kime` console script the wheel installed, in a child process with KIME_ISA set (or
    unset), the way a user types it."""
    env = {k: v for k, v in os.environ.items() if k != "KIME_ISA"}
    if isa is not None:
        env["KIME_ISA"] = isa
    return subprocess.run([str(BIN / "kime"), *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from kime.synthetic import write_checkpoint

    return write_checkpoint(tmp_path_factory.mktemp("wheel") / "tiny", shape="tiny", seed=3)


@pytest.fixture(scope="module")
def questions_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("wheel") / "questions.json"
    path.write_text(json.dumps(QUESTIONS))
    return path


def test_kime_is_the_installed_wheel():
    import kime

    where = Path(kime.__file__).resolve()
    site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
    assert where.parent.parent in site, "kime imports from %s, not site-packages" % where
    assert not (where.parent.parent / "setup.py").exists()
    direct = json.loads(metadata.distribution("kime").read_text("direct_url.json") or "{}")
    assert direct.get("url", "").endswith("/" + Path(WHEEL).name), direct
    assert not direct.get("dir_info", {}).get("editable")
    assert metadata.version("kime") == kime.__version__


def wheel_tags() -> set[str]:
    """The installed wheel's tags, from its WHEEL metadata: {"cp311-abi3-manylinux_2_34_x86_64"}."""
    text = metadata.distribution("kime").read_text("WHEEL") or ""
    return {line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Tag:")}


def test_the_wheel_is_the_one_for_this_interpreter():
    """CPython 3.10 gets its own wheel; 3.11 and later the one stable-ABI wheel (issue 34)."""
    expected = "cp310-cp310" if sys.version_info < (3, 11) else "cp311-abi3"
    tags = wheel_tags()
    assert tags and {t.rsplit("-", 1)[0] for t in tags} == {expected}, tags
    assert Path(WHEEL).name.split("-")[2:4] == expected.split("-"), WHEEL
    from kime._cpu import _forward

    suffix = ".abi3.so" if expected.endswith("abi3") else sysconfig.get_config_var("EXT_SUFFIX")
    assert _forward.__file__ is not None and _forward.__file__.endswith(suffix), _forward.__file__


def test_installed_files_are_exactly_the_runtime():
    files = [str(f) for f in metadata.files("kime") or []]
    package = [f for f in files if f.startswith("kime/")]
    suffixes = {Path(f).suffix for f in package}
    ext = "abi3.so" if any("-abi3-" in t for t in wheel_tags()) else "cpython-"
    assert suffixes <= {".py", ".pyi", ".so", ".cu", ".typed", ".pyc"}, sorted(suffixes)
    for needed in ("kime/py.typed", "kime/_cuda/kernels.cu", "kime/_corpus.py"):
        assert needed in files
    for module in ("_attention", "_bgemm", "_forward", "_gemm", "_ops", "_qgemm"):
        assert "kime/_cpu/%s.pyi" % module in files
        assert any(f.startswith("kime/_cpu/%s.%s" % (module, ext)) for f in package), module
    assert not any(f.startswith(("tests/", "bench/", "build/", "kime.libs/")) for f in files), (
        "the wheel bundles what it should not (an OpenMP runtime, tests, benches): %s" % files)


def test_no_compiler_on_path():
    """The point of the wheel: nothing here can build C, and kime still runs."""
    names = {"cc", "gcc", "g++", "c++", "clang",
             (sysconfig.get_config_var("CC") or "cc").split()[0]}
    for name in sorted(names):
        try:
            done = subprocess.run([name, "--version"], capture_output=True, timeout=30)
        except FileNotFoundError:
            continue
        assert done.returncode != 0, "%s works on PATH; the wheel test needs no compiler" % name


def test_the_kernels_run_on_several_threads_without_openmp():
    """The wheel's kernels run on kime's own pool: a two-thread step runs tasks on a worker, and
    no OpenMP runtime is loaded for it (none is in the wheel, none is linked)."""
    import numpy as np

    from kime._cpu import _forward

    assert _forward.pool_threaded()
    tids = np.full(64, -1, np.int32)
    for _ in range(50):  # the caller may take every task of a step before the worker wakes
        tids[:] = -1
        _forward.pool_probe(np.full(64, 200, np.int32), tids, 2)
        if 1 in tids:
            break
    assert set(tids.tolist()) == {0, 1}, tids
    maps = Path("/proc/self/maps")
    if maps.is_file():
        assert not [line for line in maps.read_text().splitlines()
                    if "libgomp" in line or "libomp" in line]


def test_import_kime_loads_no_backend_or_server():
    """`import kime` stays light from the wheel: no compiled backend, no HTTP stack, no CuPy or
    Ray until used (what the import loads, not how long it takes: that depends on the disk and
    the load)."""
    done = subprocess.run([sys.executable, "-c", "import sys, kime; print(sorted(m for m in "
                           "sys.modules if m.split('.')[0] in {'fastapi', 'uvicorn', 'cupy', "
                           "'ray', 'torch'} or m.startswith('kime._cpu._')))"],
                          capture_output=True, text=True, check=True)
    assert done.stdout == "[]\n", "import kime loads: " + done.stdout


def test_version_from_the_console_script():
    import kime

    done = kime_cli("--version")
    assert done.returncode == 0 and done.stdout == "kime %s\n" % kime.__version__


def test_doctor_decide_under_each_isa(checkpoint, questions_file):
    """`kime doctor` and `kime decide` with the ISA the CPU has, capped at AVX2, and portable
    (what a CPU without AVX-512, or without AVX2, gets): the same answers within float noise."""
    done = kime_cli("doctor", "--json")
    assert done.returncode == 0, done.stderr
    native = json.loads(done.stdout)["cpu"]["isa"]
    results = {}
    for cap in (None, "avx2", "portable"):
        done = kime_cli("doctor", "--json", isa=cap)
        assert done.returncode == 0, done.stderr
        cpu = json.loads(done.stdout)["cpu"]
        expected = native if cap is None else min(native, cap, key=ISA_ORDER.index)
        assert (cpu["isa"], cpu.get("error")) == (expected, None)
        assert cpu["pool_spin_us"] is not None, "the wheel's kernels run on one thread"
        done = kime_cli("decide", "--model", str(checkpoint), "--device", "cpu", "--compact",
                        "--state", "I was charged twice, please refund one.",
                        "--questions", str(questions_file), isa=cap)
        assert done.returncode == 0, done.stderr
        results[cap] = json.loads(done.stdout)
    base = results[None]
    assert list(base["answers"]) == list(QUESTIONS)
    for cap, result in results.items():  # Laya rounds to 4 places: one unit of rounding apart
        assert _numbers(result) == pytest.approx(_numbers(base), abs=2e-4), cap
        assert _strings(result) == _strings(base), cap


@pytest.mark.skipif(not REFERENCE, reason="KIME_WHEEL_REFERENCE is not set: the reference "
                    "interpreter's answers (tools/test_wheels.sh records them on CPython 3.11)")
def test_answers_are_the_reference_interpreters_to_the_bit():
    """Under every ISA level here, the forward pass's raw bits and `kime decide`'s JSON, FP32 and
    INT8, equal those of the reference interpreter (3.11) byte for byte: one C kernel set, so the
    interpreter and its NumPy change nothing. One exception, which is the C library's and not
    the interpreter's: the portable level calls libm's erff and expf, so on another glibc (sid's
    2.43 against bookworm's 2.36) its raw bits may differ; its answers must not."""
    from ..paths import TINY
    from ..wheel_answers import answers, libc

    record = json.loads(Path(REFERENCE).read_text())
    mine = answers(TINY)
    assert list(mine) == list(record["answers"]), "ISA levels differ from the reference's"
    compared = [k for k in mine if libc() == record["libc"] or k != "portable bits"]
    differ = [key for key in compared if mine[key] != record["answers"][key]]
    shown = ["%s\n  here: %s\n  ref:  %s" % (k, mine[k], record["answers"][k]) for k in differ]
    assert not differ, "%s differ from Python %s's:\n%s" % (differ, record["python"],
                                                            "\n".join(shown))


def _numbers(value):
    if isinstance(value, dict):
        return [n for v in value.values() for n in _numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in _numbers(v)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def _strings(value):
    if isinstance(value, dict):
        return [(k, _strings(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_strings(v) for v in value]
    return value if isinstance(value, (str, bool)) or value is None else "number"


def test_serve_with_or_without_the_extra():
    loaded = subprocess.run([sys.executable, "-c", "import sys, kime, kime.laya; print(sorted("
                             "{'fastapi', 'pydantic', 'uvicorn'} & set(sys.modules)))"],
                            capture_output=True, text=True, check=True)
    assert loaded.stdout == "[]\n", "import kime loads the HTTP stack: " + loaded.stdout
    if importlib.util.find_spec("fastapi") is None:
        done = kime_cli("serve", "--model", "laya")
        assert done.returncode == 2 and "pip install 'kime[serve]'" in done.stderr, done.stderr
    else:
        done = kime_cli("serve", "--help")
        assert done.returncode == 0 and "--max-merge" in done.stdout
