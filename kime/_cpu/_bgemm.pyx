"""Test and bench wrapper over the BF16 GEMM (csrc/bgemm.c): C = bf16(A) @ bf16(W).T + epilogue
with FP32 accumulation, over weights rounded and packed once. Shapes are checked, output and
scratch allocated, and the GIL dropped, as in _gemm (the checks are _gemm_args.pxd's).

The kernels need AVX-512 with AVX512_BF16 (on aarch64: FEAT_BF16's bfmmla) at the ISA kime runs
(KIME_ISA caps it): `missing()` says what is missing, and `gemm` refuses to run where something
is. Packing is portable C; its layout is the architecture's (bgemm.h).
"""
import numpy as np

from libc.stdint cimport uint8_t, uint16_t

from ._gemm_args cimport (KIME_EPI_GEGLU, a_rows, aligned_bytes, bias_view, check_geglu_n,
                          check_threads, check_weight_rows, epilogue_code, epilogues, out_array,
                          out_rows)

cdef extern from "bgemm.h" nogil:
    int kime_isa_detect()
    const char *kime_bgemm_missing(int isa)
    const char *kime_bgemm_kernels()
    size_t kime_bgemm_packed_bytes(int N, int K, int geglu)
    void kime_bgemm_pack(const float *W, int N, int K, int geglu, void *packed)
    size_t kime_bgemm_scratch_bytes(int K, int nthreads)
    void kime_bgemm(const float *A, int lda, int M, int K, int N, const void *packed,
                    const float *bias, int epilogue, float *C, int ldc, void *scratch,
                    int nthreads)

EPILOGUES = epilogues()


def kernels() -> str:
    """The BF16 kernel set a call runs now, as `kime doctor` and a model's description say it:
    "amx-bf16" (AMX tiles, at the CPU's own avx512 level, unless KIME_BGEMM=avx512bf16),
    "avx512bf16", or "bfmmla" on aarch64. KIME_ISA and KIME_BGEMM are read on every call."""
    return kime_bgemm_kernels().decode()


def missing(int isa=-1):
    """None when the BF16 GEMM runs at `isa` (-1: kime_isa_detect(), capped by KIME_ISA); else
    what is missing: "build" (kime was compiled without AVX512_BF16 support), "avx512_bf16"
    (this CPU lacks AVX-512 with AVX512_BF16) or "isa" (the CPU has it, KIME_ISA caps kime below
    AVX-512); on aarch64 "bf16" (the CPU lacks FEAT_BF16) or "isa" (KIME_ISA caps kime below
    bf16)."""
    cdef const char *why = kime_bgemm_missing(kime_isa_detect() if isa == -1 else isa)
    return None if why == NULL else why.decode()


def pack(const float[:, ::1] W, bint geglu=False) -> np.ndarray:
    """Round a torch Linear weight W [N, K] to bfloat16 and pack it (uint16 bits, 64-B aligned);
    with geglu, rows [a; g] are paired."""
    cdef int N = W.shape[0], K = W.shape[1]
    check_weight_rows(N, geglu)
    cdef uint8_t[::1] packed = aligned_bytes(kime_bgemm_packed_bytes(N, K, geglu))
    cdef const float *wp = &W[0, 0] if N and K else NULL
    if packed.shape[0]:
        with nogil:
            kime_bgemm_pack(wp, N, K, geglu, &packed[0])
    return np.asarray(packed).view(np.uint16)


def gemm(A, packed, int N, int K, bias=None, str epilogue="store", out=None,
         int threads=1) -> np.ndarray:
    """C = epilogue(bf16(A) @ bf16(W).T + bias) for W [N, K] packed by pack(W, geglu). A [M, K]
    and out may have strided rows; out [M, N] ([M, N/2] for geglu) is allocated when None;
    "accum" adds into the given out in place."""
    why = missing()
    if why is not None:
        raise RuntimeError(f"the BF16 GEMM does not run here (missing: {why})")
    cdef int epi = epilogue_code(EPILOGUES, epilogue)
    check_threads(threads)
    cdef bint geglu = epi == KIME_EPI_GEGLU
    check_geglu_n(N, geglu)
    cdef const float[:, :] a = a_rows(A, K)
    cdef const uint16_t[::1] p = packed
    if <size_t>p.shape[0] * 2 != kime_bgemm_packed_bytes(N, K, geglu):
        raise ValueError(f"packed has {p.shape[0] * 2} bytes; N={N}, K={K} need "
                         f"{kime_bgemm_packed_bytes(N, K, geglu)}")
    cdef int M = a.shape[0], nout = N // 2 if geglu else N
    cdef const float[::1] b = bias_view(bias, N)
    cdef const float *bp = &b[0] if b is not None and N else NULL
    out = out_array(out, M, nout, epi)
    cdef float[:, :] c = out_rows(out, M, nout)
    if M == 0 or nout == 0:
        return out
    cdef uint8_t[::1] scratch = aligned_bytes(kime_bgemm_scratch_bytes(K, threads))
    cdef int lda = a.strides[0] // sizeof(float), ldc = c.strides[0] // sizeof(float)
    cdef const float *ap = &a[0, 0] if K else NULL
    cdef const uint16_t *pp = &p[0] if p.shape[0] else NULL
    with nogil:
        kime_bgemm(ap, lda, M, K, N, pp, bp, epi, &c[0, 0], ldc, &scratch[0], threads)
    return out
