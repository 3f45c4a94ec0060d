"""kime._cpu._bgemm (csrc/bgemm.c): the BF16 GEMM with FP32 accumulation, against float64 NumPy.

Exactness: with A and W rounded to bfloat16 in NumPy (nearest even, as the kernel), every epilogue
matches the float64 product of the rounded operands within FP32's sum error, over sizes 0, 1, odd
and the bucket limit; the rounding itself is bit-exact, on the weights (packing) and on the
activations (the kernel's A packing), for any float32. Accuracy: against the unrounded float64
product, within bfloat16's rounding. Determinism: bits independent of the thread count and of
the batch a row is computed in. Each x86 kernel set this CPU runs is tested in turn: AVX512_BF16's
vdpbf16ps and, where the CPU has AMX-BF16, the tdpbf16ps tiles (KIME_BGEMM=avx512bf16 picks the
former). Where the CPU (or KIME_ISA) lacks AVX512_BF16, the kernel tests skip and the refusal is
what is tested.
"""
from __future__ import annotations

import platform

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from kime._cpu import _bgemm, _gemm
from kime.buckets import BUCKETS

from ..tolerances import BF16
from . import reference
from .reference import bf16, bf16_bits

ARM64 = platform.machine().lower() in ("aarch64", "arm64")
# the packed layout (bgemm.h): lanes per panel and k per group; x86 pairs of k in 32 lanes,
# aarch64 groups of 4 k (column pairs) in 8 lanes
NR, KG = (8, 4) if ARM64 else (32, 2)
EPILOGUES = ["store", "accum", "gelu", "relu", "geglu"]
MS = [0, 1, 2, 7, 13, 14, 15, 64, 333]
KS = [0, 1, 2, 3, 17, 64, 768]
NS = [1, 5, 31, 32, 33, 96, 100]

needs_bf16 = pytest.mark.skipif(
    _bgemm.missing() is not None,
    reason="the BF16 GEMM does not run here (missing: %s)" % _bgemm.missing())
# groups a panel holds for K = 1: x86 pads K to 16 pairs (an AMX tile's rows), aarch64 to 4
GROUPS_K1 = 1 if ARM64 else 16
# the kernel sets, and the KIME_BGEMM value that runs each (None: the default pick)
KERNEL_SETS = {"bfmmla": None} if ARM64 else {"amx-bf16": None, "avx512bf16": "avx512bf16"}


