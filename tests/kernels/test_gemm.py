"""kime._cpu._gemm (csrc/gemm.c) against float64 NumPy references, on every FP32 micro-kernel this
CPU has: the lowest level of each kernel `_gemm.kernel_name` names (on aarch64 the dotprod, i8mm and
bf16 levels run the neon level's FP32 kernel, so they are not run again).

Accuracy: each epilogue over a grid of awkward shapes (tails in M, K and N), with and without
bias. Determinism: bits independent of the thread count and of which batch (and so which tile) a
row is computed in; packing is a pure function of the weight.
"""
from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from kime._cpu import _gemm

from ..tolerances import FP32
from . import reference

ISAS = [i for i in range(_gemm.isa_detect() + 1)
        if _gemm.kernel_name(i) not in {_gemm.kernel_name(j) for j in range(i)}]
EPILOGUES = ["store", "accum", "gelu", "relu", "geglu"]
MS = [1, 2, 7, 13, 64, 333]
KS = [1, 3, 17, 64, 768]
NS = [1, 5, 31, 32, 33, 96, 100]

@pytest.fixture(autouse=True, scope="module")
def serial_blas():
    """The float64 references are small: BLAS threads only wait on a busy machine."""
    with threadpool_limits(1):
        yield


@pytest.mark.parametrize("isa", ISAS, ids=[_gemm.isa_name(i) for i in ISAS])
def test_matches_float64(isa: int) -> None:
    """Every epilogue, with and without bias, over M x K x N (GEGLU takes the even N rows)."""
    rng = np.random.default_rng(isa)
    for K in KS:
        for N in NS:
            W = rng.standard_normal((N, K), dtype=np.float32)
            bias = rng.standard_normal(N, dtype=np.float32)
            G = N - N % 2  # GEGLU rows: W[:G], so odd N still covers a GEGLU tail
            packed = {False: _gemm.pack(W, isa=isa), True: _gemm.pack(W[:G], isa=isa, geglu=True)}
            for M in MS:
                A = rng.standard_normal((M, K), dtype=np.float32)
                C0 = rng.standard_normal((M, N), dtype=np.float32)
                x0 = A.astype(np.float64) @ W.T.astype(np.float64)
                mag0 = np.abs(A).astype(np.float64) @ np.abs(W).T.astype(np.float64)
                for b in (None, bias):
                    x, mag = (x0, mag0) if b is None else (x0 + b, mag0 + np.abs(b))
                    for epilogue in EPILOGUES:
                        geglu = epilogue == "geglu"
                        if geglu and G == 0:
                            continue
                        n = G if geglu else N
                        out = C0.copy() if epilogue == "accum" else None
                        got = _gemm.gemm(A, packed[geglu], n, K, bias=None if b is None else b[:n],
                                         epilogue=epilogue, out=out, threads=1 + (M == 333),
                                         isa=isa)
                        assert out is None or got is out
                        want, tol_mag = reference.epilogue_and_magnitude(
                            x[:, :n], mag[:, :n], epilogue, C0.astype(np.float64))
                        reference.check_gemm(got, want, tol_mag, K,
                              f"{epilogue} bias={b is not None} M={M} K={K} N={n}")


@pytest.mark.parametrize("isa", ISAS, ids=[_gemm.isa_name(i) for i in ISAS])
def test_gelu_epilogue_is_erf_exact(isa: int) -> None:
    """K=1 and W=1 make the GEMM exact, isolating the GELU: within a few ulp of the float64
    formula (plus the 1 + erf cancellation for negative x, which torch's float formula shares)."""
    x = np.concatenate([np.linspace(-12, 12, 200001), [0.0, -0.0, 1e-30, -1e-30, 50, -50]])
    A = x.astype(np.float32)[:, None]
    got = _gemm.gemm(A, _gemm.pack(np.ones((3, 1), np.float32), isa=isa), 3, 1,
                     epilogue="gelu", isa=isa)
    want = reference.gelu(A[:, 0].astype(np.float64))
    tol = FP32.gelu_epilogue.rtol * np.abs(want) + FP32.gelu_epilogue.atol * np.abs(x) + 1e-45
    for j in range(3):
        assert (np.abs(got[:, j] - want) <= tol).all()
    one = _gemm.pack(np.ones((1, 1), np.float32), isa=isa)
    for epilogue in ("gelu", "relu"):  # NaN propagates, as in torch
        nan = np.full((1, 1), np.nan, np.float32)
        assert np.isnan(_gemm.gemm(nan, one, 1, 1, epilogue=epilogue, isa=isa)).all()


