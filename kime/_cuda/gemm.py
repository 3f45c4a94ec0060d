"""cuBLAS GEMMs with the numerics pinned: `y[m, n] = x[m, k] @ w[n, k]^T`, row-major.

`cupy.matmul` picks its compute type from global settings (and allows TF32 when CuPy is told
to), so kime calls `cublasGemmEx` itself on a handle of its own: FP16 operands accumulate with
`CUBLAS_COMPUTE_32F` (FP32 accumulation on tensor cores); FP32 operands use the same compute
type under `CUBLAS_PEDANTIC_MATH`, so no TF32 and no reduced-precision reduction ever runs.

Row-major `y = x w^T` is column-major `y^T = w x^T`: cuBLAS sees `w` ([n, k] row-major, i.e.
k x n column-major) transposed and `x` as is, the "TN" case cuBLAS is fastest at. The GEMM for a
fixed shape is the same kernel every call, and every output element reduces its own k values,
so a token's row of `y` does not depend on the other rows of `x`. Plans of different sizes are
different shapes, though, and cuBLAS may pick another kernel (another reduction order) for each;
`chunk` issues a GEMM as equal slices of `chunk` rows, so every plan runs the same shape and a row
gets the same bits in any plan, at some cost in speed for the largest plans.
"""
from __future__ import annotations

from typing import Any, Optional

import numpy as np

# cuBLAS and CUDA library enums (stable ABI values; CuPy names some but not all of them).
CUBLAS_OP_N = 0
CUBLAS_OP_T = 1
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_COMPUTE_32F = 68
CUBLAS_DEFAULT_MATH = 0
CUBLAS_PEDANTIC_MATH = 2
CUBLAS_POINTER_MODE_HOST = 0
CUDA_R_32F = 0
CUDA_R_16F = 2


class Gemm:
    """A cuBLAS handle bound to one stream, with one data type and the compute type pinned."""

    def __init__(self, cublas: Any, stream_ptr: int, half: bool):
        self._cublas = cublas
        self.half = half
        self.handle = cublas.create()
        cublas.setStream(self.handle, stream_ptr)
        cublas.setPointerMode(self.handle, CUBLAS_POINTER_MODE_HOST)
        cublas.setMathMode(self.handle, CUBLAS_DEFAULT_MATH if half else CUBLAS_PEDANTIC_MATH)
        self.data_type = CUDA_R_16F if half else CUDA_R_32F
        self.compute_type = getattr(cublas, "CUBLAS_COMPUTE_32F", CUBLAS_COMPUTE_32F)
        # alpha and beta live here for the handle's lifetime: host pointer mode reads them at
        # call (or capture) time.
        self._one = np.ones(1, dtype=np.float32)
        self._zero = np.zeros(1, dtype=np.float32)

    def __call__(self, x: int, w: int, y: int, m: int, n: int, k: int) -> None:
        """y[m, n] = x[m, k] @ w[n, k]^T; arguments are device addresses."""
        dt = self.data_type
        self._cublas.gemmEx(self.handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k,
                            self._one.ctypes.data, w, dt, k, x, dt, k,
                            self._zero.ctypes.data, y, dt, n, self.compute_type,
                            CUBLAS_GEMM_DEFAULT)

    def version(self) -> str:
        """cuBLAS's version (120901 is 12.9.1), or "unknown": its kernels, and so the bits,
        change with it."""
        try:
            return str(int(self._cublas.getVersion(self.handle)))
        except Exception:
            return "unknown"

    def call(self, x: Any, w: Any, y: Any, m: int, n: int, k: int, name: str,
             chunk: Optional[int] = None) -> "GemmCall":
        """The GEMM on these device arrays, bound for replay; in slices of `chunk` rows when
        `chunk` divides `m`."""
        return GemmCall(self, x, w, y, m, n, k, name, chunk)

    def close(self) -> None:
        if self.handle:
            self._cublas.destroy(self.handle)
            self.handle = 0


class GemmCall:
    """One GEMM (or its row slices) with addresses and shapes bound, replayable like a kernel
    `Launch`."""

    __slots__ = ("gemm", "calls", "name")

    def __init__(self, gemm: Gemm, x: Any, w: Any, y: Any, m: int, n: int, k: int, name: str,
                 chunk: Optional[int] = None):
        self.gemm = gemm
        self.name = name
        size = 2 if gemm.half else 4
        rows = chunk if chunk and m > chunk and m % chunk == 0 else m
        x0, w0, y0 = int(x.data.ptr), int(w.data.ptr), int(y.data.ptr)
        self.calls = [(x0 + i * k * size, w0, y0 + i * n * size, rows, n, k)
                      for i in range(0, m, rows)]

    def __call__(self) -> None:
        for args in self.calls:
            self.gemm(*args)

    def __repr__(self) -> str:
        return "GemmCall(%s, %d x (m=%d, n=%d, k=%d))" % ((self.name, len(self.calls))
                                                          + self.calls[0][3:])
