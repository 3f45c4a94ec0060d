"""The backend boundary and how a device name becomes a backend.

A backend runs a packed `Batch` into `Outputs` and reports the bytes it holds. The engine
reaches the compiled backends only through `open_backend`, so `import kime` never imports a
backend (or CuPy).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional, Protocol, Tuple

from .batch import Batch, Outputs
from .checkpoint import Checkpoint
from .errors import (BadDeviceOrdinal, BadOption, CudaMismatch, CudaUnavailable,  # noqa: F401
                     CupyMissing, NoGpu, Unsupported)

PRECISIONS = {"f16": "f16", "fp16": "f16", "float16": "f16", "half": "f16",
              "f32": "f32", "fp32": "f32", "float32": "f32",
              "int8": "int8", "i8": "int8"}


@dataclass(frozen=True)
class Memory:
    """Bytes a model holds on its device: the weights in the device's layout, and the plans
    (arenas and staging buffers) built so far."""

    weights: int
    plans: int


class Backend(Protocol):
    name: str
    threads: int

    def run(self, batch: Batch) -> Outputs: ...

    def memory(self) -> Memory: ...

    def describe(self) -> str: ...


def cpu_count() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def parse_device(device: Optional[str]) -> Tuple[str, int]:
    """`auto`, `cpu`, `cuda`, `cuda:N` -> (kind, ordinal). Others are refused clearly."""
    name = "auto" if device is None else str(device).strip().lower()
    if name in ("auto", "cpu"):
        return name, 0
    if name == "cuda" or name.startswith("cuda:"):
        ordinal = name.partition(":")[2] or "0"
        if not ordinal.isdigit():
            raise BadOption("device %r: a CUDA device is 'cuda' or 'cuda:N' with N a GPU ordinal"
                            % (device,))
        return "cuda", int(ordinal)
    if name in ("metal", "mps", "ane"):
        raise Unsupported("device %r: the Apple backends are not part of kime yet; use "
                          "device='cpu'" % (device,))
    raise BadOption("device %r is not a device kime knows; use 'auto', 'cpu', 'cuda' or 'cuda:N'"
                    % (device,))


def parse_precision(precision: Optional[str]) -> str:
    if precision is None:
        return "f16"
    key = str(precision).strip().lower()
    if key not in PRECISIONS:
        raise BadOption("precision %r is not one kime knows; use 'f16', 'f32' or 'int8'"
                        % (precision,))
    return PRECISIONS[key]


def check_options(device: Optional[str], precision: Optional[str], threads: int) -> Tuple[str, int, str]:
    """Refuse a device, precision or thread count that cannot run, before any weight is read.
    Returns (device kind, ordinal, precision). For `cuda` this imports CuPy and finds the GPU, so
    each reason a GPU cannot run raises its own `CudaUnavailable` here."""
    kind, ordinal = parse_device(device)
    prec = parse_precision(precision)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise BadOption("threads must be 0 (every core) or a positive integer, got %r" % (threads,))
    if kind == "cuda":
        if prec == "int8":
            raise Unsupported("precision='int8' runs on the CPU only; on device=%r use 'f16' (the "
                              "default) or 'f32'" % (device,))
        from ._cuda.device import open_cupy

        open_cupy(ordinal)
    return kind, ordinal, prec


def resolve_auto(precision: str) -> str:
    """`auto`: `cuda` when CuPy imports and a GPU is there (and the precision runs on one),
    else `cpu`. The chosen device is what the backend's `describe()` reports."""
    if precision == "int8":
        return "cpu"
    from ._cuda.device import probe

    return "cuda" if probe(0) is None else "cpu"


def open_backend(ck: Checkpoint, device: Optional[str], precision: Optional[str],
                 threads: int, preload: bool = False) -> Backend:
    """The backend for a device and precision: `auto` is CUDA when a GPU runs here, else the CPU.

    On a GPU that is the CuPy backend (`f16` by default, or `f32`). On the CPU it is the compiled
    backend, where `f16` and `f32` both compute in FP32; `KIME_CPU_BACKEND=reference` picks the
    NumPy reference instead (slow; the oracle the tests compare against).
    """
    kind, ordinal, prec = check_options(device, precision, threads)
    if kind == "auto":
        kind = resolve_auto(prec)
    if kind == "cuda":
        from ._cuda.backend import CudaBackend

        return CudaBackend(ck, ordinal=ordinal, precision=prec, preload=preload, threads=threads)
    from ._cpu.backend import CpuBackend, ReferenceBackend

    choice = os.environ.get("KIME_CPU_BACKEND", "compiled").strip().lower()
    if choice == "reference":
        if prec == "int8":
            raise Unsupported("precision='int8' runs on the compiled CPU backend, not the NumPy "
                              "reference (KIME_CPU_BACKEND=reference)")
        return ReferenceBackend(ck, threads or cpu_count())
    if choice != "compiled":
        raise BadOption("KIME_CPU_BACKEND=%r: use 'compiled' (the default) or 'reference'" % choice)
    return CpuBackend(ck, threads or cpu_count(), preload=preload, int8=prec == "int8")
