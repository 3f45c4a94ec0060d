"""Device selection: `auto`, `cuda`, `cuda:N`, and one clear error for each reason a GPU cannot
run. CuPy is stood in for (kime._cuda.device.import_cupy), so these run on any machine; the last
tests ask a real GPU."""
from __future__ import annotations

import types
import warnings

import pytest

import kime
from kime import errors, factory
from kime._cuda import device
from kime.backend import Device, Precision
from kime.factory import Target

CPU = Device("cpu")
F16 = Precision.F16


class _RuntimeError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(text)
        self.status = status


def _fake_cupy(count=1, status=None, driver=12090, runtime=12090, version="13.3.0"):
    def get_device_count():
        if status is not None:
            raise _RuntimeError(status, "cudaError %d" % status)
        return count

    rt = types.SimpleNamespace(getDeviceCount=get_device_count, driverGetVersion=lambda: driver,
                               runtimeGetVersion=lambda: runtime)
    return types.SimpleNamespace(__version__=version, cuda=types.SimpleNamespace(runtime=rt))


def _stand_in(monkeypatch, cupy=None, error=None):
    def load():
        if error is not None:
            raise error
        return cupy
    monkeypatch.setattr(device, "import_cupy", load)


def test_no_cupy_is_its_own_error_and_auto_runs_on_the_cpu(monkeypatch, tiny_path):
    _stand_in(monkeypatch, error=ModuleNotFoundError("No module named 'cupy'", name="cupy"))
    with pytest.raises(errors.CupyMissing, match="pip install 'kime\\[cuda\\]'") as info:
        kime.Kime(str(tiny_path), device="cuda")
    assert isinstance(info.value, kime.Unsupported) and "device='cuda:0'" in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = kime.Kime(str(tiny_path), device="auto", threads=1)
    assert engine.device.startswith("cpu")


def test_cupy_for_another_cuda_major(monkeypatch):
    _stand_in(monkeypatch, cupy=_fake_cupy(status=35, driver=11040, runtime=12090))
    with pytest.raises(errors.CudaMismatch) as info:
        factory.check_options("cuda", None, 0)
    text = str(info.value)
    assert "CUDA 12.9" in text and "up to 11.4" in text and "cupy-cuda12x" in text
    assert factory.resolve_auto(F16) == CPU


def test_cupy_that_does_not_load_its_cuda_libraries(monkeypatch):
    _stand_in(monkeypatch, error=ImportError("libcudart.so.13: cannot open shared object file"))
    with pytest.raises(errors.CudaMismatch, match="libcudart.so.13"):
        factory.check_options("cuda:0", "f16", 0)


@pytest.mark.parametrize("fake", [_fake_cupy(count=0), _fake_cupy(status=100),
                                  _fake_cupy(status=35, driver=0)],
                         ids=["no-device", "cuda-no-device", "no-driver"])
def test_no_gpu(monkeypatch, fake):
    _stand_in(monkeypatch, cupy=fake)
    with pytest.raises(errors.NoGpu, match="device='cpu'"):
        factory.check_options("cuda", None, 0)
    assert factory.resolve_auto(F16) == CPU


def test_bad_ordinal_names_the_gpus_there_are(monkeypatch):
    _stand_in(monkeypatch, cupy=_fake_cupy(count=2))
    with pytest.raises(errors.BadDeviceOrdinal, match="2 GPUs \\(cuda:0 to cuda:1\\)") as info:
        factory.check_options("cuda:2", None, 0)
    assert isinstance(info.value, kime.BadOption) and isinstance(info.value, kime.Unsupported)
    assert factory.check_options("cuda:1", None, 0) == Target(Device("cuda", 1), F16)


def test_old_cupy_is_refused(monkeypatch):
    _stand_in(monkeypatch, cupy=_fake_cupy(version="12.3.0"))
    with pytest.raises(errors.CudaMismatch, match="too old"):
        factory.check_options("cuda", None, 0)


def test_int8_does_not_run_on_a_gpu(monkeypatch):
    _stand_in(monkeypatch, cupy=_fake_cupy())
    with pytest.raises(kime.Unsupported, match="int8"):
        factory.check_options("cuda", "int8", 0)
    assert factory.resolve_auto(Precision.INT8) == CPU
    assert factory.resolve_auto(F16) == Device("cuda", 0)


def test_cpu_never_asks_for_cupy(monkeypatch):
    _stand_in(monkeypatch, error=AssertionError("device='cpu' must not import CuPy"))
    assert factory.check_options("cpu", None, 1) == Target(CPU, Precision.F32)
    assert factory.check_options("cpu", "int8", 1) == Target(CPU, Precision.INT8)
    with pytest.raises(kime.Unsupported, match="f16") as refused:  # no FP16 kernels on the CPU
        factory.check_options("cpu", "f16", 1)
    # what it suggests instead runs here: 'bf16' only on a CPU with BF16
    assert ("'bf16'" in str(refused.value)) == (factory.bf16_missing() is None), refused.value


def test_a_build_without_its_kernels_still_refuses_f16_by_name(monkeypatch):
    """Options are checked before anything loads: where the compiled kernels do not import,
    BF16 is missing for that reason, and the refusal of 'f16' stays the refusal it is."""
    import sys

    import kime._cpu

    # what an extension that fails to import leaves: no module, no attribute on its package
    monkeypatch.setitem(sys.modules, "kime._cpu._bgemm", None)
    monkeypatch.delattr(kime._cpu, "_bgemm", raising=False)
    assert "compiled CPU kernels do not load" in factory.bf16_missing()
    with pytest.raises(kime.Unsupported, match="f16") as refused:
        factory.check_options("cpu", "f16", 1)
    assert "'bf16'" not in str(refused.value)


def test_import_kime_does_not_import_cupy():
    import subprocess
    import sys

    code = "import sys, kime; assert 'cupy' not in sys.modules and 'kime._cuda' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


# --- on a GPU -------------------------------------------------------------------------------


def test_a_real_bad_ordinal(gpu):
    count = gpu.cuda.runtime.getDeviceCount()
    with pytest.raises(errors.BadDeviceOrdinal):
        factory.check_options("cuda:%d" % count, None, 0)


def test_auto_picks_the_gpu(gpu, tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = kime.Kime(str(tiny_path), device="auto")
    assert engine.device.startswith("cuda:0")
