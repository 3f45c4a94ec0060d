"""kime._cpu._ops against plain float64 references built from `math.erf` and NumPy.

The references are written the slow, obvious way so a wrong kernel cannot share a bug with them.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kime._cpu import _ops

SHAPES = [(0, 5), (1, 1), (1, 64), (7, 13), (33, 65), (128, 96)]
GELU_TOL = {"rtol": 1e-6, "atol": 1e-6}
LAYER_NORM_TOL = {"rtol": 1e-5, "atol": 1e-5}


def gelu_reference(x: np.ndarray) -> np.ndarray:
    wide = x.astype(np.float64)
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return wide * 0.5 * (1.0 + erf(wide / math.sqrt(2.0)))


def layer_norm_reference(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None,
                         eps: float) -> np.ndarray:
    wide = x.astype(np.float64)
    mean = wide.mean(axis=1, keepdims=True)
    variance = ((wide - mean) ** 2).mean(axis=1, keepdims=True)
    out = (wide - mean) / np.sqrt(variance + eps) * weight.astype(np.float64)
    if bias is not None:
        out = out + bias.astype(np.float64)
    return out


def random_rows(shape: tuple[int, int], seed: int, scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(np.float32)


@pytest.mark.parametrize("shape", SHAPES)
def test_gelu_erf_matches_reference(shape):
    x = random_rows(shape, seed=1)
    out = np.full_like(x, np.nan)
    _ops.gelu_erf(x, out)
    np.testing.assert_allclose(out, gelu_reference(x), **GELU_TOL)


def test_gelu_erf_is_torch_float32_formula():
    # Torch computes 0.5f * x * (1.0f + erff(x * (float)M_SQRT1_2)), every step rounded to float32.
    # libm's erff may differ from a correctly rounded erf by an ulp, hence maxulp=1, not equality.
    x = np.array([[-6.0, -1.5, -0.0, 0.0, 1e-7, 0.5, 1.0, 3.25, 10.0]], dtype=np.float32)
    out = np.empty_like(x)
    _ops.gelu_erf(x, out)
    alpha = np.float32(math.sqrt(0.5))
    expected = [np.float32(0.5) * v * (np.float32(1.0) + np.float32(math.erf(np.float32(v * alpha))))
                for v in x[0]]
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
    expected = gelu_reference(x[:, :half]) * x[:, half:].astype(np.float64)
    np.testing.assert_allclose(out, expected, **GELU_TOL)


@pytest.mark.parametrize("shape", SHAPES[1:])
@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_norm_matches_reference(shape, with_bias):
    x = random_rows(shape, seed=4) + np.float32(2.0)
    weight = random_rows((shape[1],), seed=5, scale=1.0)
    bias = random_rows((shape[1],), seed=6, scale=1.0) if with_bias else None
    out = np.full_like(x, np.nan)
    _ops.layer_norm(x, weight, bias, 1e-5, out)
    np.testing.assert_allclose(out, layer_norm_reference(x, weight, bias, 1e-5), **LAYER_NORM_TOL)


def test_layer_norm_no_rows():
    x = np.empty((0, 8), dtype=np.float32)
    _ops.layer_norm(x, np.ones(8, np.float32), None, 1e-5, np.empty_like(x))


def test_layer_norm_constant_row_is_bias():
    # Zero variance: the eps keeps it finite and the normalised row is exactly zero.
    x = np.full((2, 9), 4.0, dtype=np.float32)
    bias = np.arange(9, dtype=np.float32)
    out = np.empty_like(x)
    _ops.layer_norm(x, np.ones(9, np.float32), bias, 1e-5, out)
    np.testing.assert_array_equal(out, np.broadcast_to(bias, x.shape))


@pytest.mark.parametrize("with_bias", [False, True])
def test_layer_norm_in_place(with_bias):
    x = random_rows((33, 65), seed=7)
    weight = random_rows((65,), seed=8)
    bias = random_rows((65,), seed=9) if with_bias else None
    expected = np.empty_like(x)
    _ops.layer_norm(x, weight, bias, 1e-5, expected)
    _ops.layer_norm(x, weight, bias, 1e-5, x)
    np.testing.assert_array_equal(x, expected)


def run_all(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, threads: int) -> list[np.ndarray]:
    gelu = np.empty_like(x)
    _ops.gelu_erf(x, gelu, threads)
    gated = np.empty((x.shape[0], x.shape[1] // 2), dtype=np.float32)
    _ops.geglu(x, gated, threads)
    normed = np.empty_like(x)
    _ops.layer_norm(x, weight, bias, 1e-5, normed, threads)
    return [gelu, gated, normed]


@pytest.mark.parametrize("shape", [(1, 96), (7, 14), (128, 96), (257, 64)])
def test_thread_count_does_not_change_bits(shape):
    x = random_rows(shape, seed=10)
    weight = random_rows((shape[1],), seed=11)
    bias = random_rows((shape[1],), seed=12)
    for single, double in zip(run_all(x, weight, bias, 1), run_all(x, weight, bias, 2)):
        np.testing.assert_array_equal(single, double)


def test_row_bits_do_not_depend_on_batch():
    x = random_rows((64, 96), seed=13)
    weight = random_rows((96,), seed=14)
    whole = np.empty_like(x)
    _ops.layer_norm(x, weight, None, 1e-5, whole, 2)
    alone = np.empty((1, 96), dtype=np.float32)
    _ops.layer_norm(x[37:38], weight, None, 1e-5, alone, 1)
    np.testing.assert_array_equal(alone[0], whole[37])


def test_openmp_report_is_consistent():
    assert isinstance(_ops.has_openmp(), bool)
    assert _ops.omp_max_threads() >= 1
    if not _ops.has_openmp():
        assert _ops.omp_max_threads() == 1


def test_shape_mismatches_raise():
    x = np.zeros((4, 6), dtype=np.float32)
    weight = np.ones(6, dtype=np.float32)
    with pytest.raises(ValueError, match="gelu_erf"):
        _ops.gelu_erf(x, np.zeros((4, 5), np.float32))
    with pytest.raises(ValueError, match="gelu_erf"):
        _ops.gelu_erf(x, np.zeros((3, 6), np.float32))
    with pytest.raises(ValueError, match="even"):
        _ops.geglu(np.zeros((4, 7), np.float32), np.zeros((4, 3), np.float32))
    with pytest.raises(ValueError, match=r"expected \(4, 3\)"):
        _ops.geglu(x, np.zeros((4, 6), np.float32))
    with pytest.raises(ValueError, match="weight has 5"):
        _ops.layer_norm(x, np.ones(5, np.float32), None, 1e-5, np.zeros_like(x))
    with pytest.raises(ValueError, match="bias has 7"):
        _ops.layer_norm(x, weight, np.ones(7, np.float32), 1e-5, np.zeros_like(x))
    with pytest.raises(ValueError, match="out has shape"):
        _ops.layer_norm(x, weight, None, 1e-5, np.zeros((4, 7), np.float32))
    with pytest.raises(ValueError, match="at least one column"):
        _ops.layer_norm(np.zeros((2, 0), np.float32), np.ones(0, np.float32), None, 1e-5,
                        np.zeros((2, 0), np.float32))
    with pytest.raises(ValueError, match="threads"):
        _ops.gelu_erf(x, np.zeros_like(x), 0)


def test_wrong_dtype_or_layout_is_refused():
    # Cython's buffer check raises ValueError for both; no silent copy or cast.
    x64 = np.zeros((2, 4), dtype=np.float64)
    with pytest.raises(ValueError):
        _ops.gelu_erf(x64, np.zeros((2, 4), np.float32))
    strided = np.zeros((4, 4), dtype=np.float32)[:, ::2]
    with pytest.raises(ValueError):
        _ops.gelu_erf(strided, np.zeros((4, 2), np.float32))
