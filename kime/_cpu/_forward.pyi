"""Type stubs for the compiled forward pass (see _forward.pyx)."""
from typing import Dict, Optional

import numpy as np

MAX_LAYERS: int
ACT_HIDDEN: int

def isa_detect() -> int: ...
def isa_name(isa: int) -> str: ...

class Arena:
    nbytes: int
    def __init__(self, spec: Dict[str, object], isa: int, threads: int,
                 max_tokens: int) -> None: ...

class Model:
    d: int
    n_act: int
    threads: int
    max_pos: int
    def __init__(self, arrays: Dict[str, np.ndarray], spec: Dict[str, object], isa: int,
                 threads: int) -> None: ...
    def run(self, arena: Arena, ids: np.ndarray, cu: np.ndarray, rows: int, markers: np.ndarray,
            mcu: np.ndarray, qtype: np.ndarray, logits: np.ndarray, act: np.ndarray,
            positions: Optional[np.ndarray] = ...,
            option_ids: Optional[np.ndarray] = ...) -> None: ...
    def embed(self, arena: Arena, ids: np.ndarray, cu: np.ndarray, rows: int,
              pooled: np.ndarray) -> None: ...

def layer_norm(x: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray], eps: float,
               out: np.ndarray, threads: int = ...) -> None: ...
def mean_pool(x: np.ndarray, cu: np.ndarray, out: np.ndarray, threads: int = ...) -> None: ...
def act_features(logits: np.ndarray, mcu: np.ndarray, out: np.ndarray) -> None: ...
def act_head(x: np.ndarray, cu: np.ndarray, logits: np.ndarray, mcu: np.ndarray, w0: np.ndarray,
             b0: np.ndarray, w2: np.ndarray, b2: np.ndarray, act: np.ndarray, isa: int,
             threads: int = ...) -> None: ...
