"""Type stubs for the compiled forward pass (see _forward.pyx)."""
from typing import Dict

import numpy as np

MAX_LAYERS: int
ACT_HIDDEN: int

def isa_detect() -> int: ...
def isa_name(isa: int) -> str: ...

class Arena:
    nbytes: int
    def __init__(self, spec: Dict[str, object], isa: int, threads: int, max_tokens: int) -> None: ...

class Model:
    d: int
    n_act: int
    threads: int
    max_pos: int
    def __init__(self, arrays: Dict[str, np.ndarray], spec: Dict[str, object], isa: int,
                 threads: int) -> None: ...
    def run(self, arena: Arena, ids: np.ndarray, cu: np.ndarray, rows: int, markers: np.ndarray,
            mcu: np.ndarray, qtype: np.ndarray, logits: np.ndarray, act: np.ndarray) -> None: ...
