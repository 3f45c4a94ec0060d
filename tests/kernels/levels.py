"""The ISA levels with an attention kernel of their own on this architecture (kernels.h), which
the attention tests' `isa` fixture (conftest.py) forces in turn through KIME_ISA. On aarch64
every level from neon up runs the NEON tile and softmax, so dotprod, i8mm and bf16 are not run
again (the arm64 harness runs each model's best level)."""
from __future__ import annotations

import platform

ISAS = (["portable", "neon"]
        if platform.machine().lower() in ("aarch64", "arm64") else ["portable", "avx2", "avx512"])