@pytest.fixture(params=list(KERNEL_SETS))
def kernel_set(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs the test under one kernel set, skipping those this CPU does not run."""
    env = KERNEL_SETS[request.param]
    if env is None:
        monkeypatch.delenv("KIME_BGEMM", raising=False)
    else:
        monkeypatch.setenv("KIME_BGEMM", env)
    if _bgemm.kernels() != request.param:
        pytest.skip("%s does not run here (%s does)" % (request.param, _bgemm.kernels()))
    return str(request.param)


@pytest.fixture(autouse=True, scope="module")
def serial_blas():
    """The float64 references are small: BLAS threads only wait on a busy machine."""
    with threadpool_limits(1):
        yield


@needs_bf16
def test_matches_float64_of_the_rounded_operands(kernel_set: str) -> None:
    """Every epilogue, with and without bias, over M x K x N, sizes 0 and 1 and odd tails
    included (GEGLU takes the even N rows): the float64 product of bf16(A) and bf16(W), within
    FP32's sum error, since products of two bfloat16 are exact in FP32."""
    rng = np.random.default_rng(1)
    for K in KS:
        for N in NS:
            W = rng.standard_normal((N, K), dtype=np.float32)
            bias = rng.standard_normal(N, dtype=np.float32)
            G = N - N % 2
            packed = {False: _bgemm.pack(W), True: _bgemm.pack(W[:G], geglu=True)}
            W64 = bf16(W).astype(np.float64)
            for M in MS:
                A = rng.standard_normal((M, K), dtype=np.float32)
                C0 = rng.standard_normal((M, N), dtype=np.float32)
                A64 = bf16(A).astype(np.float64)
                x0, mag0 = A64 @ W64.T, np.abs(A64) @ np.abs(W64).T
                for b in (None, bias):
                    x, mag = (x0, mag0) if b is None else (x0 + b, mag0 + np.abs(b))
                    for epilogue in EPILOGUES:
                        geglu = epilogue == "geglu"
                        if geglu and G == 0:
                            continue
                        n = G if geglu else N
                        out = C0.copy() if epilogue == "accum" else None
                        got = _bgemm.gemm(A, packed[geglu], n, K,
                                          bias=None if b is None else b[:n], epilogue=epilogue,
                                          out=out, threads=1 + (M == 333))
                        assert out is None or got is out
                        want, tol_mag = reference.epilogue_and_magnitude(
                            x[:, :n], mag[:, :n], epilogue, C0.astype(np.float64))
                        reference.check_gemm(got, want, tol_mag, max(K, 1),
                              f"{epilogue} bias={b is not None} M={M} K={K} N={n}")


@needs_bf16
def test_bucket_limit_rows(kernel_set: str) -> None:
    """The largest bucket's token count as M, on two threads (rows split between them)."""
    rng = np.random.default_rng(2)
    M, K, N = BUCKETS[-1], 67, 45
    A = rng.standard_normal((M, K), dtype=np.float32)
    W = rng.standard_normal((N, K), dtype=np.float32)
    got = _bgemm.gemm(A, _bgemm.pack(W), N, K, threads=2)
    A64, W64 = bf16(A).astype(np.float64), bf16(W).astype(np.float64)
    reference.check_gemm(got, A64 @ W64.T, np.abs(A64) @ np.abs(W64).T, K, "bucket limit")


@needs_bf16
def test_close_to_the_unrounded_product(kernel_set: str) -> None:
    """Against float64 of the FP32 operands: bfloat16's rounding of A and W, and FP32's sums."""
    rng = np.random.default_rng(3)
    for M, K, N in ((1, 768, 100), (29, 1152, 33), (64, 3, 7)):
        A = rng.standard_normal((M, K), dtype=np.float32)
        W = rng.standard_normal((N, K), dtype=np.float32)
        got = _bgemm.gemm(A, _bgemm.pack(W), N, K).astype(np.float64)
        want = A.astype(np.float64) @ W.T.astype(np.float64)
        mag = np.abs(A).astype(np.float64) @ np.abs(W).T.astype(np.float64)
        assert (np.abs(got - want) <= BF16.rounding.atol * mag).all()


FLOATS = st.floats(width=32, allow_nan=True, allow_infinity=True, allow_subnormal=True)


@needs_bf16
@given(st.lists(FLOATS, min_size=1, max_size=40))
def test_activation_rounding_is_the_weights(values: list) -> None:
    """For any float32: the kernel's A packing (vcvtne2ps2bf16) rounds as the weight packing
    and the NumPy reference do. W = 1 makes the GEMM return bf16(A) exactly (zeros lose their
    sign in the FP32 sum, which starts at +0)."""
    x = np.asarray(values, np.float32)
    got = _bgemm.gemm(x[:, None], _bgemm.pack(np.ones((1, 1), np.float32)), 1, 1)[:, 0]
    want = bf16(x)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = ~np.isnan(want)
    assert np.array_equal(got[ok], want[ok])


@given(st.lists(FLOATS, min_size=1, max_size=40))
def test_weight_rounding_is_bit_exact(values: list) -> None:
    """Packing is portable C: its bfloat16 bits are the reference's for any float32, NaN
    payloads and signed zeros included. One column per row of W, K = 1: lane j of the first
    panel holds row j in its low half."""
    x = np.asarray(values, np.float32)
    packed = _bgemm.pack(x[:, None])
    lanes = packed.reshape(-1, GROUPS_K1, NR, KG)[:, 0, :, 0].reshape(-1)[:x.size]
    assert np.array_equal(lanes, bf16_bits(x))


def test_packing_layout_and_size() -> None:
    """Half the bytes of the FP32 panels (for K a multiple of 32), deterministic, 64-byte aligned,
    and the GEGLU pairing of the FP32 GEMM: lanes 0-15 the "a" rows, 16-31 the matching gate
    rows; past K, zeros (x86 pads K to 16 pairs, an AMX tile's rows)."""
    rng = np.random.default_rng(4)
    W = rng.standard_normal((70, 46), dtype=np.float32)
    W64 = rng.standard_normal((70, 64), dtype=np.float32)
    for geglu in (False, True):
        first = _bgemm.pack(W, geglu=geglu)
        assert first.ctypes.data % 64 == 0
        assert np.array_equal(first, _bgemm.pack(W.copy(), geglu=geglu))
        fp32 = _gemm.pack(W64, isa=_gemm.isa_detect(), geglu=geglu)
        if not ARM64 and _gemm.isa_detect() == 2:  # the AVX-512 panels are 32 wide too
            assert _bgemm.pack(W64, geglu=geglu).nbytes * 2 == fp32.nbytes
    # 23 pairs of k padded to 32 per panel on x86, 12 groups of 4 on aarch64
    groups = -(-46 // KG) if ARM64 else 32
    panel = _bgemm.pack(W, geglu=True).reshape(-1, groups, NR, KG)
    assert np.array_equal(panel[0, :, 3, :].reshape(-1)[:46], bf16_bits(W[3]))
    assert np.array_equal(panel[0, :, NR // 2 + 3, :].reshape(-1)[:46], bf16_bits(W[35 + 3]))
    assert (panel.transpose(0, 2, 1, 3).reshape(panel.shape[0], NR, -1)[:, :, 46:] == 0).all()
    odd = _bgemm.pack(np.ascontiguousarray(W[:, :45])).reshape(-1, groups, NR, KG)
    # K = 45: every k past 44 is zero padding
    assert (odd.transpose(0, 2, 1, 3).reshape(odd.shape[0], NR, -1)[:, :, 45:] == 0).all()


@needs_bf16
@pytest.mark.parametrize("epilogue,N,with_bias", [("store", 100, False), ("accum", 96, True),
                                                   ("gelu", 33, True), ("geglu", 100, True)],
                         ids=["store", "accum", "gelu", "geglu"])
def test_bits_independent_of_threads_and_batch(epilogue: str, N: int, with_bias: bool,
                                               kernel_set: str) -> None:
    rng = np.random.default_rng(11)
    K = 768
    W = rng.standard_normal((N, K), dtype=np.float32)
    packed = _bgemm.pack(W, geglu=epilogue == "geglu")
    bias = rng.standard_normal(N, dtype=np.float32) if with_bias else None
    A = rng.standard_normal((333, K), dtype=np.float32)
    C0 = rng.standard_normal((333, N // 2 if epilogue == "geglu" else N), dtype=np.float32)

    def run(rows: slice, threads: int) -> np.ndarray:
        out = C0[rows].copy() if epilogue == "accum" else None
        return _bgemm.gemm(A[rows], packed, N, K, bias=bias, epilogue=epilogue, out=out,
                           threads=threads)

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


@needs_bf16
def test_refuses_bad_arguments() -> None:
    W = np.ones((4, 3), np.float32)
    packed = _bgemm.pack(W)
    A = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="packed"):
        _bgemm.gemm(A, packed[:-1], 4, 3)
    with pytest.raises(ValueError, match="accum"):
        _bgemm.gemm(A, packed, 4, 3, epilogue="accum")
    with pytest.raises(ValueError, match="epilogue"):
        _bgemm.gemm(A, packed, 4, 3, epilogue="silu")
    with pytest.raises(ValueError, match="A must"):
        _bgemm.gemm(np.ones((2, 5), np.float32), packed, 4, 3)
    with pytest.raises(ValueError, match="even"):
        _bgemm.pack(np.ones((3, 3), np.float32), geglu=True)


def test_capped_isa_refuses_to_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below AVX-512 (KIME_ISA=avx2; on aarch64 below bf16, KIME_ISA=i8mm) the kernels never
    run: `missing` says why and `gemm` refuses instead of executing an instruction the ISA may
    lack. Packing still works."""
    top = 4 if ARM64 else 2  # the level the kernels need: bf16, or avx512
    monkeypatch.setenv("KIME_ISA", "i8mm" if ARM64 else "avx2")
    assert _bgemm.missing() == ("isa" if _bgemm.missing(top) is None else _bgemm.missing(top))
    packed = _bgemm.pack(np.ones((2, 2), np.float32))
    with pytest.raises(RuntimeError, match="missing: %s" % _bgemm.missing()):
        _bgemm.gemm(np.ones((1, 2), np.float32), packed, 2, 2)


@needs_bf16
def test_epilogues_are_the_fp32_gemms(kernel_set: str) -> None:
    """The BF16 tile goes through the FP32 GEMM's store: with bfloat16-exact inputs (K = 1,
    W = 1, A already bfloat16) both GEMMs give the same bits for every epilogue."""
    x = bf16(np.linspace(-8, 8, 4099, dtype=np.float32))[:, None]
    ones = np.ones((4, 1), np.float32)
    isa = _gemm.isa_detect()
    for epilogue in ("store", "gelu", "relu", "geglu"):
        a = _bgemm.gemm(x, _bgemm.pack(ones, geglu=epilogue == "geglu"), 4, 1, epilogue=epilogue)
        b = _gemm.gemm(x, _gemm.pack(ones, isa=isa, geglu=epilogue == "geglu"), 4, 1,
                       epilogue=epilogue, isa=isa)
        assert np.array_equal(a, b), epilogue
