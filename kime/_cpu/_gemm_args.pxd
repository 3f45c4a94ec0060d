# The argument checks of the three GEMM wrappers (_gemm.pyx FP32, _qgemm.pyx INT8, _bgemm.pyx
# BF16), and their aligned scratch, written once: each `cimport`s these inline functions, so a
# check and its message are the same for every precision. The wrappers differ only in how they size and pack W and what
# their scratch holds; what a caller hands them (A, bias, out, the epilogue, threads) is one
# contract. The epilogue codes are kernels.h's enum, so the names map to the C's own numbers.

from libc.stdint cimport uint8_t

cdef extern from "kernels.h" nogil:
    int kime_isa_detect()
    const char *kime_isa_name(int isa)

    cdef enum kime_epilogue:
        KIME_EPI_STORE
        KIME_EPI_ACCUM
        KIME_EPI_GELU
        KIME_EPI_RELU
        KIME_EPI_GEGLU


cdef inline int checked_isa(int isa) except -2:
    """`isa`, or the best this CPU has (capped by KIME_ISA) for -1; refused above that best."""
    cdef int best = kime_isa_detect()
    if isa == -1:
        return best
    if isa < 0 or isa > best:
        raise ValueError(f"isa {isa} is not available here (best: {best}, "
                         f"{kime_isa_name(best).decode()})")
    return isa


cdef inline uint8_t[::1] aligned_bytes(size_t n):
    """n bytes starting on a 64-byte boundary (the kernels' full-speed alignment)."""
    import numpy as np

    buf = np.empty(n + 64, dtype=np.uint8)
    cdef size_t skip = -buf.ctypes.data % 64
    return buf[skip:skip + n]


cdef inline dict epilogues():
    """The epilogue names the wrappers take -> kernels.h's codes (each module's EPILOGUES)."""
    return {"store": KIME_EPI_STORE, "accum": KIME_EPI_ACCUM, "gelu": KIME_EPI_GELU,
            "relu": KIME_EPI_RELU, "geglu": KIME_EPI_GEGLU}


cdef inline int epilogue_code(dict table, str epilogue) except -1:
    if epilogue not in table:
        raise ValueError(f"epilogue must be one of {sorted(table)}, got {epilogue!r}")
    return table[epilogue]


cdef inline int check_threads(int threads) except -1:
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    return 0


cdef inline int check_weight_rows(int N, bint geglu) except -1:
    """pack(): a GEGLU weight holds [a; g], so its rows come in pairs."""
    if geglu and N % 2:
        raise ValueError(f"a GEGLU weight needs an even number of rows, got {N}")
    return 0


cdef inline int check_geglu_n(int N, bint geglu) except -1:
    """gemm(): the GEGLU epilogue pairs W's rows, so N is even."""
    if geglu and N % 2:
        raise ValueError(f"geglu needs an even N, got {N}")
    return 0


cdef inline const float[:, :] a_rows(object A, int K):
    """A as [M, K] float32 rows; rows may be strided (a view into a wider buffer), columns not."""
    cdef const float[:, :] a = A
    if a.shape[1] != K or a.strides[1] != sizeof(float) or a.strides[0] < 0 \
            or a.strides[0] % sizeof(float):
        raise ValueError(f"A must be [M, {K}] float32 with unit column stride")
    return a


cdef inline const float[::1] bias_view(object bias, int N):
    """bias as N float32, or None for no bias."""
    if bias is None:
        return None
    cdef const float[::1] b = bias
    if b.shape[0] != N:
        raise ValueError(f"bias has {b.shape[0]} entries, need N={N}")
    return b


cdef inline object out_array(object out, int M, int nout, int epi):
    """`out` as given, or a new [M, nout] float32 array; "accum" adds into `out`, so needs it."""
    if out is not None:
        return out
    if epi == KIME_EPI_ACCUM:
        raise ValueError("accum adds into out: pass it")
    import numpy as np

    return np.empty((M, nout), dtype=np.float32)


cdef inline float[:, :] out_rows(object out, int M, int nout):
    """out as [M, nout] float32 rows, strided rows allowed, unit column stride."""
    cdef float[:, :] c = out
    if c.shape[0] != M or c.shape[1] != nout or c.strides[1] != sizeof(float) \
            or c.strides[0] < 0 or c.strides[0] % sizeof(float):
        raise ValueError(f"out must be [{M}, {nout}] float32 with unit column stride")
    return c
