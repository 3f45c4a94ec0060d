"""Every tolerance the tests compare numbers with: one table per dtype, each entry with its why.

A test imports the entry for what it compares (`FP32.attention`, `FP16.logits`) and writes no
bare number, so a bound changes in one place for one stated reason, and two tests that compare
the same thing cannot drift apart. An entry reads as NumPy's `assert_allclose` does:
`|got - want| <= atol + rtol * |want|` (`**entry.kw`); where a test scales `atol` by a magnitude
(the largest output, |A| @ |W|, sqrt(K)), the entry's `why` says by what.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict


@dataclass(frozen=True)
class Tol:
    """One bound: relative and absolute parts, and why it is that size."""

    rtol: float
    atol: float
    why: str

    @property
    def kw(self) -> Dict[str, float]:
        """`rtol` and `atol` as keywords for `np.testing.assert_allclose` / `np.allclose`."""
        return {"rtol": self.rtol, "atol": self.atol}


@dataclass(frozen=True)
class Fp32Table:
    """FP32 kernels and FP32 forward passes (CPU, and CUDA with TF32 off) against float64 or
    against another FP32 implementation."""

    gelu: Tol = Tol(1e-6, 1e-6, "one float32 erff and three float32 products: a few ulp")
    gelu_epilogue: Tol = Tol(
        3 * 2.0 ** -24, 2.0 ** -24,
        "GEMM's vectorised GELU: three float32 roundings of the result (rtol) plus one rounding "
        "of x carried through 1 + erf's cancellation for negative x (atol, scaled by |x|)")
    layer_norm: Tol = Tol(1e-5, 1e-5, "statistics in double; the float32 rounding of x - mean "
                          "and of the products by weight, bias")
    gemm: Tol = Tol(1e-5, 1e-6, "float32 rounding of the result (rtol) plus a K-long float32 "
                    "sum's error (atol, scaled by sqrt(K) * (|A| @ |W|.T + |bias|))")
    attention: Tol = Tol(1e-5, 1e-5, "online softmax and a float32 P @ V over the row")
    rope: Tol = Tol(1e-6, 1e-6, "one float32 rotation: two products and a sum of O(1) values")
    act_features: Tol = Tol(1e-5, 1e-6, "float32 expf and logf, and k-long float32 sums whose "
                            "error grows with k")
    act_head: Tol = Tol(1e-5, 1e-6, "two float32 GEMMs (K = d + 4, then 256) and a float32 "
                        "softmax over probabilities in [0, 1]")
    logits: Tol = Tol(0.0, 1e-4, "raw option logits of one FP32 forward pass against another "
                      "(torch, the NumPy oracle, the compiled CPU kernels, CUDA with TF32 off): "
                      "the same float32 sums in another order, through every layer")
    embeddings: Tol = Tol(0.0, 1e-4, "pooled encoder vectors of one FP32 forward pass against "
                          "torch's (issue 37's bound): the same float32 sums in another order; "
                          "atol scales with the case's largest |value|")
    probs: Tol = Tol(0.0, 1e-5, "probabilities (act head, options; unrounded) of one FP32 "
                     "forward pass against another: a softmax in [0, 1] shrinks the logits' error")
    batch_logits: Tol = Tol(0.0, 1e-6, "a row alone against the same row in a batch on the "
                            "emulated CUDA backend: its float64 GEMM keeps BLAS's blocking over "
                            "the batch below float32 precision, leaving at most an ulp flip")
    batch_act: Tol = Tol(0.0, 1e-7, "batch_logits, after the act head's softmax")
    cuda_kernel: Tol = Tol(0.0, 3e-5, "a CUDA FP32 kernel against float64: FP32 math with fast "
                           "intrinsics; atol scales with max(1, |want|.max())")


@dataclass(frozen=True)
class Fp16Table:
    """The CUDA backend's FP16 (binary16 storage, FP32 arithmetic) against the FP32 references."""

    kernel: Tol = Tol(0.0, 2e-2, "a kernel's FP16 inputs and outputs (11-bit mantissa) against "
                      "float64; atol scales with max(1, |want|.max())")
    logits: Tol = Tol(0.0, 5e-2, "issue 5: raw option logits after every layer's FP16 storage")
    probs: Tol = Tol(0.0, 6e-3, "issue 5: probabilities, option and act, rounded or not (the "
                     "1e-4 of Laya's rounding is inside this bound)")
    confidence: Tol = Tol(0.0, 2.5e-2, "a normalised entropy amplifies a probability's error by "
                          "up to |log p|: about four times `probs`")


