"""Type stubs for the compiled `_bgemm` module (see _bgemm.pyx)."""
from typing import Dict, Optional

import numpy as np

EPILOGUES: Dict[str, int]
KERNELS: str

def missing(isa: int = ...) -> Optional[str]: ...
def pack(W: np.ndarray, geglu: bool = ...) -> np.ndarray: ...
def gemm(A: np.ndarray, packed: np.ndarray, N: int, K: int, bias: Optional[np.ndarray] = ...,
         epilogue: str = ..., out: Optional[np.ndarray] = ...,
         threads: int = ...) -> np.ndarray: ...
