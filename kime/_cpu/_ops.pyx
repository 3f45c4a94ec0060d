"""Element-wise float32 kernels: exact-erf GELU and GeGLU.

Why these live here: NumPy has no `erf`, and Laya's encoder (ModernBERT) and scorer use the exact
erf GELU, so even the NumPy reference forward pass needs a compiled op for it. (The LayerNorm the
forward pass runs is forward.c's, tested through `_forward.layer_norm`.)

They run on the calling thread: only the NumPy reference calls them, and Cython's threads would
be OpenMP's, which kime does not use (the forward pass's GELU is forward.c's, on kime's own
pool). Each element is computed alone, so a row's output is the same bits whatever other rows
share its batch.

Each kernel is a nogil `cdef` function; the `def` wrappers check shapes, then drop the GIL. Every
wrapper writes into `out` and returns None, so a caller can hand it preallocated buffers.
"""
from libc.math cimport erff

# M_SQRT1_2 rounded to float once, as torch does (`scalar_t(M_SQRT1_2)`), so x * alpha is a float
# product and not a double one.
cdef float SQRT1_2 = <float>0.70710678118654752440
cdef float HALF = <float>0.5
cdef float ONE = <float>1.0


cdef inline float _gelu(float v) noexcept nogil:
    """Torch's exact GELU in float32: 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2))."""
    return HALF * v * (ONE + erff(v * SQRT1_2))


cdef void _gelu_rows(const float[:, ::1] x, float[:, ::1] out) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef Py_ssize_t n_cols = x.shape[1]
    for i in range(x.shape[0]):
        for j in range(n_cols):
            out[i, j] = _gelu(x[i, j])


cdef void _geglu_rows(const float[:, ::1] x, float[:, ::1] out) noexcept nogil:
    cdef Py_ssize_t i, j
    cdef Py_ssize_t half = out.shape[1]
    for i in range(x.shape[0]):
        for j in range(half):
            out[i, j] = _gelu(x[i, j]) * x[i, half + j]


def gelu_erf(const float[:, ::1] x, float[:, ::1] out) -> None:
    """out = GELU(x) with the exact erf, bit-for-bit torch's float32 formula; out may be x."""
    if out.shape[0] != x.shape[0] or out.shape[1] != x.shape[1]:
        raise ValueError(
            f"gelu_erf: out has shape ({out.shape[0]}, {out.shape[1]}), "
            f"x has ({x.shape[0]}, {x.shape[1]}); they must match"
        )
    with nogil:
        _gelu_rows(x, out)


def geglu(const float[:, ::1] x, float[:, ::1] out) -> None:
    """out[:, :m] = GELU(x[:, :m]) * x[:, m:] for x of width 2m: ModernBERT's MLP gate.

    Fusing the split saves materialising the two halves as copies.
    """
    if x.shape[1] % 2 != 0:
        raise ValueError(f"geglu: x must have an even number of columns, got {x.shape[1]}")
    if out.shape[0] != x.shape[0] or out.shape[1] != x.shape[1] // 2:
        raise ValueError(
            f"geglu: out has shape ({out.shape[0]}, {out.shape[1]}), expected "
            f"({x.shape[0]}, {x.shape[1] // 2}) for x of shape ({x.shape[0]}, {x.shape[1]})"
        )
    with nogil:
        _geglu_rows(x, out)

