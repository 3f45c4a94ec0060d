"""Outlier features in a written checkpoint, the way pretrained encoders carry them.

Trained BERT-family encoders have a few hidden dimensions whose norm weights are tens of times
the rest (Kovaleva et al., "BERT Busters", 2021; Dettmers et al., "LLM.int8()", 2022), so after
those norms a token's largest value is far above its others. A GEMM that quantizes each
token's activations to INT8 with one scale then spends its 255 levels on that dimension and
rounds the rest to a few steps: INT8 fails in those layers and holds in the others. Random
checkpoints have no such dimensions, so the per-layer precision gate could not be tested on
them; `inject_outliers` puts them in.

The change leaves the FP32 model's function as it was: a dimension's norm weight is multiplied
by `gain` and the same input column of the GEMM that reads the norm's output is divided by it,
so `W @ (g * x)` is unchanged. `gain` is a power of two, so in FP16 both are exact (but for
weights that fall below FP16's normal range).
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, Sequence, Union

import numpy as np

# Each encoder norm, and the GEMM that reads its output (by input column).
_NORMED = (("attn_norm", "attn.Wqkv"), ("mlp_norm", "mlp.Wi"))


def inject_outliers(path: Union[str, Path], layers: Sequence[int],
                    channels: Sequence[int] = (3, 77), gain: float = 64.0) -> Path:
    """Give encoder `layers` of the checkpoint at `path` outlier `channels` (hidden dimensions)
    after both their norms (layer 0 has no attention norm: only its MLP norm), in place;
    returns the path. Raises ValueError for a layer or channel the checkpoint does not have or
    a gain that is not a power of two above 1."""
    from safetensors.numpy import load_file, save_file

    mantissa, _ = np.frexp(gain)
    if gain <= 1 or mantissa != 0.5:
        raise ValueError("gain must be a power of two above 1, got %r" % (gain,))
    root = Path(path)
    weights = root / "model.safetensors"
    tensors: Dict[str, np.ndarray] = dict(load_file(str(weights)))
    hidden = tensors["encoder.embeddings.norm.weight"].shape[0]
    bad = [c for c in channels if not 0 <= c < hidden]
    if bad:
        raise ValueError("channels %s are outside the hidden size %d" % (bad, hidden))
    cols = list(channels)
    for i in layers:
        prefix = "encoder.layers.%d." % i
        if prefix + "mlp_norm.weight" not in tensors:
            raise ValueError("the checkpoint has no encoder layer %d" % i)
        for norm, gemm in _NORMED:
            if prefix + norm + ".weight" not in tensors:
                continue  # layer 0's attention reads the embedding norm's output
            w = tensors[prefix + norm + ".weight"].astype(np.float32)
            w[cols] *= np.float32(gain)
            tensors[prefix + norm + ".weight"] = w.astype(np.float16)
            m = tensors[prefix + gemm + ".weight"].astype(np.float32)
            m[:, cols] /= np.float32(gain)
            tensors[prefix + gemm + ".weight"] = m.astype(np.float16)
    mode = weights.stat().st_mode
    save_file(tensors, str(weights), metadata={"format": "pt"})
    weights.chmod(mode & 0o777)  # safetensors writes 0600; keep the file's own mode
    return root