@pytest.mark.parametrize("isa", ISAS, ids=[_gemm.isa_name(i) for i in ISAS])
def test_strided_rows(isa: int) -> None:
    rng = np.random.default_rng(7)
    M, K, N = 29, 40, 37
    big_a = rng.standard_normal((M, K + 9), dtype=np.float32)
    W = rng.standard_normal((N, K), dtype=np.float32)
    big_c = np.full((M, N + 5), 7.0, np.float32)
    _gemm.gemm(big_a[:, 3:3 + K], _gemm.pack(W, isa=isa), N, K, out=big_c[:, 2:2 + N], isa=isa)
    A = big_a[:, 3:3 + K].astype(np.float64)
    reference.check_gemm(big_c[:, 2:2 + N], A @ W.T, np.abs(A) @ np.abs(W).T, K, "strided")
    assert (big_c[:, :2] == 7).all() and (big_c[:, 2 + N:] == 7).all()


DET_CASES = [("store", 100, False), ("accum", 96, True), ("gelu", 33, True), ("geglu", 100, True),
             ("relu", 31, False)]


@pytest.mark.parametrize("isa", ISAS, ids=[_gemm.isa_name(i) for i in ISAS])
@pytest.mark.parametrize("epilogue,N,with_bias", DET_CASES, ids=[c[0] for c in DET_CASES])
def test_bits_independent_of_threads_and_batch(isa: int, epilogue: str, N: int,
                                               with_bias: bool) -> None:
    rng = np.random.default_rng(11)
    K = 768
    W = rng.standard_normal((N, K), dtype=np.float32)
    packed = _gemm.pack(W, isa=isa, geglu=epilogue == "geglu")
    bias = rng.standard_normal(N, dtype=np.float32) if with_bias else None
    A = rng.standard_normal((333, K), dtype=np.float32)
    C0 = rng.standard_normal((333, N // 2 if epilogue == "geglu" else N), dtype=np.float32)

    def run(rows: slice, threads: int) -> np.ndarray:
        out = C0[rows].copy() if epilogue == "accum" else None
        return _gemm.gemm(A[rows], packed, N, K, bias=bias, epilogue=epilogue, out=out,
                          threads=threads, isa=isa)

    full = run(slice(0, 333), 1)
    # 333 rows are few enough that the threads split the output panels and pack A together
    # (5 threads leave one without a panel, which still packs its share)
    for threads in (2, 3, 5):
        assert np.array_equal(run(slice(0, 333), threads), full)
    for r in (0, 5, 13, 14, 100, 331, 332):
        for size in (1, 7, 64):
            start = min(max(r - size // 2, 0), 333 - size)  # r lands mid-batch, in another tile
            for threads in (1, 2):
                part = run(slice(start, start + size), threads)
                assert np.array_equal(part[r - start], full[r]), (r, size, threads)


@pytest.mark.parametrize("isa", ISAS, ids=[_gemm.isa_name(i) for i in ISAS])
def test_packing_is_deterministic(isa: int) -> None:
    W = np.random.default_rng(3).standard_normal((70, 45), dtype=np.float32)
    for geglu in (False, True):
        first = _gemm.pack(W, isa=isa, geglu=geglu)
        assert first.ctypes.data % 64 == 0
        assert np.array_equal(first, _gemm.pack(W.copy(), isa=isa, geglu=geglu))


def test_refuses_bad_arguments() -> None:
    W = np.ones((4, 3), np.float32)
    packed = _gemm.pack(W)
    A = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="packed"):
        _gemm.gemm(A, packed[:-1], 4, 3)
    with pytest.raises(ValueError, match="accum"):
        _gemm.gemm(A, packed, 4, 3, epilogue="accum")
    with pytest.raises(ValueError, match="epilogue"):
        _gemm.gemm(A, packed, 4, 3, epilogue="silu")
    with pytest.raises(ValueError, match="A must"):
        _gemm.gemm(np.ones((2, 5), np.float32), packed, 4, 3)
    with pytest.raises(ValueError, match="isa"):
        _gemm.gemm(A, packed, 4, 3, isa=_gemm.isa_detect() + 1)
    with pytest.raises(ValueError, match="even"):
        _gemm.pack(np.ones((3, 3), np.float32), geglu=True)
