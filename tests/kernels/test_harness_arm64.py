"""The aarch64 INT8 and BF16 GEMMs (csrc/qgemm_arm64.h, csrc/bgemm_arm64.h) from an x86 host:
tests/kernels/harness_arm64.c cross-compiled (`aarch64-linux-gnu-gcc -O3 -static -pthread`, each
kernel source with its setup.py flags) and run under qemu-user once per CPU model, so each
dispatch branch runs: cortex-a57 (NEON only: the neon impl, no BF16), neoverse-n1 (dotprod:
sdot) and max with SME off (i8mm and bf16: smmla and bfmmla). The harness checks INT32 sums bit
for bit against an integer reference, the SIMD impls against each other, BF16 against double, and
bits across threads and batches (its header says what exactly). Skipped where the cross compiler
or qemu is missing. Emulated, so slow, and its timings say nothing about ARM speed.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ..toolchain import build_program, working

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kime" / "_cpu" / "csrc"
CC = working("aarch64-linux-gnu-gcc")
QEMU = working("qemu-aarch64-static")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CC is None or QEMU is None,
                       reason="needs aarch64-linux-gnu-gcc and qemu-aarch64-static"),
]

# QEMU_CPU -> the INT8 impls and BF16 answer the harness must report
MODELS = {
    "cortex-a57": (["portable", "neon"], "bf16: skipped (missing: bf16)"),
    "neoverse-n1": (["portable", "neon", "sdot"], "bf16: skipped (missing: bf16)"),
    "max,sme=off": (["portable", "neon", "sdot", "smmla"], "bf16: "),
}


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("arm64") / "harness"
    assert CC
    build = build_program(CC, "aarch64", ROOT / "tests" / "kernels" / "harness_arm64.c",
                          ["qgemm.c", "qgemm_neon.c", "bgemm.c", "isa.c", "pool.c"], exe,
                          static=True)
    log, _ = build.communicate(timeout=600)
    assert build.returncode == 0, log.decode(errors="replace")[-3000:]
    return exe


@pytest.mark.parametrize("model", list(MODELS))
def test_kernels_under_qemu(harness: Path, model: str) -> None:
    impls, bf16 = MODELS[model]
    run = subprocess.run([str(QEMU), str(harness)], env={"QEMU_CPU": model},
                         capture_output=True, text=True, timeout=1800)
    out = run.stdout
    assert run.returncode == 0 and out.rstrip().endswith("all ok"), out + run.stderr
    for name in ("portable", "neon", "sdot", "smmla"):
        line = next(x for x in out.splitlines() if x.startswith("impl %s:" % name))
        assert line.endswith(": ok") if name in impls else "skipped" in line, line
    bf16_line = next(x for x in out.splitlines() if x.startswith("bf16: "))
    assert bf16_line.startswith(bf16) and ("skipped" in bf16 or bf16_line.endswith(": ok")), out
    if len(impls) > 2:
        assert "simd impls agree bit for bit (%d of them" % (len(impls) - 1) in out, out
