"""Test and bench wrapper over the INT8 GEMM (csrc/qgemm.c): C = dequant(q(A) @ q(W).T) +
epilogue, over weights quantized and packed once for an ISA. Shapes are checked, output and
scratch allocated, and the GIL dropped, as in _gemm (the checks are _gemm_args.pxd's).

isa -1 means kime_isa_detect() (cpuid, capped by KIME_ISA). The kernel set ("impl") follows from
the ISA, the CPU's VNNI flavours and the KIME_QGEMM cap (qgemm.h); impl_name(isa) says which runs.
A packed buffer is only valid for the impl it was packed for.
"""
import numpy as np

from libc.stdint cimport int32_t, uint8_t

from ._gemm_args cimport (KIME_EPI_GEGLU, a_rows, aligned_bytes, bias_view, check_geglu_n,
                          check_threads, check_weight_rows, checked_isa, epilogue_code,
                          epilogues, out_array, out_rows)

cdef extern from "qgemm.h" nogil:
    int kime_isa_detect()
    const char *kime_isa_name(int isa)
    int kime_qgemm_impl(int isa)
    int kime_qgemm_pin(int isa)
    int KIME_QGEMM_PINNED
    const char *kime_qgemm_impl_name(int impl)
    size_t kime_qgemm_packed_bytes(int isa, int N, int K, int geglu)
    void kime_qgemm_pack(int isa, const float *W, int N, int K, int geglu, void *packed)
    size_t kime_qgemm_scratch_bytes(int isa, int K, int nthreads)
    void kime_qgemm(int isa, const float *A, int lda, int M, int K, int N, const void *packed,
                    const float *bias, int epilogue, float *C, int ldc, void *scratch,
                    int nthreads)
    void kime_qgemm_int32(int isa, const float *A, int lda, int M, int K, int N,
                          const void *packed, int geglu, int32_t *C, int ldc, void *scratch,
                          int nthreads)

EPILOGUES = epilogues()


def isa_detect() -> int:
    return kime_isa_detect()


def isa_name(int isa) -> str:
    return kime_isa_name(isa).decode()


def impl(int isa=-1) -> int:
    """The kernel set `isa` runs: 0 portable, 1 avx2, 2 vnni512, 3 avxvnni, 4 avxvnni-evex,
    8 amx; on aarch64 5 neon, 6 sdot, 7 smmla."""
    return kime_qgemm_impl(_isa(isa))


def pin(int isa=-1) -> int:
    """`isa` with the impl it runs now pinned: pass it where an `isa` goes and that impl runs
    even if KIME_QGEMM changes later (a loaded model's packed weights stay valid)."""
    return kime_qgemm_pin(_isa(isa))


def impl_name(int isa=-1) -> str:
    """The name of the kernel set `isa` runs, as KIME_QGEMM spells it ("avxvnni-evex" is the
    test twin of "avxvnni")."""
    return kime_qgemm_impl_name(kime_qgemm_impl(_isa(isa))).decode()


cdef int _isa(int isa) except -2:
    if isa >= 0 and isa & KIME_QGEMM_PINNED:
        return isa  # pinned by pin(): qgemm.c checks the impl
    return checked_isa(isa)


def pack(const float[:, ::1] W, int isa=-1, bint geglu=False) -> np.ndarray:
    """Quantize and pack a torch Linear weight W [N, K]; with geglu, rows [a; g] are paired."""
    isa = _isa(isa)
    cdef int N = W.shape[0], K = W.shape[1]
    check_weight_rows(N, geglu)
    cdef uint8_t[::1] packed = aligned_bytes(kime_qgemm_packed_bytes(isa, N, K, geglu))
    cdef const float *wp = &W[0, 0] if N and K else NULL
    if packed.shape[0]:
        with nogil:
            kime_qgemm_pack(isa, wp, N, K, geglu, &packed[0])
    return np.asarray(packed)


cdef tuple _check(A, packed, int N, int K, int isa, bint geglu):
    cdef const float[:, :] a = a_rows(A, K)
    cdef const uint8_t[::1] p = packed
    if <size_t>p.shape[0] != kime_qgemm_packed_bytes(isa, N, K, geglu):
        raise ValueError(f"packed has {p.shape[0]} bytes; N={N}, K={K} on {isa_name(isa)} "
                         f"({impl_name(isa)} kernels) need "
                         f"{kime_qgemm_packed_bytes(isa, N, K, geglu)}")
    return a, p


def gemm(A, packed, int N, int K, bias=None, str epilogue="store", out=None, int threads=1,
         int isa=-1) -> np.ndarray:
    """C = epilogue(dequant(q(A) @ q(W).T) + bias) for W [N, K] packed by pack(W, isa, geglu).
    A [M, K] and out may have strided rows; out [M, N] ([M, N/2] for geglu) is allocated when
    None; "accum" adds into the given out in place."""
    isa = _isa(isa)
    cdef int epi = epilogue_code(EPILOGUES, epilogue)
    check_threads(threads)
    cdef bint geglu = epi == KIME_EPI_GEGLU
    check_geglu_n(N, geglu)
    cdef const float[:, :] a
    cdef const uint8_t[::1] p
    a, p = _check(A, packed, N, K, isa, geglu)
    cdef int M = a.shape[0], nout = N // 2 if geglu else N
    cdef const float[::1] b = bias_view(bias, N)
    cdef const float *bp = &b[0] if b is not None and N else NULL
    out = out_array(out, M, nout, epi)
    cdef float[:, :] c = out_rows(out, M, nout)
    if M == 0 or nout == 0:
        return out
    cdef uint8_t[::1] scratch = aligned_bytes(kime_qgemm_scratch_bytes(isa, K, threads))
    cdef int lda = a.strides[0] // sizeof(float), ldc = c.strides[0] // sizeof(float)
    cdef const float *ap = &a[0, 0] if K else NULL
    cdef const uint8_t *pp = &p[0] if p.shape[0] else NULL
    with nogil:
        kime_qgemm(isa, ap, lda, M, K, N, pp, bp, epi, &c[0, 0], ldc, &scratch[0], threads)
    return out


def gemm_int32(A, packed, int N, int K, bint geglu=False, int threads=1,
               int isa=-1) -> np.ndarray:
    """Test hook: the raw INT32 sums q(A) @ q(W).T [M, N] (columns in W's row order)."""
    isa = _isa(isa)
    check_threads(threads)
    cdef const float[:, :] a
    cdef const uint8_t[::1] p
    a, p = _check(A, packed, N, K, isa, geglu)
    cdef int M = a.shape[0]
    out = np.zeros((M, N), dtype=np.int32)
    if M == 0 or N == 0:
        return out
    cdef int32_t[:, ::1] c = out
    cdef uint8_t[::1] scratch = aligned_bytes(kime_qgemm_scratch_bytes(isa, K, threads))
    cdef int lda = a.strides[0] // sizeof(float)
    cdef const float *ap = &a[0, 0] if K else NULL
    cdef const uint8_t *pp = &p[0] if p.shape[0] else NULL
    with nogil:
        kime_qgemm_int32(isa, ap, lda, M, K, N, pp, geglu, &c[0, 0], N, &scratch[0], threads)
    return out