@dataclass(frozen=True)
class Int8Table:
    """The CPU's INT8 GEMMs (symmetric per-row A, per-output-channel W) and the INT8 model."""

    dequant: Tol = Tol(1e-6, 1e-6, "the kernel's dequantized output against int64 sums times "
                       "the same scales: float32 rounding only; atol scales with |want|.max()")
    epilogue: Tol = Tol(1e-5, 1e-5, "an epilogue on the dequantized sums, as FP32's; atol scales "
                        "with the largest input (squared for GEGLU)")
    rounding_slack: Tol = Tol(1e-3, 1e-5, "float32 rounding on top of the analytic INT8 rounding "
                              "bound: bound * (1 + rtol) + atol")
    gemm_relative: Tol = Tol(2e-2, 0.0, "Frobenius error of an INT8 GEMM relative to the float64 "
                             "product, on Gaussian data")
    probs: Tol = Tol(0.0, 0.15, "answer probabilities of the INT8 model against FP32: further "
                     "from Laya by design, but close")
    argmax_agreement: float = 0.85
    """The least share of questions whose INT8 argmax is FP32's."""


@dataclass(frozen=True)
class Bf16Table:
    """The CPU's BF16 GEMMs (bfloat16 weights and GEMM inputs, FP32 sums) and the BF16 model."""

    rounding: Tol = Tol(0.0, 1.01 * 2.0 ** -7, "bfloat16 keeps 8 significant bits, so rounding "
                        "A and W to nearest moves each product by at most 2^-8 + 2^-8 + 2^-16 of "
                        "its size, plus FP32's sum error (the 1%); atol scales with |A| @ |W|.T")
    attention: Tol = Tol(1e-5, 1e-5, "BF16 attention against float64 on its own rounded "
                         "operands (reference.attention_rows_bf16): FP32.attention's sums, plus "
                         "attention_probs")
    attention_probs: Tol = Tol(0.0, 1.01 * 2.0 ** -8, "BF16 attention rounds each probability "
                               "to bfloat16 (8 significant bits, nearest: 2^-8 of it) before "
                               "P @ V and sums the unrounded ones for 1 / l; atol scales with the "
                               "probability-weighted mean |v| (the reference's `mag`)")
    attention_probs_two_terms: Tol = Tol(0.0, 2.0 ** -13, "the AMX path's probabilities and "
                                         "queries in two bfloat16 terms (16 significant bits): "
                                         "2^-16 of a probability, and the scores' error from "
                                         "the queries' lo terms, with room; scales as "
                                         "attention_probs")
    logits: Tol = Tol(0.0, 0.2, "raw option logits of the BF16 model against FP32: every "
                      "encoder and head GEMM rounds its inputs to 8 significant bits, through "
                      "every layer (0.08 measured on the golden checkpoints)")
    probs: Tol = Tol(0.0, 0.05, "answer and act probabilities of the BF16 model against FP32: "
                     "the logits' error through a softmax (0.02 measured)")
    argmax_agreement: float = 0.95
    """The least share of questions whose BF16 argmax is FP32's on the random golden
    checkpoints, whose near-uniform answers flip on the smallest change (98.9% measured; on the
    bench's random `base` checkpoint `kime gate` measured 98.7% for BF16 and 91.3% for INT8)."""


@dataclass(frozen=True)
class LayaTable:
    """Numbers in Laya's answer dicts, which Laya and kime both round to four decimals."""

    last_place: Tol = Tol(0.0, 1e-4, "one unit of Laya's fourth decimal: two correct float32 "
                          "implementations can land on either side of a rounding boundary")
    rounded: Tol = Tol(0.0, 1e-4 + 1e-9, "last_place, plus float64 slack for the difference "
                       "of two four-decimal numbers (0.1235 - 0.1234 > 1e-4 in binary)")


FP32 = Fp32Table()
FP16 = Fp16Table()
INT8 = Int8Table()
BF16 = Bf16Table()
LAYA = LayaTable()
