"""kime's thread pool (csrc/pool.c) under millions of short steps: tests/kernels/pool_stress.c,
built with this machine's C compiler and run natively, and cross-compiled for aarch64 and run
under qemu-user with LL/SC atomics (cortex-a57) and with LSE atomics (max). Under qemu a
missing fence shows: it compiles aarch64's store-release and load-acquire to plain x86 moves, so
a Dekker-style handshake without a full fence lets a worker into a step the caller is rewriting.
The tests/kernels/harness_arm64.c GEMM checks lost a tile or hung that way, one run in a few;
this stress, before the fences, failed or hung every run. Its timings say nothing about speed.
"""
from __future__ import annotations

import platform
import subprocess
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest

from ..toolchain import build_program, working

HERE = Path(__file__).resolve().parent
CC = working("cc") or working("gcc")
CROSS = working("aarch64-linux-gnu-gcc")
QEMU = working("qemu-aarch64-static")

pytestmark = pytest.mark.slow

# name -> (compiler, setup.py machine, run prefix, environment, steps)
RUNS: Dict[str, Tuple[Optional[str], str, List[str], Dict[str, str], int]] = {
    "native": (CC, platform.machine(), [], {}, 1_000_000),
    "qemu-cortex-a57": (CROSS, "aarch64", [QEMU or ""], {"QEMU_CPU": "cortex-a57"}, 2_000_000),
    "qemu-max": (CROSS, "aarch64", [QEMU or ""], {"QEMU_CPU": "max,sme=off"}, 2_000_000),
}


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """The stress program per compiler, built once."""
    built: Dict[str, Path] = {}
    for compiler, machine in {(c, m) for c, m, *_ in RUNS.values() if c}:
        exe = tmp_path_factory.mktemp("pool") / ("pool_stress_" + machine)
        build = build_program(compiler, machine, HERE / "pool_stress.c", ["pool.c"], exe,
                              static=machine == "aarch64")
        log, _ = build.communicate(timeout=600)
        assert build.returncode == 0, log.decode(errors="replace")[-3000:]
        built[compiler] = exe
    return built


@pytest.mark.parametrize("name", list(RUNS))
def test_every_step_runs_whole_and_in_order(programs: Dict[str, Path], name: str) -> None:
    compiler, _, prefix, env, steps = RUNS[name]
    if compiler is None or (prefix and QEMU is None):
        pytest.skip("needs %s" % ("a C compiler" if not prefix else
                                  "aarch64-linux-gnu-gcc and qemu-aarch64-static"))
    try:
        run = subprocess.run(prefix + [str(programs[compiler]), str(steps), "3"], env=env,
                             capture_output=True, text=True, timeout=150)
    except subprocess.TimeoutExpired:
        pytest.fail("the pool hung: %d steps did not end in 150 s" % steps)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith("%d steps, up to 3 threads: 0 bad in tasks" % (2 * steps))
