"""Every kernel launch a plan lowers to (its embedding mode's too), against the kernel's
parameter list in kernels.cu: the argument count, each scalar's exact NumPy type (CuPy passes a
Python float as a double and a Python int as a 64-bit integer, so a mismatch shifts every later
argument), and the element type of the device array behind each pointer. Also that every grid
covers the plan's slots. Runs the real `Kernels` front over the emulated backend (emulator.py)
with a stand-in for NVRTC: no GPU."""
from __future__ import annotations

import re
import warnings
from typing import Any, Dict, List, Tuple

import numpy as np
import pytest

from kime._cuda import backend as cuda_backend
from kime._cuda import kernels as cuda_kernels
from kime._cuda.kernels import Launch
from kime.checkpoint import load_checkpoint

from ..golden_cases import DATA
from ..paths import GOLDENS
from .emulator import FakeCupy, FakeGemm

SCALARS = {"int": np.int32, "long long": np.int64, "float": np.float32}


def _signatures() -> Dict[str, List[str]]:
    """kernel name -> its parameter types, e.g. ['const float*', 'int']."""
    out = {}
    for m in re.finditer(r"__global__ void(?: __launch_bounds__\([^)]*\))? (\w+)\(([^)]*)\)",
                         cuda_kernels.source()):
        params = [" ".join(p.split()) for p in m.group(2).split(",")]
        out[m.group(1)] = [p.rsplit(" ", 1)[0].replace("const ", "") for p in params]
    return out


class _Module:
    def __init__(self, code: str, options: Tuple[str, ...], name_expressions: Tuple[str, ...]):
        self.names = name_expressions

    def get_function(self, name: str) -> str:
        return name


@pytest.fixture(scope="module", params=sorted(DATA["checkpoints"]))
def checkpoint(request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_checkpoint(str(GOLDENS / DATA["checkpoints"][request.param]["path"]))


@pytest.mark.parametrize("precision,attention", [("f16", "auto"), ("f16", "simple"),
                                                 ("f32", "auto")])
def test_launch_arguments_match_the_kernels(checkpoint, monkeypatch, precision, attention):
    fake = FakeCupy()
    fake.RawModule = _Module  # type: ignore[attr-defined]
    monkeypatch.setattr(cuda_backend, "toolkit", lambda ordinal: (fake, None))
    monkeypatch.setattr(cuda_backend, "Gemm",
                        lambda cublas, ptr, half: FakeGemm(cublas, ptr, half, fake))
    backend = cuda_backend.CudaBackend(checkpoint, precision=precision, attention=attention)
    plan = backend.plan(288)
    embedding = plan.embed_mode()  # the embedding mode's launches and buffers too
    act = np.float16 if backend.half else np.float32
    pointers = {"float": np.float32, "int": np.int32, "act_t": act, "half_t": np.float16}
    arrays: List[Any] = list(backend.weights.arrays.values()) + plan.device_arrays
    spans = [(a.data.ptr, a.data.ptr + a.nbytes, a.dtype) for a in arrays]

    def dtype_at(address: int) -> Any:
        found = [dt for lo, hi, dt in spans if lo <= address < hi]
        assert found, "no device array at %#x" % address
        return found[0]

    signatures = _signatures()
    d, cap = checkpoint.hidden, plan.cap
    launches = [op for op in plan.ops + embedding.ops if isinstance(op, Launch)]
    names = {op.name.split("<")[0] for op in launches}
    assert names == set(signatures) - {"attention_simple" if backend.compiled.use_mma
                                       else "attention_mma"}
    for op in launches:
        params = signatures[op.name.split("<")[0]]
        assert len(op.args) == len(params), op
        for i, (arg, ctype) in enumerate(zip(op.args, params)):
            where = "%s argument %d (%s)" % (op.name, i, ctype)
            if ctype.endswith("*"):
                assert type(arg) is np.uint64, where
                if int(arg):
                    assert dtype_at(int(arg)) == pointers[ctype[:-1]], where
            else:
                assert type(arg) is SCALARS[ctype], "%s: got %s" % (where, type(arg).__name__)
        threads = op.block[0]
        assert threads % 32 == 0 and threads <= 1024, op
        if op.name.startswith("attention_mma"):
            assert op.grid[0] * (threads // 32) * 16 >= cap, op
        elif op.name.startswith("attention_simple"):
            assert op.grid[0] * threads >= cap, op
        elif op.name in ("embed_norm", "add_norm", "final_norm", "gather_norm"):
            assert op.grid == (cap,) and d <= threads * cuda_kernels.MAX_PER_THREAD, op
        elif op.name in ("rope", "act_head"):
            assert op.grid == (cap,), op
        elif op.name == "mean_pool":
            assert op.grid == (cap // 16,) and op.args[3] == cap, op
        elif op.name == "score":
            assert op.grid[0] * (threads // 32) >= cap, op


@pytest.mark.parametrize("d", [768, 1024, 2048, 4096])
def test_a_row_fits_the_registers_of_a_norm_block(d):
    block = cuda_kernels.Kernels.norm_block(d)
    assert block % 32 == 0 and d <= block * cuda_kernels.MAX_PER_THREAD


def test_max_per_thread_matches_the_source():
    src = cuda_kernels.source()
    assert "#define MAX_PER_THREAD %d " % cuda_kernels.MAX_PER_THREAD in src
    assert "#define ACT_MAX %d " % cuda_kernels.ACT_MAX in src
