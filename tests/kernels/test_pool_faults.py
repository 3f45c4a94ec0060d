"""kime's thread pool when the threading library refuses it a resource (issue 53: pool.c
ignored the return codes of pthread_key_create, pthread_atfork and the mutex and condition
init): tests/kernels/pool_faults.c, built with `-Wl,--wrap` so the named call fails for real in
the pool's own code. Without its thread key a team would outlive its thread, without its fork
handler a child would wait on its parent's workers, and a team whose mutex or condition did not
initialise would wait on garbage: each time the pool runs every step on its caller, whole."""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path

import pytest

from ..toolchain import build_program, working

HERE = Path(__file__).resolve().parent
CC = working("cc") or working("gcc")
WRAPPED = ("pthread_key_create", "pthread_atfork", "pthread_mutex_init", "pthread_cond_init",
           "pthread_setspecific")

pytestmark = pytest.mark.skipif(CC is None, reason="needs a C compiler")


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("pool") / "pool_faults"
    build = build_program(CC or "cc", platform.machine(), HERE / "pool_faults.c", ["pool.c"], exe,
                          link_flags=["-Wl,--wrap=" + ",--wrap=".join(WRAPPED)])
    log, _ = build.communicate(timeout=300)
    assert build.returncode == 0, log.decode(errors="replace")[-3000:]
    return exe


def _run(program: Path, fail: str) -> str:
    env = dict(os.environ, POOL_FAIL=fail)
    done = subprocess.run([str(program)], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.strip()


@pytest.mark.parametrize("fail", WRAPPED)
def test_a_pool_that_cannot_be_set_up_runs_every_step_on_its_caller(program, fail):
    assert _run(program, fail) == "tasks 256 threads 1 child 0"


def test_with_nothing_failing_the_pool_uses_its_workers(program):
    out = _run(program, "")
    assert out.startswith("tasks 256 threads ") and out.endswith(" child 0")
    if (os.cpu_count() or 1) > 1:
        assert int(out.split()[3]) > 1, out
