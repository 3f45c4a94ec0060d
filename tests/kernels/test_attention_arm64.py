"""The aarch64 attention (NEON tile and softmax), RoPE and LayerNorm (NEON norm_row) from an x86-64
host: arm64_attention_harness.c is cross-compiled with the kernel sources
(`aarch64-linux-gnu-gcc -O3 -static -pthread`) and run under qemu-user once per CPU model
(cortex-a57: NEON only; neoverse-n1: + dotprod; max with SME off: up to bf16), and built natively
for comparison with KIME_ISA=avx2. Skipped where the cross compiler or qemu is missing, and on
aarch64 itself, where test_attention.py and test_attention_parallel.py force every level.

The harness checks each level against double references, RoPE to the bit, and bits across thread
counts and batches (its header says what exactly). Here its output hashes must equal the x86
build's: every aarch64 SIMD level's attention the AVX2 path's bits (same FMA per element in the
same order, same polynomial and masks), FP32 and BF16 (whose AVX2 and NEON FMAs give
vdpbf16ps's bits: test_attention_bf16.py checks that on x86), the portable path's the x86
portable bits (contraction off), and RoPE and LayerNorm the same bits at every level on both.
Emulated, so its timings say nothing about ARM speed.
"""
from __future__ import annotations

import os
import platform
import subprocess
from pathlib import Path
from typing import Dict

import pytest

from ..toolchain import build_program, working

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "kime" / "_cpu" / "csrc"
HARNESS = Path(__file__).with_name("arm64_attention_harness.c")
CROSS = working("aarch64-linux-gnu-gcc")
QEMU = working("qemu-aarch64-static")
NATIVE = working("gcc") or working("cc")
# forward.c (the norm) references the GEMMs, so the harness links every kernel source
SOURCES = ["attention.c", "forward.c", "gemm.c", "qgemm.c", "qgemm_neon.c", "bgemm.c", "isa.c",
           "pool.c"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        platform.machine() not in ("x86_64", "AMD64") or not (CROSS and QEMU and NATIVE),
        reason="needs an x86-64 host with aarch64-linux-gnu-gcc and qemu-aarch64-static"),
]

# QEMU_CPU model -> the best level (the harness runs portable and that one)
MODELS = {"cortex-a57": "neon", "neoverse-n1": "dotprod", "max,sme=off": "bf16"}


def _build(compiler: str, machine: str, out: Path, static: bool) -> subprocess.Popen[bytes]:
    return build_program(compiler, machine, HARNESS, SOURCES, out, static)


@pytest.fixture(scope="module")
def binaries(tmp_path_factory: pytest.TempPathFactory) -> Dict[str, Path]:
    """Both builds at once (each compiles seven sources, about 10 s)."""
    tmp = tmp_path_factory.mktemp("arm64-attention")
    assert CROSS and NATIVE
    paths = {"aarch64": tmp / "harness-aarch64", "native": tmp / "harness-native"}
    builds = {"aarch64": _build(CROSS, "aarch64", paths["aarch64"], True),
              "native": _build(NATIVE, "x86_64", paths["native"], False)}
    for name, build in builds.items():
        log, _ = build.communicate(timeout=600)
        assert build.returncode == 0, (name, log.decode(errors="replace")[-3000:])
    return paths


def _run(binary: Path, cpu: str | None = None, isa: str | None = None
         ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KIME_ISA", "QEMU_CPU")}
    if isa is not None:
        env["KIME_ISA"] = isa
    cmd = [str(binary)]
    if cpu is not None:
        assert QEMU
        env["QEMU_CPU"] = cpu
        cmd = [QEMU, *cmd]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


def _hashes(out: str) -> Dict[str, Dict[str, str]]:
    """level -> 'kind case...' -> output hash, from the `hash LEVEL KIND CASE... HASH` lines."""
    table: Dict[str, Dict[str, str]] = {}
    for line in out.splitlines():
        if line.startswith("hash "):
            words = line.split()
            table.setdefault(words[1], {})[" ".join(words[2:-1])] = words[-1]
    return table


@pytest.fixture(scope="module")
def native(binaries: Dict[str, Path]) -> Dict[str, Dict[str, str]]:
    """The x86 build's hashes at portable and (forced) AVX2."""
    got = _run(binaries["native"], isa="avx2")
    if got.stdout.split()[:2] != ["isa", "avx2"]:
        pytest.skip("this x86 CPU has no AVX2 to compare the NEON bits with")
    assert got.returncode == 0 and got.stdout.rstrip().endswith("ok: 0 failures"), \
        got.stdout[-3000:]
    table = _hashes(got.stdout)
    assert sorted(table) == ["avx2", "portable"]
    return table


@pytest.mark.parametrize("cpu", list(MODELS))
def test_attention_rope_norm_under_qemu(binaries: Dict[str, Path],
                                        native: Dict[str, Dict[str, str]], cpu: str) -> None:
    got = _run(binaries["aarch64"], cpu=cpu)
    assert got.returncode == 0 and got.stdout.rstrip().endswith("ok: 0 failures"), \
        got.stdout[-3000:]
    table = _hashes(got.stdout)
    best = MODELS[cpu]
    assert sorted(table) == sorted(["portable", best])
    kinds = {case.split()[0] for case in table[best]}
    assert kinds == {"attention", "attention_bf16", "rope", "norm"}
    # NEON is the AVX2 path's bits, BF16 attention included (the FMAs that give vdpbf16ps's);
    # portable is x86 portable's (no FMA contraction on either)
    for case, value in table[best].items():
        assert value == native["avx2"][case], (best, case)
    for case, value in table["portable"].items():
        assert value == native["portable"][case], ("portable", case)
    # RoPE and LayerNorm have one result per input: every level gives the same bits
    for case, value in table["portable"].items():
        if not case.startswith("attention"):
            assert table[best][case] == value, case
