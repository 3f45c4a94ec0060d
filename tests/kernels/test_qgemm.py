"""kime._cpu._qgemm (csrc/qgemm.c): the INT8 GEMM with fused dequantization, on every kernel set
("impl") this CPU runs, each forced in turn through KIME_QGEMM: portable, AVX2's vpmaddubsw,
AVX-VNNI's ymm vpdpbusd, AVX-512 VNNI's zmm vpdpbusd and AMX's tdpbusd tiles. A CPU without
AVX-VNNI but with AVX512-VL + VNNI runs the AVX-VNNI kernel's EVEX twin: the same code, another
encoding. On aarch64 the impls are portable, neon (smull/sadalp), sdot (dotprod) and smmla (i8mm).

Exactness: the raw INT32 sums equal an int64 NumPy product of A and W quantized in NumPy exactly
as the kernel does, bit for bit. Accuracy: the dequantized output and every epilogue against the
float64 product, within INT8 error. Determinism: bits independent of the thread count and of the
batch a row is computed in, and the same on every SIMD impl.
"""
from __future__ import annotations

import platform

import numpy as np
import pytest
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from kime._cpu import _qgemm

from ..tolerances import INT8
from . import reference
from .reference import quantize_int8 as quantize

ARM64 = platform.machine().lower() in ("aarch64", "arm64")
IMPLS = ["portable", "neon", "sdot", "smmla"] if ARM64 else ["portable", "avx2", "avxvnni",
                                                             "vnni512", "amx"]
SIMD_IMPLS = IMPLS[1:]
EPILOGUES = ["store", "accum", "gelu", "relu", "geglu"]
MS = [1, 2, 5, 7, 13, 64, 333]
KS = [1, 3, 5, 17, 67, 768]
NS = [1, 5, 31, 33, 100]

@pytest.fixture(autouse=True, scope="module")
def serial_blas():
    with threadpool_limits(1):
        yield


def runs(impl: str) -> bool:
    """Whether KIME_QGEMM=impl (already set) runs that impl here, not a lesser one it is capped
    to; "avxvnni-evex" counts as "avxvnni"."""
    return _qgemm.impl_name().removesuffix("-evex") == impl


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """Forces one impl for the test (pack and run alike); returns its index, a seed."""
    monkeypatch.setenv("KIME_QGEMM", request.param)
    if not runs(request.param):
        pytest.skip("%s does not run here (this CPU or KIME_ISA lacks it); it runs %s"
                    % (request.param, _qgemm.impl_name()))
    return IMPLS.index(request.param)


def test_int32_bit_exact(impl: int) -> None:
    """Raw sums == int64 NumPy over odd K, N tails and M tails, plain and GEGLU-packed, with
    outliers (a row's max dominates) and all-zero rows, on 1, 2 and 3 threads."""
    rng = np.random.default_rng(100 + impl)
    for K in KS:
        for N in NS:
            W = rng.standard_normal((N, K), dtype=np.float32)
            W[0, 0] = 40.0  # an outlier row
            if N > 2:
                W[2] = 0.0  # a zero row: scale 0, q 0
            packed = _qgemm.pack(W)
            G = N - N % 2
            pg = _qgemm.pack(W[:G], geglu=True) if G else None
            for M in MS:
                A = rng.standard_normal((M, K), dtype=np.float32) * 3
                A[-1] = 0.0 if M > 1 else A[-1]
                want = reference.int8_sums(A, W)
                assert want.max(initial=0) < 2**31
                for threads in (1, 2, 3):
                    got = _qgemm.gemm_int32(A, packed, N, K, threads=threads)
                    assert np.array_equal(got, want), (M, K, N, threads)
                    if pg is not None:
                        got = _qgemm.gemm_int32(A, pg, G, K, geglu=True, threads=threads)
                        assert np.array_equal(got, want[:, :G]), ("geglu", M, K, G, threads)


def test_int32_long_k(impl: int) -> None:
    """A long odd K (sums far past int16, past 2^24) stays exact, 1 and 2 threads."""
    rng = np.random.default_rng(9)
    K, N, M = 4099, 37, 30
    W = rng.standard_normal((N, K), dtype=np.float32)
    A = rng.standard_normal((M, K), dtype=np.float32) + 0.5
    W[0] = np.abs(W[0])
    packed = _qgemm.pack(W)
    want = reference.int8_sums(A, W)
    for threads in (1, 2):
        assert np.array_equal(_qgemm.gemm_int32(A, packed, N, K, threads=threads), want)


