"""Every kernel launch a plan lowers to (its embedding mode's too), against the kernel's
parameter list in kernels.cu: the argument count, each scalar's exact NumPy type (CuPy passes a
Python float as a double and a Python int as a 64-bit integer, so a mismatch shifts every later
argument), and the element type of the device array behind each pointer. Also that every grid
covers the plan's slots, and that the parallel layout's lowering differs from the sequential
one only in the encoder's rope and attention. Runs the real `Kernels` front over the emulated
backend (emulator.py) with a stand-in for NVRTC: no GPU."""
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
    parallel = plan.lower_parallel()  # and the parallel layout's
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
    launches = [op for op in plan.ops + embedding.ops + parallel if isinstance(op, Launch)]
    names = {op.name.split("<")[0] for op in launches}
    unused = "attention_simple" if backend.compiled.use_mma else "attention_mma"
    assert names == set(signatures) - {unused, unused + "_par"}
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
        elif op.name in ("rope", "rope_pos", "act_head"):
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


def _emulated_plan(checkpoint, monkeypatch, precision, attention):
    fake = FakeCupy()
    fake.RawModule = _Module  # type: ignore[attr-defined]
    monkeypatch.setattr(cuda_backend, "toolkit", lambda ordinal: (fake, None))
    monkeypatch.setattr(cuda_backend, "Gemm",
                        lambda cublas, ptr, half: FakeGemm(cublas, ptr, half, fake))
    backend = cuda_backend.CudaBackend(checkpoint, precision=precision, attention=attention)
    return backend, backend.plan(288)


def _key(op: Any) -> Tuple[Any, ...]:
    return (op.name, op.grid, op.block, tuple((type(a), int(a) if isinstance(a, np.integer)
                                               else float(a)) for a in op.args))


@pytest.mark.parametrize("precision,attention", [("f16", "auto"), ("f16", "simple"),
                                                 ("f32", "auto")])
def test_the_parallel_lowering_changes_only_the_encoders_rope_and_attention(
        checkpoint, monkeypatch, precision, attention):
    backend, plan = _emulated_plan(checkpoint, monkeypatch, precision, attention)
    sequential = [_key(op) for op in plan.ops if isinstance(op, Launch)]
    assert not any(k[0] == "rope_pos" or "_par<" in k[0] for k in sequential)
    parallel = [op for op in plan.lower_parallel() if isinstance(op, Launch)]
    assert len(parallel) == len(sequential)
    f = plan.fields
    lo, pos, opt, shift = (np.uint64(f[n].data.ptr) for n in ("lo", "pos", "opt", "shift"))
    encoder_attention = len(checkpoint.graph.layers)
    changed = 0
    for seq, op in zip(sequential, parallel):
        if _key(op) == seq:
            continue
        changed += 1
        if op.name == "rope_pos":  # the lo pointer gives way to the position ids
            assert seq[0] == "rope" and op.args[4] == pos and seq[3][4] == (np.uint64, int(lo))
            assert [_key(op)[3][i] for i in (0, 1, 2, 3, 5, 6)] == [seq[3][i] for i in
                                                                 (0, 1, 2, 3, 5, 6)]
        else:  # the three fields after lo and hi, the rest as they were
            base, variant = op.name.split("<")
            assert base.endswith("_par") and seq[0] == base[:-4] + "<" + variant, op
            assert op.args[3:6] == (pos, opt, shift)
            assert _key(op)[3][:3] + _key(op)[3][6:] == seq[3], op
            assert (op.grid, op.block) == seq[1:3]
    # Every encoder layer's rope and attention, and nothing of the head (unmasked there).
    assert changed == 2 * encoder_attention
    head_attention = [op for op in parallel if op.name.startswith("attention")][
        encoder_attention:]
    assert len(head_attention) == len(checkpoint.graph.head)
    assert all("_par<" not in op.name for op in head_attention)


def test_a_sequential_plan_keeps_its_launches_after_a_parallel_batch(checkpoint, monkeypatch):
    backend, plan = _emulated_plan(checkpoint, monkeypatch, "f16", "auto")
    before = [_key(op) for op in plan.ops if isinstance(op, Launch)]
    assert plan.parallel_ops is None and plan.parallel_graph is None
    plan.lower_parallel()
    assert [_key(op) for op in plan.ops if isinstance(op, Launch)] == before
    assert plan.lower_parallel() is plan.parallel_ops  # lowered once
