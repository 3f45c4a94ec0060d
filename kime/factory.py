"""Which backend runs a model: a device and precision become a `Backend`.

The engine opens its backend here, and this is the only module that imports `_cpu` or `_cuda`,
always lazily, so `import kime` never imports a compiled backend (or CuPy) and the backend
contract (`kime.backend`) imports none of them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Union

from .backend import Backend, Device, Precision, cpu_count, parse_threads
from .checkpoint import Checkpoint
from .errors import BadOption, Unsupported


@dataclass(frozen=True)
class Target:
    """A device and precision, both resolved: what a backend is opened for."""

    device: Device
    precision: Precision


def check_options(device: Union[str, Device, Target, None],
                  precision: Union[str, Precision, None], threads: object) -> Target:
    """Refuse a device, precision or thread count that cannot run, before any weight is read,
    and resolve `auto`: the one parse of a caller's device and precision, done where the
    caller's strings enter (`kime.Kime`, Laya's `load`); what it returns travels down typed.

    For `cuda` this imports CuPy and finds the GPU, so each reason a GPU cannot run raises its
    own `CudaUnavailable` here. A `Target` passed as `device` was checked by an outer layer and
    is returned as it is, with `precision` left unset (`auto`) or naming the same precision.
    """
    if isinstance(device, Target):
        return _checked(device, precision, threads)
    dev = Device.parse(device)
    prec = Precision.parse(precision)
    parse_threads(threads)
    if dev.is_auto:
        dev = resolve_auto(prec)
        if dev.kind == "cuda":  # the probe that picked it has just opened CuPy on it
            return Target(dev, prec.on(dev))
    if dev.kind == "cuda":
        prec = prec.on(dev)  # refuses int8 and bf16 before CuPy is asked anything
        from ._cuda.device import open_cupy

        open_cupy(dev.ordinal)
        return Target(dev, prec)
    prec = prec.on(dev)
    if prec is Precision.BF16:
        from ._cpu.backend import check_bf16

        check_bf16()
    return Target(dev, prec)


def _checked(target: Target, precision: Union[str, Precision, None], threads: object) -> Target:
    """A `Target` handed down from an edge, taken as it is: CuPy is not asked again. A precision
    given beside it must agree with it; a hand-made one still holding `auto` is checked."""
    parse_threads(threads)
    if Precision.parse(precision) not in (Precision.AUTO, target.precision):
        raise BadOption("precision=%r contradicts the Target's %r; give the precision once"
                        % (str(precision), str(target.precision)))
    if target.device.is_auto or target.precision is Precision.AUTO:
        return check_options(target.device, target.precision, threads)
    return target


def resolve_auto(precision: Precision) -> Device:
    """`auto`: GPU 0 when CuPy imports and a GPU answers (and the precision runs on one), else
    the CPU. The backend's `describe()` says which was picked."""
    if precision in (Precision.INT8, Precision.BF16):
        return Device("cpu")
    from ._cuda.device import probe

    return Device("cuda", 0) if probe(0) is None else Device("cpu")


def open_backend(ck: Checkpoint, target: Target, threads: int = 0,
                 preload: bool = False) -> Backend:
    """The backend for a device and precision that `check_options` resolved (so nothing here
    parses a string or asks CuPy again).

    On a GPU that is the CuPy backend (`f16` by default, or `f32`). On the CPU it is the compiled
    backend (`f32` by default, `int8`, or `bf16`); `KIME_CPU_BACKEND=reference` picks the NumPy
    reference instead (slow; the oracle the tests compare against).
    """
    if target.device.kind == "cuda":
        from ._cuda.backend import CudaBackend

        return CudaBackend(ck, ordinal=target.device.ordinal, precision=target.precision,
                           preload=preload, threads=threads)
    n_threads = threads or cpu_count()
    choice = os.environ.get("KIME_CPU_BACKEND", "compiled").strip().lower()
    if choice == "reference":
        if target.precision is not Precision.F32:
            raise Unsupported("precision=%r runs on the compiled CPU backend, not the NumPy "
                              "reference (KIME_CPU_BACKEND=reference)" % str(target.precision))
        from ._cpu.backend import ReferenceBackend

        return ReferenceBackend(ck, n_threads)
    if choice != "compiled":
        raise BadOption("KIME_CPU_BACKEND=%r: use 'compiled' (the default) or 'reference'" % choice)
    from ._cpu.backend import CpuBackend

    return CpuBackend(ck, n_threads, precision=target.precision, preload=preload)



def backend_report() -> dict[str, dict[str, object]]:
    """What the backends find on this machine, for `kime doctor`, so the CLI asks here instead
    of importing `_cpu` or `_cuda`: the CPU kernels this build and CPU run (or why they do not
    load), the NVIDIA driver and the CuPy wheel that fits it, whether GPU 0 runs (and so what
    `device="auto"` picks), and where packed weights are cached. Nothing here raises for a
    broken build or a missing GPU: reporting those is what the doctor is for."""
    cpu: dict[str, object] = {}
    try:
        from ._cpu.backend import kernels_report

        cpu.update(kernels_report())
    except Exception as e:
        cpu["isa"] = None
        cpu["openmp"] = None
        cpu["pool_spin_us"] = None
        cpu["error"] = "%s: %s" % (type(e).__name__, e)
    from ._cuda.device import cupy_advice, driver_cuda_version, installed_cupy, probe

    driver, source = driver_cuda_version()
    cuda0 = probe(0)  # None: device='cuda' runs here; else why not
    gpu: dict[str, object] = {
        "driver_cuda": None if driver is None else "%d.%d" % (driver // 1000, driver % 1000 // 10),
        "driver_cuda_from": source if driver is not None else None,
        "cupy_for_driver": cupy_advice(driver, installed_cupy(), why=source),
        "cuda0": cuda0,
        "auto": "cuda" if cuda0 is None else "cpu",  # as resolve_auto picks for f32 and f16
    }
    from ._cpu.weights import cache_dir

    return {"cpu": cpu, "gpu": gpu, "caches": {"packed": cache_dir()}}


def auto_device_kind() -> str:
    """The kind of device (`cpu`, `cuda`) that `device="auto"` opens at the default precision,
    found as `resolve_auto` finds it (GPU 0 probed quietly) without opening a backend: for a
    layer that says where models will load before any is loaded (the server's `/health`)."""
    return resolve_auto(Precision.AUTO).kind
