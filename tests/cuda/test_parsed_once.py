"""Device and precision are parsed and checked once, where the caller's strings enter
(`kime.Kime`, `kime.load`), and travel down typed: CuPy is asked whether the GPU runs once per
load, not once per layer. Runs on any machine: CuPy's import is stood in for, and the CUDA
backend runs on the emulator."""
from __future__ import annotations

import types
import warnings

import pytest

import kime
from kime._cuda import backend as cuda_backend
from kime._cuda import device
from kime.backend import Device, Precision
from kime.factory import Target, check_options

from .emulator import FakeCupy, FakeGemm, FakeKernels

QUESTION = {"state": "the printer is on fire", "questions": {
    "urgent": {"type": "noul", "instructions": "Is this urgent?"}}}


@pytest.fixture
def emulated_gpu(monkeypatch):
    """One emulated GPU; returns the list that records each time CuPy is imported to check it."""
    opened = []
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, driverGetVersion=lambda: 12090,
                                    runtimeGetVersion=lambda: 12090)
    checked = types.SimpleNamespace(__version__="13.3.0",
                                    cuda=types.SimpleNamespace(runtime=runtime))

    def import_cupy():
        opened.append(1)
        return checked

    fake = FakeCupy()
    monkeypatch.setattr(device, "import_cupy", import_cupy)
    monkeypatch.setattr(cuda_backend, "toolkit", lambda ordinal: (fake, None))
    monkeypatch.setattr(cuda_backend, "Kernels", FakeKernels)
    monkeypatch.setattr(cuda_backend, "Gemm",
                        lambda cublas, ptr, half: FakeGemm(cublas, ptr, half, fake))
    return opened


@pytest.mark.parametrize("asked", ["cuda", "auto", "cuda:0"])
def test_an_engine_asks_cupy_once(emulated_gpu, tiny_path, asked):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = kime.Kime(str(tiny_path), device=asked, precision="f32")
    assert str(engine.backend.device) == "cuda:0" and engine.backend.precision is Precision.F32
    assert len(emulated_gpu) == 1
    answer = engine.decide(QUESTION).answers["urgent"]
    assert answer.probabilities.shape == (2,) and abs(float(answer.probabilities.sum()) - 1) < 1e-5


def test_laya_load_asks_cupy_once(emulated_gpu, tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(str(tiny_path), device="cuda")
    assert str(agent.device) == "cuda" and agent.cpu_fallback_count == 0
    assert agent.engine.backend.precision is Precision.F16
    assert len(emulated_gpu) == 1


def test_a_checked_target_is_taken_as_it_is(emulated_gpu):
    target = check_options("cuda", None, 0)
    assert target == Target(Device("cuda", 0), Precision.F16) and len(emulated_gpu) == 1
    assert check_options(target, None, 0) is target
    assert check_options(target, "fp16", 0) is target
    assert len(emulated_gpu) == 1
    with pytest.raises(kime.BadOption, match="contradicts the Target's 'f16'"):
        check_options(target, "f32", 0)
    with pytest.raises(kime.BadOption, match="threads"):
        check_options(target, None, -1)
    # A hand-made Target that still says `auto` is resolved like the strings would be.
    made = check_options(Target(Device("auto"), Precision.AUTO), None, 0)
    assert made == target and len(emulated_gpu) == 2  # `auto`'s probe is the one check
