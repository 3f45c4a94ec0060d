"""Test and bench wrapper over the C attention kernels (csrc/attention.c): RoPE in place and
blocked online-softmax attention over unpadded rows. The compiled forward pass calls the C
directly; these wrappers check shapes, allocate the scratch and drop the GIL.

qkv is [T, 3*H*hd] float32 (q, k, v column blocks, heads contiguous); cu is int32 row bounds, row
r being tokens cu[r]..cu[r+1]. `positions` and `option_ids` (int32 [T], indexed like qkv's rows)
are the parallel option layout's ids; None is the sequential layout (a token's position is its
index in its row, nothing option-masked). `precision` is "f32" or "bf16": kernels.h's attention
products, BF16 on any CPU (`bf16_kernels` names what computes them here).
"""
import numpy as np

from libc.stdint cimport int32_t

cdef extern from "kernels.h" nogil:
    int kime_isa_detect()
    const char *kime_isa_name(int isa)
    void kime_rope(float *qkv, int T, const int32_t *cu, int R, int H, int hd,
                   const float *cos_table, const float *sin_table, const int32_t *pos,
                   int nthreads)
    size_t kime_attention_scratch_floats(int precision, int tokens, int heads, int hd,
                                         int nthreads)
    enum: KIME_ATTN_F32
    enum: KIME_ATTN_BF16
    const char *kime_attention_bf16_kernels(int isa)
    void kime_attention(int precision, const float *qkv, const int32_t *cu, int R, int H, int hd,
                        int half_window, const int32_t *pos, const int32_t *opt, float *out,
                        int ldo, float *scratch, int nthreads)
    void kime_attention_rope(int precision, float *qkv, const int32_t *cu, int R, int H, int hd,
                             int half_window, const int32_t *pos, const int32_t *opt,
                             const float *cos_table, const float *sin_table, float *out, int ldo,
                             float *scratch, int nthreads)
    void kime_attention_some(int precision, const float *q, int ldq, const int32_t *qcu,
                             const float *qkv, const int32_t *cu, int R, int H, int hd,
                             float *out, int ldo, float *scratch, int nthreads)


def isa() -> str:
    """The ISA path the kernels take now (cpuid, capped by KIME_ISA)."""
    return kime_isa_name(kime_isa_detect()).decode()


def bf16_kernels() -> str:
    """What computes BF16 attention's products at the ISA the kernels take now: "amx-bf16" (AMX
    tiles, for head dims of a multiple of 32, with their own bits; unless KIME_BGEMM=avx512bf16),
    "vdpbf16ps" (AVX512_BF16), "avx2 fma" or "neon fma" (vdpbf16ps's bits), or "c" (the portable
    level's)."""
    return kime_attention_bf16_kernels(kime_isa_detect()).decode()


cdef int _precision(str precision) except -1:
    """kernels.h's attention precision for "f32" or "bf16"."""
    if precision == "f32":
        return KIME_ATTN_F32
    if precision != "bf16":
        raise ValueError(f"attention precision is 'f32' or 'bf16', not {precision!r}")
    return KIME_ATTN_BF16


cdef int _check(const float[:, ::1] qkv, const int32_t[::1] cu, int H, int hd,
                int threads) except -1:
    if threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    if H < 1 or hd < 1 or qkv.shape[1] != 3 * H * hd:
        raise ValueError(f"qkv has {qkv.shape[1]} columns; H={H}, hd={hd} need {3 * H * hd}")
    if cu.shape[0] < 1 or cu[0] < 0 or cu[cu.shape[0] - 1] > qkv.shape[0]:
        raise ValueError(f"cu must start at >= 0 and end at <= T={qkv.shape[0]}")
    cdef Py_ssize_t r
    for r in range(cu.shape[0] - 1):
        if cu[r + 1] < cu[r]:
            raise ValueError(f"cu must not decrease (cu[{r}]={cu[r]}, cu[{r + 1}]={cu[r + 1]})")
    return 0


