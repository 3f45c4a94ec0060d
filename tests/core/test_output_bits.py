"""The forward pass's bits belong to the kernels picked, not to the machine (issue 33).

tests/output_bits.py prints one hash per family (the RoPE tables, FP32 logits and act, INT8
logits and act) on the tiny checkpoint. What must hold, on any CPU:
- every SIMD level gives the same lines (x86 AVX2 and AVX-512 FP32; every INT8 kernel set), and
  so does the CPU's own level where attention's BF16 products stay on vdpbf16ps (on an AMX CPU
  uncapped they run on AMX tiles, with AMX's own bits: KIME_BGEMM=avx512bf16 keeps them off);
- NumPy's own SIMD dispatch changes nothing: NumPy only prepares tables and weights, and once
  computed the RoPE tables with float32 `**`, `cos` and `sin`, which NumPy sends to SVML on
  AVX-512 CPUs, so those CPUs gave other bits than AVX2-only ones at the same KIME_ISA;
- an emulated AVX2-only CPU (qemu-user's Zen 3, EPYC-Milan) gives the native KIME_ISA=avx2
  lines, and an emulated CPU without AVX (Westmere) the native KIME_ISA=portable ones: cpuid
  itself differs there, so this covers every pick made from the CPU rather than the level.

The ARM64 job compares the same lines between x86 and aarch64 (tools/test_wheel_arm64.sh).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Dict, Mapping, Optional, Sequence, Union

import pytest

from ..paths import TESTS, TINY
from ..toolchain import working

SCRIPT = TESTS / "output_bits.py"
X86 = platform.machine() in ("x86_64", "AMD64")
QEMU = (working("qemu-x86_64-static") or working("qemu-x86_64")) if X86 else None
# variables that pick kernels or NumPy paths; each run sets its own
PICKS = ("KIME_ISA", "KIME_QGEMM", "KIME_BGEMM", "NPY_DISABLE_CPU_FEATURES", "KIME_CACHE",
         "QEMU_CPU")


def bits(env: Mapping[str, str], prefix: Sequence[str] = (), first: bool = False
         ) -> Dict[str, str]:
    """tests/output_bits.py's lines as {family: hash}, run under `env` (and `prefix`, qemu), over
    its three requests or, `first`, the first only (the script's --first)."""
    full = {k: v for k, v in os.environ.items() if k not in PICKS}
    full.update(env)
    done = subprocess.run([*prefix, sys.executable, str(SCRIPT), str(TINY),
                           *(["--first"] if first else [])], env=full,
                          capture_output=True, text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(line.split() for line in done.stdout.splitlines())


def simd_levels() -> list[str]:
    """The names of the SIMD levels this CPU runs (every level above portable up to its best)."""
    from kime._cpu import _forward

    best = _forward.isa_detect() if "KIME_ISA" not in os.environ else None
    if best is None:  # the caller's own cap: ask for the CPU's levels without it
        saved = os.environ.pop("KIME_ISA")
        try:
            best = _forward.isa_detect()
        finally:
            os.environ["KIME_ISA"] = saved
    return [_forward.isa_name(level) for level in range(1, best + 1)]


def numpy_dispatch() -> list[str]:
    """NumPy's dispatch targets this CPU runs, past its build's baseline."""
    try:
        from numpy._core import _multiarray_umath as umath
    except ImportError:  # NumPy 1.x
        from numpy.core import _multiarray_umath as umath  # type: ignore[no-redef]
    return [t for t in umath.__cpu_dispatch__ if umath.__cpu_features__.get(t)]


def test_every_simd_level_and_int8_set_gives_the_same_bits() -> None:
    levels = simd_levels()
    if not levels:
        pytest.skip("this CPU runs the portable level only")
    runs = {"KIME_ISA=" + level: bits({"KIME_ISA": level}) for level in levels}
    # uncapped: the INT8 sets above a level's own (AVX-VNNI, AMX), attention off AMX tiles
    runs.update({"KIME_QGEMM=" + impl: bits({"KIME_QGEMM": impl, "KIME_BGEMM": "avx512bf16"})
                 for impl in (("neon", "sdot") if not X86 else ("avx2", "avxvnni", "amx"))})
    first = next(iter(runs.values()))
    assert all(got == first for got in runs.values()), runs


def test_numpy_dispatch_changes_no_bit() -> None:
    targets = numpy_dispatch()
    if not targets:
        pytest.skip("NumPy dispatches nothing past its baseline on this CPU")
    default = bits({})
    without = bits({"NPY_DISABLE_CPU_FEATURES": " ".join(targets)})
    assert without == default, "with NumPy's %s off" % targets


# qemu-user's TCG runs AVX2 and FMA but no AVX-512, so EPYC-Milan is a Zen 3 as far as cpuid,
# libgcc, glibc's ifuncs and NumPy can tell; Westmere has no AVX at all.
EMULATED = {"EPYC-Milan-v1": "avx2", "Westmere": "portable"}


def forced_blas_core_refused(cpu: str) -> Optional[str]:
    """Why the emulated `cpu` cannot start NumPy under this environment's OPENBLAS_CORETYPE, or
    None. Some machines set the variable for their real CPU (older OpenBLAS builds misbehave on
    them), and OpenBLAS then runs that core type's kernels wherever it is: under `-cpu Westmere`
    its Haswell kernels are illegal instructions. Only a proven case is refused: NumPy fails to
    import with the variable and imports without it; anything else fails the test, as it should."""
    core = os.environ.get("OPENBLAS_CORETYPE")
    if not core or QEMU is None:
        return None
    inherited = {k: v for k, v in os.environ.items() if k not in PICKS}

    def imports_numpy(env: Mapping[str, str]) -> int:
        return subprocess.run([QEMU, "-cpu", cpu, sys.executable, "-c", "import numpy"],
                              env=env, capture_output=True, timeout=300).returncode

    rc = imports_numpy(inherited)
    if rc == 0:
        return None
    if imports_numpy({k: v for k, v in inherited.items() if k != "OPENBLAS_CORETYPE"}) != 0:
        return None
    return ("OPENBLAS_CORETYPE=%s, set for this machine's CPU, makes NumPy's OpenBLAS run kernels "
            "the emulated %s lacks: `import numpy` exits %d there with it and imports without it"
            % (core, cpu, rc))


@pytest.fixture(scope="module")
def emulated_bits() -> Dict[str, Union[Dict[str, str], str]]:
    """Each emulated CPU's lines on the first request (the script's --first: what differs here is
    the CPU that picks the kernels; the native runs above meet every bucket at every level), run
    side by side, or why it cannot run."""
    if QEMU is None:
        pytest.skip("needs an x86-64 host with qemu-x86_64(-static)")
    if "avx2" not in simd_levels():
        pytest.skip("this CPU has no AVX2 level to compare the emulated one with")
    refused = {cpu: forced_blas_core_refused(cpu) for cpu in EMULATED}
    with ThreadPoolExecutor(max_workers=2) as pool:
        runs = {cpu: pool.submit(bits, {}, [QEMU, "-cpu", cpu], True)
                for cpu in EMULATED if refused[cpu] is None}
        return {cpu: runs[cpu].result() if cpu in runs else refused[cpu] for cpu in EMULATED}


# The fixture's two emulated runs count toward the first test that uses it. qemu's FMA helpers
# are slow on some hosts: EPYC-Milan's three requests took 4 min on a 2.1 GHz Intel Xeon (the
# first alone about 40 s), past pytest's 300 s there when both ran at once.
@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("cpu", list(EMULATED))
def test_an_emulated_cpu_gives_the_native_bits_of_its_level(
        cpu: str, emulated_bits: Dict[str, Union[Dict[str, str], str]]) -> None:
    got = emulated_bits[cpu]
    if isinstance(got, str):
        pytest.skip(got)
    assert got == bits({"KIME_ISA": EMULATED[cpu]}, first=True), (cpu, EMULATED[cpu])