def test_int32_exact_at_the_int16_edge(impl: int) -> None:
    """Rows and weights at the largest quantized values, where 16-bit partial sums can clip.

    Every pair of groups holds four |q_a| that sum to 258 (127 * 258 = 32766, the most two
    vpmaddubsw lanes may add in int16) or 259, alone and mixed in one tile, against weights of
    +-127, so every lane is as large as it gets: the sums must be the int64 ones. A kernel on
    unsigned activations (q + 128) clips these pairs in vpmaddubsw; one that added two groups'
    lanes in int16 under a bound off by one would wrap the 259 rows (checked on a build with
    such a kernel)."""
    K, N = 256, 16
    groups = K // 4
    edge = np.tile(np.array([127, 2, 127, 2], np.float32), groups)  # 127 + 2 + 127 + 2 = 258

    def over(row: np.ndarray, every: int) -> np.ndarray:
        row = row.copy()
        row[4 * np.arange(0, groups, every) + 1] = 3  # 259 in those pairs of groups
        row[4 * np.arange(0, groups, every) + 3] = 3
        return row

    rows = [edge, over(edge, 2), over(edge, 16), -edge, edge, -edge, edge, -edge,
            over(-edge, 32), over(edge, 64)]
    A = np.stack(rows)  # four rows mixing 258 and 259, four at 258 only, a short last tile
    W = np.full((N, K), 127.0, np.float32)
    W[N // 2:] = -127.0
    W[3, 5::4] = 64.0  # one column not at the edge
    want = reference.int8_sums(A, W)
    assert np.abs(want).max() > 2**15  # far past int16 overall
    packed = _qgemm.pack(W)
    for threads in (1, 2):
        got = _qgemm.gemm_int32(A, packed, N, K, threads=threads)
        assert np.array_equal(got, want), threads


def test_int32_short_request_shares_its_packing(impl: int) -> None:
    """Too few rows to split (a short request's): the threads split the panels and quantize
    the blocks of A together, one share each, meeting at a barrier per block. Several blocks
    (a long K makes them small) and thread counts that leave a thread without a panel or a
    tile stay exact."""
    rng = np.random.default_rng(21)
    for K, N, M in ((3071, 200, 190), (3071, 31, 29), (1152, 768, 182), (64, 40, 1)):
        W = rng.standard_normal((N, K), dtype=np.float32)
        A = rng.standard_normal((M, K), dtype=np.float32) * 2
        packed = _qgemm.pack(W)
        want = reference.int8_sums(A, W)
        for threads in (1, 2, 3, 5):
            got = _qgemm.gemm_int32(A, packed, N, K, threads=threads)
            assert np.array_equal(got, want), (M, K, N, threads)


def test_int32_at_the_k_limit(impl: int) -> None:
    """At qgemm.h's K limit the true sums still fit int32, but the VNNI impls' unsigned sums
    (q + 128) and their 128 * colsum compensation do not: both wrap, and the difference is
    exact."""
    K, N, M = 133143, 5, 3
    rng = np.random.default_rng(13)
    W = np.ones((N, K), np.float32)
    A = np.ones((M, K), np.float32)
    W[1] = A[1] = -1.0
    W[2:] = rng.standard_normal((N - 2, K), dtype=np.float32)
    A[2] = rng.standard_normal(K, dtype=np.float32)
    got = _qgemm.gemm_int32(A, _qgemm.pack(W), N, K, threads=2)
    assert np.array_equal(got, reference.int8_sums(A, W))
    assert got[0, 0] == 127 * 127 * K and got[0, 1] == -127 * 127 * K


def test_int32_extremes(impl: int) -> None:
    """Every product at +-127 * +-127 (the u8 255 and pair-saturation corners) stays exact."""
    K, N, M = 768, 33, 13
    rng = np.random.default_rng(5)
    W = np.where(rng.random((N, K)) < 0.5, -1.0, 1.0).astype(np.float32)
    A = np.where(rng.random((M, K)) < 0.5, -1.0, 1.0).astype(np.float32)
    A[0] = 1.0
    A[1] = -1.0
    W[0] = 1.0
    W[1] = -1.0
    packed = _qgemm.pack(W)
    got = _qgemm.gemm_int32(A, packed, N, K)
    assert np.array_equal(got, reference.int8_sums(A, W))
    assert got[0, 0] == 127 * 127 * K and got[1, 0] == -127 * 127 * K


def test_dequantized_close_to_fp32(impl: int) -> None:
    """store output == dequantized int reference (up to float32 rounding), and within INT8 error
    of the float64 product: |err| <= 2 * (1/254) * sqrt(K) * rms-ish magnitude bound."""
    rng = np.random.default_rng(impl)
    for K in (17, 67, 768):
        for N in (5, 33, 100):
            W = rng.standard_normal((N, K), dtype=np.float32)
            packed = _qgemm.pack(W)
            for M in (1, 13, 64):
                A = rng.standard_normal((M, K), dtype=np.float32)
                got = _qgemm.gemm(A, packed, N, K).astype(np.float64)
                _, sa = quantize(A)
                _, sw = quantize(W)
                deq = (reference.int8_sums(A, W) * sa[:, None].astype(np.float64)
                       * sw.astype(np.float64))
                assert np.allclose(got, deq, rtol=INT8.dequant.rtol,
                                   atol=INT8.dequant.atol * np.abs(deq).max())
                exact = A.astype(np.float64) @ W.T.astype(np.float64)
                # per-element rounding error of each factor is at most scale/2
                bound = (np.abs(A).max(1)[:, None] / 254 * np.abs(W).sum(1)[None, :]
                         + np.abs(W).max(1)[None, :] / 254 * np.abs(A).sum(1)[:, None]
                         + (np.abs(A).max(1)[:, None] * np.abs(W).max(1)[None, :]) / 254**2 * K)
                slack = INT8.rounding_slack
                assert (np.abs(got - exact) <= bound * (1 + slack.rtol) + slack.atol).all()
                rel = np.linalg.norm(got - exact) / np.linalg.norm(exact)
                assert rel < INT8.gemm_relative.rtol, rel


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_epilogues(impl: int, epilogue: str) -> None:
    """Each epilogue applied to the dequantized sums (the exact reference of what the kernel
    computes before the epilogue), with and without bias, on tails."""
    rng = np.random.default_rng(7)
    for K in (3, 67, 768):
        for N in (6, 34, 100):
            W = rng.standard_normal((N, K), dtype=np.float32)
            bias = rng.standard_normal(N, dtype=np.float32)
            geglu = epilogue == "geglu"
            packed = _qgemm.pack(W, geglu=geglu)
            for M in (1, 7, 64):
                A = rng.standard_normal((M, K), dtype=np.float32)
                C0 = rng.standard_normal((M, N // 2 if geglu else N), dtype=np.float32)
                _, sa = quantize(A)
                _, sw = quantize(W)
                deq = (reference.int8_sums(A, W) * sa[:, None].astype(np.float64)
                       * sw.astype(np.float64))
                for b in (None, bias):
                    x = deq if b is None else deq + b
                    out = C0.copy() if epilogue == "accum" else None
                    got = _qgemm.gemm(A, packed, N, K, bias=b, epilogue=epilogue, out=out)
                    want = reference.epilogue(x, epilogue, C0.astype(np.float64))
                    scale = np.abs(x).max() + (np.abs(C0).max() if epilogue == "accum" else 0)
                    if geglu:
                        scale = scale * scale
                    assert np.allclose(got, want, rtol=INT8.epilogue.rtol,
                                       atol=INT8.epilogue.atol * scale), \
                        (epilogue, b is not None, M, K, N)


DET_CASES = [("store", 100, False), ("accum", 96, True), ("gelu", 33, True), ("geglu", 100, True),
             ("relu", 31, False)]


@pytest.mark.parametrize("epilogue,N,with_bias", DET_CASES, ids=[c[0] for c in DET_CASES])
def test_bits_independent_of_threads_and_batch(impl: int, epilogue: str, N: int,
                                               with_bias: bool) -> None:
    rng = np.random.default_rng(11)
    K = 768
    W = rng.standard_normal((N, K), dtype=np.float32)
    packed = _qgemm.pack(W, geglu=epilogue == "geglu")
    bias = rng.standard_normal(N, dtype=np.float32) if with_bias else None
    A = rng.standard_normal((333, K), dtype=np.float32)
    C0 = rng.standard_normal((333, N // 2 if epilogue == "geglu" else N), dtype=np.float32)

    def run(rows: slice, threads: int) -> np.ndarray:
        out = C0[rows].copy() if epilogue == "accum" else None
        return _qgemm.gemm(A[rows], packed, N, K, bias=bias, epilogue=epilogue, out=out,
                           threads=threads)

    full = run(slice(0, 333), 1)
    for threads in (2, 3):
        assert np.array_equal(run(slice(0, 333), threads), full)
    for r in (0, 5, 13, 14, 100, 331, 332):
        for size in (1, 7, 64):
            start = min(max(r - size // 2, 0), 333 - size)
            for threads in (1, 2):
                part = run(slice(start, start + size), threads)
                assert np.array_equal(part[r - start], full[r]), (r, size, threads)


def test_strided_rows(impl: int) -> None:
    rng = np.random.default_rng(7)
    M, K, N = 29, 40, 37
    big_a = rng.standard_normal((M, K + 9), dtype=np.float32)
    W = rng.standard_normal((N, K), dtype=np.float32)
    big_c = np.full((M, N + 5), 7.0, np.float32)
    packed = _qgemm.pack(W)
    _qgemm.gemm(big_a[:, 3:3 + K], packed, N, K, out=big_c[:, 2:2 + N])
    want = _qgemm.gemm(np.ascontiguousarray(big_a[:, 3:3 + K]), packed, N, K)
    assert np.array_equal(big_c[:, 2:2 + N], want)
    assert (big_c[:, :2] == 7).all() and (big_c[:, 2 + N:] == 7).all()


def test_packing_is_deterministic_and_aligned(impl: int) -> None:
    W = np.random.default_rng(3).standard_normal((70, 45), dtype=np.float32)
    for geglu in (False, True):
        first = _qgemm.pack(W, geglu=geglu)
        assert first.ctypes.data % 64 == 0
        assert np.array_equal(first, _qgemm.pack(W.copy(), geglu=geglu))


@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_simd_impls_agree_bit_for_bit(epilogue: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every SIMD impl quantizes alike, sums exactly, and dequantizes each lane with the same
    operations (vgelu.h's GELU included; avx2 and avxvnni share the very store), so a model
    answers with the same bits whichever of them the CPU picks. Portable C rounds its own way
    (no FMA, libm's erff) and is held to the float64 tolerance above instead."""
    rng = np.random.default_rng(21)
    geglu = epilogue == "geglu"
    for M, K, N in ((1, 3, 6), (7, 67, 34), (64, 768, 100), (333, 45, 70)):
        W = rng.standard_normal((N, K), dtype=np.float32)
        A = rng.standard_normal((M, K), dtype=np.float32) * 2
        bias = rng.standard_normal(N, dtype=np.float32)
        C0 = rng.standard_normal((M, N // 2 if geglu else N), dtype=np.float32)
        outs = {}
        for name in SIMD_IMPLS:
            monkeypatch.setenv("KIME_QGEMM", name)
            if runs(name):
                outs[name] = _qgemm.gemm(A, _qgemm.pack(W, geglu=geglu), N, K, bias=bias,
                                         epilogue=epilogue, threads=2,
                                         out=C0.copy() if epilogue == "accum" else None)
        if len(outs) < 2:
            pytest.skip("fewer than two SIMD impls run here")
        first = next(iter(outs.values()))
        for name, got in outs.items():
            assert np.array_equal(got, first), (name, M, K, N)


def test_impl_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ISA bounds the impl, KIME_QGEMM caps it further (unknown names cap nothing), and
    avxvnni's EVEX twin runs only when asked for by name; amx runs at the CPU's own avx512 level
    or when named."""
    isas = range(_qgemm.isa_detect() + 1)

    def chosen(cap: str | None) -> list[str]:
        if cap is None:
            monkeypatch.delenv("KIME_QGEMM", raising=False)
        else:
            monkeypatch.setenv("KIME_QGEMM", cap)
        return [_qgemm.impl_name(isa) for isa in isas]

    default = chosen(None)
    assert default[0] == "portable"
    if ARM64:  # levels neon, dotprod, i8mm, bf16: the impl follows the level, capped by name
        best = ["portable", "neon", "sdot", "smmla", "smmla"]
        assert default == best[:len(default)]
        assert chosen("bogus") == default and chosen("smmla") == default
        assert set(chosen("portable")) == {"portable"}
        assert chosen("neon") == ["portable"] + ["neon"] * (len(default) - 1)
        assert chosen("sdot") == [min(b, "sdot", key=best.index) for b in default]
        return
    # AVX-VNNI is above the avx2 level: a level below the CPU's own runs avx2's INT8 kernels
    assert default[1:2] == (["avx2"] if len(default) > 2 else default[1:2])
    assert all(name in ("avx2", "avxvnni") for name in default[1:2])
    assert all(name in ("avx2", "vnni512", "amx") for name in default[2:])
    assert chosen("bogus") == default and chosen("amx") == default
    # AMX is above the avx512 level's own set: vnni512 caps it, and nothing else changes
    assert chosen("vnni512") == ["vnni512" if name == "amx" else name for name in default]
    assert set(chosen("portable")) == {"portable"}
    assert chosen("avx2") == ["portable"] + ["avx2"] * (len(default) - 1)
    for name in chosen("avxvnni")[1:]:
        assert name in ("avx2", "avxvnni", "avxvnni-evex")


def test_amx_runs_at_a_named_level_only_when_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """KIME_ISA=avx512 alone runs vnni512, the level's own set, even where AMX is there;
    KIME_QGEMM=amx beside it runs AMX, as KIME_QGEMM=avxvnni does beside KIME_ISA=avx2."""
    monkeypatch.delenv("KIME_ISA", raising=False)
    monkeypatch.delenv("KIME_QGEMM", raising=False)
    if _qgemm.impl_name() != "amx":
        pytest.skip("this CPU or OS runs no AMX (it runs %s)" % _qgemm.impl_name())
    monkeypatch.setenv("KIME_ISA", "avx512")
    assert _qgemm.impl_name() == "vnni512"
    monkeypatch.setenv("KIME_QGEMM", "amx")
    assert _qgemm.impl_name() == "amx"
    monkeypatch.setenv("KIME_ISA", "avx2")
    assert _qgemm.impl_name() == "avx2"


@pytest.mark.parametrize("level", ["portable", "avx2", "avx512", "neon", "dotprod", "i8mm",
                                   "bf16"])
def test_isa_cap_runs_the_levels_own_int8_kernels(level: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """KIME_ISA=LEVEL runs that level's INT8 kernels on every CPU that has the level, whatever
    else the CPU has: avx2's on Zen 3, on Zen 5 and on an Alder Lake with AVX-VNNI alike."""
    own = {"portable": {"portable"}, "avx2": {"avx2"}, "avx512": {"vnni512", "avx2"},
           "neon": {"neon"}, "dotprod": {"sdot"}, "i8mm": {"smmla"},
           "bf16": {"smmla"}}[level]
    monkeypatch.delenv("KIME_QGEMM", raising=False)
    monkeypatch.setenv("KIME_ISA", level)
    if _qgemm.isa_name(_qgemm.isa_detect()) != level:
        pytest.skip("this CPU (%s) has no %s level" % (_qgemm.isa_name(_qgemm.isa_detect()),
                                                       level))
    assert _qgemm.impl_name() in own


def test_pack_belongs_to_its_impl(monkeypatch: pytest.MonkeyPatch) -> None:
    """avx2 packs signed sums, the VNNI impls add 128 * colsum compensation: the same weight
    packs to different bytes, which is why the disk cache keys INT8 packs by impl."""
    W = np.random.default_rng(4).standard_normal((40, 24), dtype=np.float32)
    packs = {}
    for name in SIMD_IMPLS:
        monkeypatch.setenv("KIME_QGEMM", name)
        if runs(name):
            packs[name] = _qgemm.pack(W)
    # on aarch64: sdot's 4-k groups against smmla's 8-k groups of column pairs (K = 24 packs to
    # the same size)
    a, b = ("sdot", "smmla") if ARM64 else ("avx2", "avxvnni")
    if a not in packs or b not in packs:
        pytest.skip("needs %s and %s" % (a, b))
    assert packs[a].shape == packs[b].shape
    assert not np.array_equal(packs[a], packs[b])


def test_refuses_bad_arguments() -> None:
    W = np.ones((4, 3), np.float32)
    packed = _qgemm.pack(W)
    A = np.ones((2, 3), np.float32)
    with pytest.raises(ValueError, match="packed"):
        _qgemm.gemm(A, packed[:-1], 4, 3)
    with pytest.raises(ValueError, match="accum"):
        _qgemm.gemm(A, packed, 4, 3, epilogue="accum")
    with pytest.raises(ValueError, match="epilogue"):
        _qgemm.gemm(A, packed, 4, 3, epilogue="silu")
    with pytest.raises(ValueError, match="A must"):
        _qgemm.gemm(np.ones((2, 5), np.float32), packed, 4, 3)
    with pytest.raises(ValueError, match="isa"):
        _qgemm.gemm(A, packed, 4, 3, isa=_qgemm.isa_detect() + 1)
    with pytest.raises(ValueError, match="even"):
        _qgemm.pack(np.ones((3, 3), np.float32), geglu=True)
