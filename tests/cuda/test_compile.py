"""kernels.cu compiles with NVRTC, for every head size the test and published shapes use, in
FP16 and FP32, for sm_75 (no tensor-core attention), sm_80 and sm_90. NVRTC needs no GPU, so this
runs on any machine where CuPy and an NVRTC library import; elsewhere it skips saying why."""
from __future__ import annotations

import pytest

from ..toolchain import working

from kime._cuda import kernels
from kime.synthetic import SHAPES


def _nvrtc():
    try:
        from cupy_backends.cuda.libs import nvrtc

        nvrtc.getVersion()
    except Exception as e:  # no CuPy, or CuPy without an NVRTC library
        pytest.skip("NVRTC is not available (%s: %s)" % (type(e).__name__, str(e).splitlines()[0]))
    return nvrtc


HEAD_DIMS = sorted({s.hidden_size // s.num_attention_heads for s in SHAPES.values()}
                   | {s.hidden_size // max(1, s.hidden_size // 64) for s in SHAPES.values()})


@pytest.mark.parametrize("arch", ["compute_75", "compute_80", "sm_90"])
@pytest.mark.parametrize("half", [True, False], ids=["f16", "f32"])
def test_kernels_compile(arch, half):
    nvrtc = _nvrtc()
    # The parallel layout's instances too (issue 26): a sequential model compiles them lazily.
    names = (kernels.name_expressions(half, HEAD_DIMS, mma=True)
             + kernels.name_expressions(half, HEAD_DIMS, mma=True, variant="_par"))
    prog = nvrtc.createProgram(kernels.source(), "kernels.cu", [], [])
    try:
        for name in names:
            nvrtc.addNameExpression(prog, name)
        try:
            nvrtc.compileProgram(prog, ["-arch=" + arch] + list(kernels.options(half)))
        except Exception as e:
            pytest.fail("kernels.cu does not compile for %s: %s\n%s"
                        % (arch, e, nvrtc.getProgramLog(prog)))
        for name in names:
            assert nvrtc.getLoweredName(prog, name)
        assert not nvrtc.getProgramLog(prog).strip(), nvrtc.getProgramLog(prog)
    finally:
        nvrtc.destroyProgram(prog)


def test_every_shape_has_its_attention_instances():
    assert HEAD_DIMS == [32, 64, 96]
    names = kernels.name_expressions(True, HEAD_DIMS, mma=True)
    assert "attention_mma<64, 4>" in names and "attention_mma<96, 2>" in names
    assert kernels.name_expressions(False, HEAD_DIMS, mma=True) == tuple(
        "attention_simple<%d>" % hd for hd in HEAD_DIMS)
    par = kernels.name_expressions(True, HEAD_DIMS, mma=True, variant="_par")
    assert "attention_mma_par<64, 4>" in par and "attention_simple_par<96>" in par
    assert not set(par) & set(names)


@pytest.mark.slow
def test_kernels_compile_with_nvcc(tmp_path):
    """Where the CUDA toolkit's nvcc is on PATH (no GPU needed), every instance a model may load,
    the parallel layout's included, compiles for sm_90 (the H200 this project is lent) without a
    warning: the same source NVRTC takes, with the instances named by explicit instantiation.
    About a minute on a small CPU (each further architecture costs as much again, hence one)."""
    import subprocess

    nvcc = working("nvcc")
    if nvcc is None or working("gcc") is None:  # nvcc preprocesses with the host's gcc
        pytest.skip("nvcc, or the host compiler it needs, is not on PATH")
    sigs = {"attention_simple": "const act_t*, const int*, const int*, int, int, float, int, "
                                "act_t*",
            "attention_mma": "const half_t*, const int*, const int*, int, int, float, int, "
                             "half_t*"}
    par = {"attention_simple": "const act_t*, const int*, const int*, const int*, const int*, "
                               "const int*, int, int, float, int, act_t*",
           "attention_mma": "const half_t*, const int*, const int*, const int*, const int*, "
                            "const int*, int, int, float, int, half_t*"}
    for half in (True, False):
        lines = ['#include "%s"' % kernels.SOURCE]
        for variant, table in (("", sigs), ("_par", par)):
            for name in kernels.name_expressions(half, HEAD_DIMS, mma=True, variant=variant):
                base = name.split("<")[0][:-len(variant) or None]
                lines.append("template __global__ void %s(%s);" % (name, table[base]))
        src = tmp_path / ("inst_%s.cu" % ("f16" if half else "f32"))
        src.write_text("\n".join(lines) + "\n")
        for arch in ("sm_90",):
            run = subprocess.run([nvcc, "-arch=" + arch, "-ptx", "-o", str(tmp_path / "k.ptx"),
                                  str(src)] + list(kernels.options(half)),
                                 capture_output=True, text=True, timeout=600)
            assert run.returncode == 0 and "warning" not in run.stderr, run.stderr