cdef const int32_t *_ids(const int32_t[::1] ids, Py_ssize_t T, str name) except? NULL:
    """The data pointer of per-token ids (NULL for None), which must hold one id per row of qkv."""
    if ids is None:
        return NULL
    if ids.shape[0] != T:
        raise ValueError(f"{name} has {ids.shape[0]} entries; qkv has {T} rows")
    return &ids[0] if T else NULL


cdef int _check_tables(const int32_t[::1] cu, int hd, const float[:, ::1] cos,
                      const float[:, ::1] sin, const int32_t *pos) except -1:
    """RoPE's tables against the head dim, and every position against the tables."""
    if hd % 2:
        raise ValueError(f"rope needs an even head dim, got {hd}")
    if cos.shape[1] != hd // 2 or sin.shape[0] != cos.shape[0] or sin.shape[1] != cos.shape[1]:
        raise ValueError(f"cos and sin must both be [max_pos, {hd // 2}]")
    cdef Py_ssize_t r, t
    if pos == NULL:
        for r in range(cu.shape[0] - 1):
            if cu[r + 1] - cu[r] > cos.shape[0]:
                raise ValueError(f"row {r} has {cu[r + 1] - cu[r]} tokens; the tables {cos.shape[0]}")
    else:
        for t in range(cu[0], cu[cu.shape[0] - 1]):
            if pos[t] < 0 or pos[t] >= cos.shape[0]:
                raise ValueError(f"positions[{t}] = {pos[t]} is outside the tables' "
                                 f"{cos.shape[0]} positions")
    return 0


def rope(float[:, ::1] qkv, const int32_t[::1] cu, int H, int hd, const float[:, ::1] cos,
         const float[:, ::1] sin, int threads=1, const int32_t[::1] positions=None) -> None:
    """Rotate-half RoPE in place on q and k; cos and sin are [max_pos, hd/2] tables. A token's
    position is positions[t] when given, else its index in its row."""
    _check(qkv, cu, H, hd, threads)
    cdef const int32_t *pos = _ids(positions, qkv.shape[0], "positions")
    _check_tables(cu, hd, cos, sin, pos)
    cdef int R = cu.shape[0] - 1
    with nogil:
        kime_rope(&qkv[0, 0], qkv.shape[0], &cu[0], R, H, hd, &cos[0, 0], &sin[0, 0], pos,
                  threads)


cdef int _paired(positions, option_ids) except -1:
    if (positions is None) != (option_ids is None):
        raise ValueError("positions and option_ids go together: give both or neither")
    return 0


def _out(out, Py_ssize_t T, Py_ssize_t width):
    """`out`, or a new zeroed [T, width] float32 array; checked: rows may be strided."""
    if out is None:
        out = np.zeros((T, width), dtype=np.float32)
    cdef float[:, :] o = out
    if o.shape[0] != T or o.shape[1] != width or o.strides[1] != sizeof(float):
        raise ValueError(f"out must be [{T}, {width}] float32 with unit column stride")
    return out


def attention(const float[:, ::1] qkv, const int32_t[::1] cu, int H, int hd, int half_window,
              out=None, int threads=1, const int32_t[::1] positions=None,
              const int32_t[::1] option_ids=None, str precision="f32"):
    """Softmax attention per row and head -> out [T, H*hd] (rows of out may be strided);
    half_window < 0 is full attention, else query i sees keys j with |i - j| <= half_window.
    With `positions` and `option_ids` (given together) the window reads position ids and query
    i does not see key j when both are in option slots (id > 0) and the slots differ."""
    _check(qkv, cu, H, hd, threads)
    cdef int prec = _precision(precision)
    _paired(positions, option_ids)
    cdef const int32_t *pos = _ids(positions, qkv.shape[0], "positions")
    cdef const int32_t *opt = _ids(option_ids, qkv.shape[0], "option_ids")
    out = _out(out, qkv.shape[0], H * hd)
    cdef float[:, :] o = out
    cdef int R = cu.shape[0] - 1
    cdef int ldo = o.strides[0] // sizeof(float)
    cdef float[::1] scratch = np.empty(
        kime_attention_scratch_floats(prec, qkv.shape[0], H, hd, threads), dtype=np.float32)
    with nogil:
        kime_attention(prec, &qkv[0, 0], &cu[0], R, H, hd, half_window, pos, opt, &o[0, 0], ldo,
                       &scratch[0], threads)
    return out


