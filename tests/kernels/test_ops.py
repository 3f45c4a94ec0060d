"""kime._cpu._ops (exact-erf GELU and GeGLU) against the plain float64 references of
reference.py, built from `math.erf` and NumPy. (The forward pass's LayerNorm is forward.c's:
test_layer_norm.py.)

The references are written the slow, obvious way so a wrong kernel cannot share a bug with them.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kime._cpu import _ops

from ..tolerances import FP32
from . import reference

SHAPES = [(0, 5), (1, 1), (1, 64), (7, 13), (33, 65), (128, 96)]


def random_rows(shape: tuple[int, int], seed: int, scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_erf_matches_reference(shape):
    x = random_rows(shape, seed=1)
    out = np.full_like(x, np.nan)
    _ops.gelu_erf(x, out)
    np.testing.assert_allclose(out, reference.gelu(x), **FP32.gelu.kw)


def test_gelu_erf_is_torch_float32_formula():
    # Torch computes 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)), every step rounded to float32.
    # libm's erff may differ from a correctly rounded erf by an ulp, hence maxulp=1, not equality.
    x = np.array([[-6.0, -1.5, -0.0, 0.0, 1e-7, 0.5, 1.0, 3.25, 10.0]], dtype=np.float32)
    out = np.empty_like(x)
    _ops.gelu_erf(x, out)
    alpha = np.float32(math.sqrt(0.5))
    expected = [np.float32(0.5) * v
                * (np.float32(1.0) + np.float32(math.erf(np.float32(v * alpha)))) for v in x[0]]
    np.testing.assert_array_max_ulp(out[0], np.array(expected, dtype=np.float32), maxulp=1)


def test_gelu_erf_in_place():
    x = random_rows((7, 13), seed=2)
    expected = np.empty_like(x)
    _ops.gelu_erf(x, expected)
    _ops.gelu_erf(x, x)
    np.testing.assert_array_equal(x, expected)


@pytest.mark.parametrize("shape", SHAPES)
def test_geglu_matches_reference(shape):
    rows, half = shape
    x = random_rows((rows, 2 * half), seed=3)
    out = np.full((rows, half), np.nan, dtype=np.float32)
    _ops.geglu(x, out)
    expected = reference.geglu(x, None, half)
    np.testing.assert_allclose(out, expected, **FP32.gelu.kw)


@pytest.mark.parametrize("shape", [(1, 96), (7, 14), (128, 96), (257, 64)])
def test_a_row_has_its_bits_whatever_its_batch(shape):
    x = random_rows(shape, seed=10)
    gelu, gated = np.empty_like(x), np.empty((shape[0], shape[1] // 2), np.float32)
    _ops.gelu_erf(x, gelu)
    _ops.geglu(x, gated)
    for row in (0, shape[0] // 2, shape[0] - 1):
        alone, alone_gated = np.empty_like(x[row:row + 1]), np.empty_like(gated[row:row + 1])
        _ops.gelu_erf(x[row:row + 1], alone)
        _ops.geglu(x[row:row + 1], alone_gated)
        assert alone.tobytes() == gelu[row].tobytes()
        assert alone_gated.tobytes() == gated[row].tobytes()


def test_shape_mismatches_raise():
    x = np.zeros((4, 6), dtype=np.float32)
    with pytest.raises(ValueError, match="gelu_erf"):
        _ops.gelu_erf(x, np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="gelu_erf"):
        _ops.gelu_erf(x, np.zeros((3, 6), np.float32))
    with pytest.raises(ValueError, match="even"):
        _ops.geglu(np.zeros((4, 7), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"expected \(4, 3\)"):
        _ops.geglu(x, np.zeros((4, 6), np.float32))


def test_wrong_dtype_or_layout_is_refused():
    # Cython's buffer check raises ValueError for both; no silent copy or cast.
    x64 = np.zeros((2, 4), dtype=np.float64)
    with pytest.raises(ValueError):
        _ops.gelu_erf(x64, np.zeros((2, 4), np.float32))
    strided = np.zeros((4, 4), dtype=np.float32)[:, ::2]
    with pytest.raises(ValueError):
        _ops.gelu_erf(strided, np.zeros((4, 2), np.float32))
