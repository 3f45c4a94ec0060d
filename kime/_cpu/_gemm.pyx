"""Test and bench wrapper over the C GEMM (csrc/gemm.c): C = A @ W.T + epilogue over weights
packed once for an ISA. The compiled forward pass calls the C directly; these wrappers check
shapes (the checks the three GEMM wrappers share, in _gemm_args.pxd), allocate the output and
scratch and drop the GIL.

isa -1 means kime_isa_detect() (cpuid, or getauxval on aarch64, capped by KIME_ISA); a packed
buffer is only valid for the ISA it was packed for. ISAs are levels numbered per architecture
(x86-64: 1 avx2, 2 avx512; aarch64: 1 neon, 2 dotprod, 3 i8mm, 4 bf16): isa_name names them.
"""
import numpy as np

from ._gemm_args cimport (KIME_EPI_GEGLU, a_rows, aligned_bytes, bias_view, check_geglu_n,
                          check_threads, check_weight_rows, checked_isa, epilogue_code,
                          epilogues, out_array, out_rows)

cdef extern from "kernels.h" nogil:
    int kime_isa_detect()
    const char *kime_isa_name(int isa)
    unsigned kime_isa_arm_features()
    const char *kime_gemm_kernel_name(int isa)
    size_t kime_gemm_packed_floats(int isa, int N, int K, int geglu)
    void kime_gemm_pack(int isa, const float *W, int N, int K, int geglu, float *packed)
    size_t kime_gemm_scratch_floats(int isa, int K, int nthreads)
    void kime_gemm(int isa, const float *A, int lda, int M, int K, int N, const float *packed,
                   const float *bias, int epilogue, float *C, int ldc, float *scratch,
                   int nthreads)

EPILOGUES = epilogues()


def isa_detect() -> int:
    """The best ISA this CPU has, capped by KIME_ISA: 0 portable, then this architecture's
    levels (x86-64: 1 avx2, 2 avx512; aarch64: 1 neon, 2 dotprod, 3 i8mm, 4 bf16)."""
    return kime_isa_detect()


def isa_name(int isa) -> str:
    return kime_isa_name(isa).decode()


ARM_FEATURES = ("asimd", "dotprod", "i8mm", "bf16", "sve", "sve2")  # kernels.h's KIME_ARM_* bits


def cpu_features() -> list:
    """The aarch64 features this CPU has (getauxval; KIME_ISA does not cap them), by name in
    ARM_FEATURES's order; [] on other architectures."""
    cdef unsigned bits = kime_isa_arm_features()
    return [name for i, name in enumerate(ARM_FEATURES) if bits >> i & 1]


def kernel_name(int isa=-1) -> str:
    """The FP32 micro-kernel `isa` runs (-1: kime_isa_detect()), as "NAME MRxNR"."""
    return kime_gemm_kernel_name(checked_isa(isa)).decode()


cdef float[::1] _aligned(size_t n):
    """n float32, starting on a 64-byte boundary."""
    return np.asarray(aligned_bytes(n * sizeof(float))).view(np.float32)


def pack(const float[:, ::1] W, int isa=-1, bint geglu=False) -> np.ndarray:
    """Pack a torch Linear weight W [N, K] for `isa`; with geglu, rows [a; g] are paired."""
    isa = checked_isa(isa)
    cdef int N = W.shape[0], K = W.shape[1]
    check_weight_rows(N, geglu)
    cdef float[::1] packed = _aligned(kime_gemm_packed_floats(isa, N, K, geglu))
    if packed.shape[0]:
        with nogil:
            kime_gemm_pack(isa, &W[0, 0], N, K, geglu, &packed[0])
    return np.asarray(packed)


def gemm(A, packed, int N, int K, bias=None, str epilogue="store", out=None, int threads=1,
         int isa=-1) -> np.ndarray:
    """C = epilogue(A @ W.T + bias) for W [N, K] packed by pack(W, isa, geglu). A [M, K] and out
    may have strided rows. out [M, N] ([M, N/2] for geglu) is allocated when None; "accum" adds
    into the given out in place."""
    isa = checked_isa(isa)
    cdef int epi = epilogue_code(EPILOGUES, epilogue)
    check_threads(threads)
    cdef bint geglu = epi == KIME_EPI_GEGLU
    check_geglu_n(N, geglu)
    cdef const float[:, :] a = a_rows(A, K)
    cdef const float[::1] p = packed
    if <size_t>p.shape[0] != kime_gemm_packed_floats(isa, N, K, geglu):
        raise ValueError(f"packed has {p.shape[0]} floats; N={N}, K={K} on {isa_name(isa)} "
                         f"need {kime_gemm_packed_floats(isa, N, K, geglu)}")
    cdef int M = a.shape[0], nout = N // 2 if geglu else N
    cdef const float[::1] b = bias_view(bias, N)
    cdef const float *bp = &b[0] if b is not None and N else NULL
    out = out_array(out, M, nout, epi)
    cdef float[:, :] c = out_rows(out, M, nout)
    if M == 0 or nout == 0:
        return out
    cdef float[::1] scratch = _aligned(kime_gemm_scratch_floats(isa, K, threads))
    cdef int lda = a.strides[0] // sizeof(float), ldc = c.strides[0] // sizeof(float)
    cdef const float *ap = &a[0, 0] if K else NULL
    cdef const float *pp = &p[0] if p.shape[0] else NULL
    with nogil:
        kime_gemm(isa, ap, lda, M, K, N, pp, bp, epi, &c[0, 0], ldc, &scratch[0], threads)
    return out
