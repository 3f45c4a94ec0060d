"""The name scripts and the README have always used for the synthetic checkpoint writer, which
lives in `kime.synthetic`: `kime.testing.write_checkpoint(path, "tiny")` keeps working, and
`write_checkpoint(path, "tiny", tokenizer_template="bare")` writes the same checkpoint with a
tokenizer whose post-processor adds another template (`TOKENIZER_TEMPLATES`).

Like `kime.synthetic`, this needs only NumPy, tokenizers and safetensors, so it imports without
`kime/__init__.py` having run (`tools/make_goldens.py` does that in Laya's environment).
"""
from __future__ import annotations

from .synthetic import (OPTION_LAYOUTS, SHAPES, TOKENIZER_TEMPLATES, Shape, graph_of,
                        write_checkpoint)

__all__ = ["OPTION_LAYOUTS", "SHAPES", "Shape", "TOKENIZER_TEMPLATES", "graph_of",
           "write_checkpoint"]
