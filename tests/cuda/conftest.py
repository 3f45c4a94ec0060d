"""GPU tests skip, with the reason printed (`-ra`), where CuPy or a GPU is missing."""
from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gpu():
    """CuPy, when GPU 0 can run kime; otherwise the test skips saying why."""
    from kime._cuda.device import probe

    reason = probe(0)
    if reason is not None:
        pytest.skip("no usable GPU: %s" % reason.split(" (")[0])
    import cupy

    return cupy


@pytest.fixture(scope="session")
def mma_ok(gpu) -> bool:
    """Whether GPU 0 runs the tensor-core attention (compute capability 8.0 or newer)."""
    return int(gpu.cuda.Device(0).compute_capability) >= 80
