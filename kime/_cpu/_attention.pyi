"""Type stubs for the compiled `_attention` module (see _attention.pyx)."""
from typing import Optional

import numpy as np

def isa() -> str: ...
def rope(qkv: np.ndarray, cu: np.ndarray, H: int, hd: int, cos: np.ndarray, sin: np.ndarray,
         threads: int = ..., positions: Optional[np.ndarray] = ...) -> None: ...
def attention(qkv: np.ndarray, cu: np.ndarray, H: int, hd: int, half_window: int,
              out: Optional[np.ndarray] = ..., threads: int = ...,
              positions: Optional[np.ndarray] = ...,
              option_ids: Optional[np.ndarray] = ...) -> np.ndarray: ...
def attention_some(q: np.ndarray, qcu: np.ndarray, qkv: np.ndarray, cu: np.ndarray, H: int,
                   hd: int, threads: int = ...) -> np.ndarray: ...