def attention_rope(float[:, ::1] qkv, const int32_t[::1] cu, int H, int hd, int half_window,
                   const float[:, ::1] cos, const float[:, ::1] sin, out=None, int threads=1,
                   const int32_t[::1] positions=None, const int32_t[::1] option_ids=None,
                   str precision="f32"):
    """`rope` then `attention` in one call, with their bits: with BF16 products q and k are
    rotated as they are read and qkv is left as it was; with FP32 products qkv is rotated in
    place first (the kernel reads the keys where they lie)."""
    _check(qkv, cu, H, hd, threads)
    cdef int prec = _precision(precision)
    _paired(positions, option_ids)
    cdef const int32_t *pos = _ids(positions, qkv.shape[0], "positions")
    cdef const int32_t *opt = _ids(option_ids, qkv.shape[0], "option_ids")
    _check_tables(cu, hd, cos, sin, pos)
    out = _out(out, qkv.shape[0], H * hd)
    cdef float[:, :] o = out
    cdef int R = cu.shape[0] - 1
    cdef int ldo = o.strides[0] // sizeof(float)
    cdef float[::1] scratch = np.empty(
        kime_attention_scratch_floats(prec, qkv.shape[0], H, hd, threads), dtype=np.float32)
    with nogil:
        kime_attention_rope(prec, &qkv[0, 0], &cu[0], R, H, hd, half_window, pos, opt,
                            &cos[0, 0], &sin[0, 0], &o[0, 0], ldo, &scratch[0], threads)
    return out


def attention_some(const float[:, ::1] q, const int32_t[::1] qcu, const float[:, ::1] qkv,
                   const int32_t[::1] cu, int H, int hd, int threads=1, str precision="f32"):
    """Full attention for chosen queries only -> out [len(q), H*hd]: row r's queries are
    q[qcu[r]:qcu[r + 1]] ([*, H*hd], heads contiguous), its keys and values those of qkv's rows
    cu[r]..cu[r + 1]. A query gets the bits `attention` gives the token it was copied from."""
    _check(qkv, cu, H, hd, threads)
    cdef int prec = _precision(precision)
    cdef Py_ssize_t r
    cdef int R = cu.shape[0] - 1
    if q.shape[1] != H * hd:
        raise ValueError(f"q has {q.shape[1]} columns; H={H}, hd={hd} need {H * hd}")
    if qcu.shape[0] != R + 1 or qcu[0] != 0 or qcu[R] != q.shape[0]:
        raise ValueError(f"qcu must have {R + 1} entries running from 0 to {q.shape[0]}")
    for r in range(R):
        if qcu[r + 1] < qcu[r]:
            raise ValueError(f"qcu must not decrease (qcu[{r}]={qcu[r]}, qcu[{r + 1}]={qcu[r + 1]})")
        if qcu[r + 1] > qcu[r] and cu[r + 1] == cu[r]:
            raise ValueError(f"row {r} has queries but no keys")
    out = np.zeros((q.shape[0], H * hd), dtype=np.float32)
    if q.shape[0] == 0:
        return out
    cdef float[:, ::1] o = out
    cdef float[::1] scratch = np.empty(
        kime_attention_scratch_floats(prec, qkv.shape[0], H, hd, threads), dtype=np.float32)
    with nogil:
        kime_attention_some(prec, &q[0, 0], H * hd, &qcu[0], &qkv[0, 0], &cu[0], R, H, hd,
                            &o[0, 0], H * hd, &scratch[0], threads)
    return out
