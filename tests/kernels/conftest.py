"""Fixtures of the attention kernels' tests (test_attention*.py, which use them by name): each
ISA level in turn, and one BLAS thread for their float64 references. The GEMM tests parametrize
their own `isa` (integer levels), which takes precedence over this fixture."""
from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]

from kime._cpu import _attention

from .levels import ISAS


@pytest.fixture
def one_blas_thread():
    """The references run many small matmuls; BLAS threads only add start-up and contention."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


@pytest.fixture(params=ISAS)
def isa(request, monkeypatch):
    """An attention ISA level forced through KIME_ISA; skipped where this CPU lacks it."""
    monkeypatch.setenv("KIME_ISA", request.param)
    if _attention.isa() != request.param:
        pytest.skip(f"this CPU has no {request.param}")
    return request.param
