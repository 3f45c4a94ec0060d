"""How sensitive is a checkpoint's argmax to small errors in its GEMMs? The profile behind the
INT8 gate's numbers.

    python tools/int8_sensitivity.py CHECKPOINT [--requests 200] [--noise 0.001,0.003,0.01]

Runs the gate's built-in request set through the NumPy FP32 reference (`KIME_CPU_BACKEND=
reference`) and reports the argmax agreement with plain FP32 of:

- `int8-sim`: the reference with every encoder and decision-head linear layer computed as the
  INT8 kernels compute it (weights per output channel and activations per token, symmetric, the
  same rounding), in NumPy. It should agree with `kime gate`'s numbers, which shows the gap is
  the quantization itself and not a kernel bug;
- `w-only` and `a-only`: only the weights, or only the activations, quantized;
- `noise=R`: FP32 with Gaussian noise of relative size R (per token, scaled by the output's RMS)
  added to the output of the same layers. INT8's own error is about 1% per layer, so the
  agreement at R = 0.01 is what any 8-bit scheme can expect on this checkpoint.

Slow (the reference is row by row); meant for the `tiny` checkpoints.
"""
from __future__ import annotations

import argparse
import os
import sys
import warnings
from typing import Any, Callable, Dict, List, Optional

import numpy as np

os.environ["KIME_CPU_BACKEND"] = "reference"
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# after the backend choice and the path, which these imports read
import kime._cpu.reference as R
from kime import Kime
from kime.precision_gate import builtin_requests, compare

F32 = np.float32


def quantize_rows(x: np.ndarray) -> np.ndarray:
    """Symmetric per-row INT8, dequantized: the kernels' `amax / 127` rule (qgemm.h)."""
    amax = np.abs(x).max(axis=-1, keepdims=True).astype(F32)
    inv = np.where(amax > 0, F32(127) / np.maximum(amax, F32(1e-30)), F32(0)).astype(F32)
    q = np.clip(np.rint(x * inv), -127, 127)
    return (q * (amax / F32(127))).astype(F32)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--noise", default="0.001,0.003,0.01")
    args = ap.parse_args(argv)
    warnings.simplefilter("ignore")
    reqs = builtin_requests(args.requests)
    eng = Kime(args.checkpoint, device="cpu", precision="f32", answer_cache=0)
    base = eng.decide_batch(reqs, cache=False)
    model = eng.backend.model  # the ReferenceModel (KIME_CPU_BACKEND=reference)
    gemm_weights = {id(model.w[n]) for n in eng.checkpoint.weights.keys()
                    if n.startswith(("encoder.layers.", "head.layers.")) and n.endswith("weight")
                    and model.w[n].ndim == 2}
    plain = R.linear
    cache: Dict[int, np.ndarray] = {}
    rng = np.random.default_rng(0)

    def quantized(weights: bool, acts: bool) -> Callable[..., np.ndarray]:
        def linear(x: np.ndarray, w: np.ndarray, b: Any = None) -> np.ndarray:
            if id(w) not in gemm_weights:
                return plain(x, w, b)
            wq = w
            if weights:
                wq = cache.get(id(w))
                if wq is None:
                    wq = cache[id(w)] = quantize_rows(w)
            x2 = x.reshape(-1, x.shape[-1])
            y = ((quantize_rows(x2) if acts else x2) @ wq.T).reshape(*x.shape[:-1], w.shape[0])
            return y + b if b is not None else y
        return linear

    def noisy(level: float) -> Callable[..., np.ndarray]:
        def linear(x: np.ndarray, w: np.ndarray, b: Any = None) -> np.ndarray:
            y = plain(x, w, b)
            if id(w) in gemm_weights:
                rms = np.sqrt((y ** 2).mean(axis=-1, keepdims=True))
                y = y + rng.standard_normal(y.shape).astype(F32) * rms * F32(level)
            return y
        return linear

    variants = [("int8-sim", quantized(True, True)), ("w-only", quantized(True, False)),
                ("a-only", quantized(False, True))]
    variants += [("noise=%s" % lv, noisy(float(lv))) for lv in args.noise.split(",") if lv]
    print("%s: %d requests, %d questions; argmax agreement with FP32 per type"
          % (args.checkpoint, len(reqs), 3 * len(reqs)))
    try:
        for name, fn in variants:
            R.linear = fn
            got = eng.decide_batch(reqs, cache=False)
            stats = compare(reqs, base, got)["by_type"]
            n = sum(s.options for s in stats.values())
            print("  %-12s %s   mean |dp| %.5f" % (
                name, "  ".join("%s %6.2f%%" % (t, 100 * s.agreement) for t, s in stats.items()),
                sum(s.sum_prob_diff for s in stats.values()) / n), flush=True)
    finally:
        R.linear = plain
    return 0


if __name__ == "__main__":
    sys.exit(main())
