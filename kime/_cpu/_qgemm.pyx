"""Test and bench wrapper over the INT8 GEMM (csrc/qgemm.c): C = dequant(q(A) @ q(W).T) +
epilogue, over weights quantized and packed once for an ISA. Shapes are checked, output and
scratch allocated, and the GIL dropped, as in _gemm.

isa -1 means kime_isa_detect() (cpuid, capped by KIME_ISA). The kernel set ("impl") follows from
the ISA, the CPU's VNNI flavours and the KIME_QGEMM cap (qgemm.h); impl_name(isa) says which runs.
A packed buffer is only valid for the impl it was packed for.
"""
import numpy as np

from libc.stdint cimport int32_t, uint8_t

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

EPILOGUES = {"store": 0, "accum": 1, "gelu": 2, "relu": 3, "geglu": 4}


def isa_detect() -> int:
    return kime_isa_detect()


def isa_name(int isa) -> str:
    return kime_isa_name(isa).decode()


def impl(int isa=-1) -> int:
    """The kernel set `isa` runs: 0 portable, 1 avx2, 2 vnni512, 3 avxvnni, 4 avxvnni-evex."""
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
    cdef int best = kime_isa_detect()
    if isa == -1:
        return best
    if isa >= 0 and isa & KIME_QGEMM_PINNED:
        return isa  # pinned by pin(): qgemm.c checks the impl
    if isa < 0 or isa > best:
        raise ValueError(f"isa {isa} is not available here (best: {best}, {isa_name(best)})")
    return isa


cdef uint8_t[::1] _aligned(size_t n):
    """n bytes starting on a 64-byte boundary."""
    buf = np.empty(n + 64, dtype=np.uint8)
    cdef size_t skip = -buf.ctypes.data % 64
    return buf[skip:skip + n]


def pack(const float[:, ::1] W, int isa=-1, bint geglu=False) -> np.ndarray:
    """Quantize and pack a torch Linear weight W [N, K]; with geglu, rows [a; g] are paired."""
    isa = _isa(isa)
    cdef int N = W.shape[0], K = W.shape[1]
    if geglu and N % 2:
        raise ValueError(f"a GEGLU weight needs an even number of rows, got {N}")
    cdef uint8_t[::1] packed = _aligned(kime_qgemm_packed_bytes(isa, N, K, geglu))
    cdef const float *wp = &W[0, 0] if N and K else NULL
    if packed.shape[0]:
        with nogil:
            kime_qgemm_pack(isa, wp, N, K, geglu, &packed[0])
    return np.asarray(packed)


cdef tuple _check(A, packed, int N, int K, int isa, bint geglu):
    cdef const float[:, :] a = A
    if a.shape[1] != K or a.strides[1] != sizeof(float) or a.strides[0] < 0 \
            or a.strides[0] % sizeof(float):
        raise ValueError(f"A must be [M, {K}] float32 with unit column stride")
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
    if epilogue not in EPILOGUES:
        raise ValueError(f"epilogue must be one of {sorted(EPILOGUES)}, got {epilogue!r}")
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    cdef int epi = EPILOGUES[epilogue]
    cdef bint geglu = epi == 4
    if geglu and N % 2:
        raise ValueError(f"geglu needs an even N, got {N}")
    cdef const float[:, :] a
    cdef const uint8_t[::1] p
    a, p = _check(A, packed, N, K, isa, geglu)
    cdef int M = a.shape[0], nout = N // 2 if geglu else N
    cdef const float[::1] b
    cdef const float *bp = NULL
    if bias is not None:
        b = bias
        if b.shape[0] != N:
            raise ValueError(f"bias has {b.shape[0]} entries, need N={N}")
        bp = &b[0] if N else NULL
    if out is None:
        if epi == 1:
            raise ValueError("accum adds into out: pass it")
        out = np.empty((M, nout), dtype=np.float32)
    cdef float[:, :] c = out
    if c.shape[0] != M or c.shape[1] != nout or c.strides[1] != sizeof(float) \
            or c.strides[0] < 0 or c.strides[0] % sizeof(float):
        raise ValueError(f"out must be [{M}, {nout}] float32 with unit column stride")
    if M == 0 or nout == 0:
        return out
    cdef uint8_t[::1] scratch = _aligned(kime_qgemm_scratch_bytes(isa, K, threads))
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
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    cdef const float[:, :] a
    cdef const uint8_t[::1] p
    a, p = _check(A, packed, N, K, isa, geglu)
    cdef int M = a.shape[0]
    out = np.zeros((M, N), dtype=np.int32)
    if M == 0 or N == 0:
        return out
    cdef int32_t[:, ::1] c = out
    cdef uint8_t[::1] scratch = _aligned(kime_qgemm_scratch_bytes(isa, K, threads))
    cdef int lda = a.strides[0] // sizeof(float)
    cdef const float *ap = &a[0, 0] if K else NULL
    cdef const uint8_t *pp = &p[0] if p.shape[0] else NULL
    with nogil:
        kime_qgemm_int32(isa, ap, lda, M, K, N, pp, geglu, &c[0, 0], N, &scratch[0], threads)
    return out
