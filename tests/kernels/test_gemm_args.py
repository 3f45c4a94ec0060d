"""The GEMM wrappers' argument checks (kime/_cpu/_gemm_args.pxd, shared by _gemm, _qgemm and
_bgemm): every wrapper refuses the same bad call with the same message, before any kernel runs,
and takes the same good ones (strided rows, a given `out` filled in place)."""
from __future__ import annotations

import numpy as np
import pytest

from kime._cpu import _bgemm, _gemm, _qgemm

# _bgemm.gemm refuses to run at all where AVX512_BF16 is missing; its checks run where it can.
RUNNABLE = [_gemm, _qgemm] + ([_bgemm] if _bgemm.missing() is None else [])
N, K, M = 6, 8, 3

BAD = [
    (dict(epilogue="nope"), "epilogue must be one of \\['accum', 'geglu', 'gelu', 'relu', "
                            "'store'\\], got 'nope'"),
    (dict(threads=0), "threads must be at least 1, got 0"),
    (dict(N=5, epilogue="geglu"), "geglu needs an even N, got 5"),
    (dict(A="columns"), "A must be \\[M, 8\\] float32 with unit column stride"),
    (dict(A="strided columns"), "A must be \\[M, 8\\] float32 with unit column stride"),
    (dict(bias=np.zeros(N - 1, np.float32)), "bias has 5 entries, need N=6"),
    (dict(epilogue="accum"), "accum adds into out: pass it"),
    (dict(out=np.zeros((M, N - 1), np.float32)),
     "out must be \\[3, 6\\] float32 with unit column stride"),
    (dict(out=np.zeros((M, 2 * N), np.float32)[:, ::2]),
     "out must be \\[3, 6\\] float32 with unit column stride"),
]


BAD_A = {"columns": np.zeros((M, K - 1), np.float32),  # K - 1 columns
         "strided columns": np.zeros((M, 2 * K), np.float32)[:, ::2]}


def _call(module, rng, **override):
    W = rng.standard_normal((N, K)).astype(np.float32)
    kw = dict(A=rng.standard_normal((M, K)).astype(np.float32), packed=module.pack(W), N=N, K=K)
    kw.update(override)
    A = BAD_A.get(kw.pop("A"), None) if isinstance(kw["A"], str) else kw.pop("A")
    return module.gemm(A, kw.pop("packed"), kw.pop("N"), kw.pop("K"), **kw)


@pytest.mark.parametrize("module", RUNNABLE, ids=lambda m: m.__name__.rsplit(".", 1)[1])
@pytest.mark.parametrize("override, message", BAD, ids=[m[:24] for _, m in BAD])
def test_every_wrapper_refuses_a_bad_call_alike(module, override, message):
    with pytest.raises(ValueError, match="^%s$" % message):
        _call(module, np.random.default_rng(0), **override)


@pytest.mark.parametrize("module", [_gemm, _qgemm, _bgemm], ids=["gemm", "qgemm", "bgemm"])
def test_every_wrapper_refuses_an_odd_geglu_weight(module):
    with pytest.raises(ValueError, match="^a GEGLU weight needs an even number of rows, got 5$"):
        module.pack(np.zeros((5, K), np.float32), geglu=True)


@pytest.mark.parametrize("module", [_gemm, _qgemm, _bgemm], ids=["gemm", "qgemm", "bgemm"])
def test_packed_weights_start_on_a_cache_line(module):
    W = np.random.default_rng(1).standard_normal((N, K)).astype(np.float32)
    for _ in range(4):  # a fresh allocation each time, so one lucky address proves nothing
        assert module.pack(W).ctypes.data % 64 == 0


@pytest.mark.parametrize("module", [_gemm, _qgemm], ids=["gemm", "qgemm"])
def test_isa_above_this_cpus_is_refused(module):
    best = module.isa_detect()
    with pytest.raises(ValueError, match="^isa %d is not available here \\(best: %d, %s\\)$"
                       % (best + 1, best, module.isa_name(best))):
        _call(module, np.random.default_rng(0), isa=best + 1)


@pytest.mark.parametrize("module", RUNNABLE, ids=lambda m: m.__name__.rsplit(".", 1)[1])
def test_a_good_call_with_strided_rows_fills_the_given_out(module):
    rng = np.random.default_rng(2)
    W = rng.standard_normal((N, K)).astype(np.float32)
    A = rng.standard_normal((M, 2 * K)).astype(np.float32)[:, :K]  # rows strided, columns not
    bias = rng.standard_normal(N).astype(np.float32)
    wide = np.full((M, 2 * N), np.nan, np.float32)
    out = wide[:, :N]
    got = module.gemm(A, module.pack(W), N, K, bias=bias, out=out)
    assert got is out
    want = A.astype(np.float64) @ W.T.astype(np.float64) + bias
    assert np.allclose(out, want, rtol=0.05, atol=0.1)  # INT8/BF16 rounding; FP32 is far closer
    assert np.isnan(wide[:, N:]).all()  # nothing past the view's columns was written
