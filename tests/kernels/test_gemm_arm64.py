"""The aarch64 FP32 GEMM and ISA dispatch, checked from an x86-64 host: arm64_gemm_harness.c is
cross-compiled (aarch64-linux-gnu-gcc -static) and run under qemu-user with CPU models that
expose each dispatch level, and built natively for comparison. Skipped where the cross compiler
or qemu-aarch64-static is missing, and on aarch64 itself, where test_gemm.py runs every level
through the extension.

What it checks: getauxval's features and the level each model gets; KIME_ISA capping by name;
the harness's own checks (double and fmaf references, bits across threads and batches); and that
every aarch64 level's output bits equal the x86 AVX2/AVX-512 bits for the same inputs (every SIMD
path is one FMA per k from +0, and the epilogues run the same operations).
"""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Dict, List

import pytest

from ..toolchain import build_program, working

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kime" / "_cpu" / "csrc"
HARNESS = Path(__file__).with_name("arm64_gemm_harness.c")
CROSS = working("aarch64-linux-gnu-gcc")
QEMU = working("qemu-aarch64-static")
NATIVE = working("gcc") or working("cc")

pytestmark = pytest.mark.skipif(
    platform.machine() not in ("x86_64", "AMD64") or not (CROSS and QEMU and NATIVE),
    reason="needs an x86-64 host with aarch64-linux-gnu-gcc and qemu-aarch64-static")

# QEMU_CPU model -> (the level kime picks, the features getauxval reports)
MODELS = {
    "cortex-a57": ("neon", {"asimd"}),
    "neoverse-n1": ("dotprod", {"asimd", "dotprod"}),
    "a64fx": ("neon", {"asimd", "sve"}),
    "max,sme=off": ("bf16", {"asimd", "dotprod", "i8mm", "bf16", "sve", "sve2"}),
}
FEATURES = ["asimd", "dotprod", "i8mm", "bf16", "sve", "sve2"]  # kernels.h's KIME_ARM_* order
LEVELS = ["portable", "neon", "dotprod", "i8mm", "bf16"]


def _build(compiler: str, machine: str, out: Path, static: bool) -> Path:
    build = build_program(compiler, machine, HARNESS, ["gemm.c", "isa.c", "pool.c"], out, static)
    log, _ = build.communicate(timeout=600)
    assert build.returncode == 0, log.decode(errors="replace")[-3000:]
    return out


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    tmp = tmp_path_factory.mktemp("arm64-gemm")
    assert CROSS and NATIVE
    return {"aarch64": _build(CROSS, "aarch64", tmp / "harness-aarch64", True),
            "native": _build(NATIVE, "x86_64", tmp / "harness-native", False)}


def _run(binary: Path, *args: str, cpu: str | None = None, isa: str | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KIME_ISA", "QEMU_CPU")}
    if isa is not None:
        env["KIME_ISA"] = isa
    cmd = [str(binary), *args]
    if cpu is not None:
        assert QEMU
        env["QEMU_CPU"] = cpu
        cmd = [QEMU, *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)


def _dispatch(out: str) -> tuple[str, set[str]]:
    _, name, _, bits = out.splitlines()[0].split()
    return name, {f for i, f in enumerate(FEATURES) if int(bits) >> i & 1}


def _hashes(out: str) -> Dict[str, Dict[str, str]]:
    """level -> case -> output hash, from the harness's `hash LEVEL CASE... HASH` lines."""
    table: Dict[str, Dict[str, str]] = {}
    for line in out.splitlines():
        if line.startswith("hash "):
            words: List[str] = line.split()
            table.setdefault(words[1], {})[" ".join(words[2:-1])] = words[-1]
    return table


@pytest.mark.parametrize("cpu", list(MODELS))
def test_dispatch_per_cpu_model(binaries: Dict[str, Path], cpu: str) -> None:
    level, features = MODELS[cpu]
    got = _run(binaries["aarch64"], "isa", cpu=cpu)
    assert got.returncode == 0, got.stderr
    assert _dispatch(got.stdout) == (level, features)


def test_kime_isa_caps_by_name(binaries: Dict[str, Path]) -> None:
    for name in LEVELS:
        got = _run(binaries["aarch64"], "isa", cpu="max,sme=off", isa=name)
        assert _dispatch(got.stdout)[0] == name
    for name in ("avx2", "avx512", "NEON", ""):  # not this architecture's names: no cap
        got = _run(binaries["aarch64"], "isa", cpu="max,sme=off", isa=name)
        assert _dispatch(got.stdout)[0] == "bf16"
    # a cap above the CPU caps nothing: Neoverse N1 stops at dotprod
    assert _dispatch(_run(binaries["aarch64"], "isa", cpu="neoverse-n1", isa="bf16").stdout)[0] \
        == "dotprod"


@pytest.fixture(scope="module")
def native_hashes(binaries: Dict[str, Path]) -> Dict[str, str]:
    """The x86 SIMD levels' hashes (one table: they must agree with each other)."""
    got = _run(binaries["native"], "quick")
    assert got.returncode == 0, got.stdout[-2000:]
    table = _hashes(got.stdout)
    simd = [table[level] for level in ("avx2", "avx512") if level in table]
    if not simd:
        pytest.skip("this x86 CPU has no AVX2 to compare the NEON bits with")
    for other in simd[1:]:
        assert other == simd[0]
    return simd[0]


@pytest.mark.slow
@pytest.mark.parametrize("cpu", ["cortex-a57", "neoverse-n1", "max,sme=off"])
def test_neon_gemm_under_qemu(binaries: Dict[str, Path], native_hashes: Dict[str, str],
                              cpu: str) -> None:
    got = _run(binaries["aarch64"], "quick", cpu=cpu)
    assert got.returncode == 0 and got.stdout.rstrip().endswith("ok: 0 failures"), \
        got.stdout[-3000:]
    table = _hashes(got.stdout)
    best = LEVELS.index(MODELS[cpu][0])
    levels = sorted({LEVELS[1], LEVELS[best]})  # what "quick" runs besides portable
    assert sorted(table) == sorted(["portable"] + levels)
    for level in levels:
        assert table[level] == native_hashes, level
