"""Which backend runs a model: a device and precision become a `Backend`.

The engine opens its backend here, and this is the only module that imports `_cpu` or `_cuda`,
always lazily, so `import kime` never imports a compiled backend (or CuPy) and the backend
contract (`kime.backend`) imports none of them.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, NamedTuple, Optional, Sequence, Union

from . import gpu_check
from .backend import CPU_ONLY, Backend, Device, Precision, cpu_count, parse_threads
from .checkpoint import Checkpoint
from .errors import BadOption, CudaSelfCheckFailed, Unsupported, warn_caller
from .gpu_check import GpuCheck

if TYPE_CHECKING:
    from ._cuda.backend import CudaBackend


@dataclass(frozen=True)
class Target:
    """A device and precision, both resolved: what a backend is opened for.

    `cpu_fallback`: a GPU that fails the CUDA self-check hands the model to the CPU with a
    warning instead of raising (`auto`'s way, and Laya's `load`'s). It says what to do on a
    failure, not where the model runs, so two targets that differ only there are equal."""

    device: Device
    precision: Precision
    cpu_fallback: bool = field(default=False, compare=False)


def check_options(device: Union[str, Device, Target, None],
                  precision: Union[str, Precision, None], threads: object) -> Target:
    """Refuse a device, precision or thread count that cannot run, before any weight is read,
    and resolve `auto`: the one parse of a caller's device and precision, done where the
    caller's strings enter (`kime.Kime`, Laya's `load`); what it returns travels down typed.

    For `cuda` this imports CuPy and finds the GPU, so each reason a GPU cannot run raises its
    own `CudaUnavailable` here. `auto` resolved to a GPU falls back to the CPU should that GPU
    fail the self-check at load (`Target.cpu_fallback`); an explicit `cuda` refuses instead. A
    `Target` passed as `device` was checked by an outer layer and is returned as it is, with
    `precision` left unset (`auto`) or naming the same precision.
    """
    if isinstance(device, Target):
        return _checked(device, precision, threads)
    dev = Device.parse(device)
    prec = Precision.parse(precision)
    parse_threads(threads)
    if dev.is_auto:
        dev = resolve_auto(prec)
        if dev.kind == "cuda":  # the probe that picked it has just opened CuPy on it
            return Target(dev, prec.on(dev), cpu_fallback=True)
    if dev.kind == "cuda":
        prec = prec.on(dev)  # refuses int8, bf16 and mixed before CuPy is asked anything
        from ._cuda.device import open_cupy

        open_cupy(dev.ordinal)
        return Target(dev, prec)
    # a refusal of 'f16' suggests 'bf16' only where it runs
    prec = prec.on(dev, cpu_bf16=prec is not Precision.F16 or bf16_missing() is None)
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
        resolved = check_options(target.device, target.precision, threads)
        return replace(resolved, cpu_fallback=resolved.cpu_fallback or target.cpu_fallback)
    return target


def resolve_auto(precision: Precision) -> Device:
    """`auto`: GPU 0 when CuPy imports and a GPU answers (and the precision runs on one), else
    the CPU. The backend's `describe()` says which was picked."""
    if precision in CPU_ONLY:
        return Device("cpu")
    from ._cuda.device import probe

    return Device("cuda", 0) if probe(0) is None else Device("cpu")


class Opened(NamedTuple):
    """A backend, and the CUDA self-check its load ran or read (None on the CPU by choice, or
    with KIME_CUDA_SELFCHECK=0)."""

    backend: Backend
    gpu_check: Optional[GpuCheck]


def open_backend(ck: Checkpoint, target: Target, threads: int = 0,
                 preload: bool = False) -> Opened:
    """The backend for a device and precision that `check_options` resolved (so nothing here
    parses a string or asks CuPy again).

    On a GPU that is the CuPy backend (`f16` by default, or `f32`), once it has passed the CUDA
    self-check (`kime.gpu_check`); one that fails it is closed before it answers anything, and
    the model opens on the CPU with a warning when `target.cpu_fallback`, else
    `CudaSelfCheckFailed` is raised. On the CPU it is the compiled backend (`f32` by default,
    `int8`, `bf16`, or `mixed`: each layer as the checkpoint's layer choice says,
    `kime.layer_choice`); `KIME_CPU_BACKEND=reference` picks the NumPy reference instead (slow;
    the oracle the tests compare against).
    """
    if target.device.kind == "cuda":
        from ._cuda.backend import CudaBackend

        gpu = CudaBackend(ck, ordinal=target.device.ordinal, precision=target.precision,
                          preload=preload, threads=threads)
        return _self_checked(ck, gpu, target, threads, preload)
    return Opened(_open_cpu(ck, target.precision, threads, preload), None)


def _self_checked(ck: Checkpoint, gpu: "CudaBackend", target: Target, threads: int,
                  preload: bool) -> Opened:
    """`gpu` once the self-check passed; else the CPU or `CudaSelfCheckFailed`."""
    if not gpu_check.enabled():
        return Opened(gpu, None)
    try:
        check = gpu_check.verify(ck, gpu, gpu.identity(), lambda: probe_cpu(ck, threads))
    except BaseException:
        gpu.close()
        raise
    if check.passed:
        return Opened(gpu, check)
    gpu.close()
    if not target.cpu_fallback:
        raise CudaSelfCheckFailed(gpu_check.refusal(check), check)
    warn_caller(gpu_check.fallback_warning(check))
    return Opened(_open_cpu(ck, Precision.F32, threads, preload), check)


def probe_cpu(ck: Checkpoint, threads: int = 0) -> Backend:
    """The CPU backend the CUDA self-check compares a GPU with: FP32, its weights packed in
    memory only, so a GPU load leaves no packed CPU copy on disk (hundreds of MB)."""
    return _open_cpu(ck, Precision.F32, threads, use_cache=False)


def _open_cpu(ck: Checkpoint, precision: Precision, threads: int, preload: bool = False,
              use_cache: bool = True) -> Backend:
    """The CPU backend `KIME_CPU_BACKEND` names; `use_cache=False` keeps its packed weights out
    of the on-disk cache."""
    n_threads = threads or cpu_count()
    choice = os.environ.get("KIME_CPU_BACKEND", "compiled").strip().lower()
    if choice == "reference":
        if precision is not Precision.F32:
            raise Unsupported("precision=%r runs on the compiled CPU backend, not the NumPy "
                              "reference (KIME_CPU_BACKEND=reference)" % str(precision))
        from ._cpu.backend import ReferenceBackend

        return ReferenceBackend(ck, n_threads)
    if choice != "compiled":
        raise BadOption("KIME_CPU_BACKEND=%r: use 'compiled' (the default) or 'reference'" % choice)
    from ._cpu.backend import CpuBackend

    layers: tuple[str, ...] = ()
    if precision is Precision.MIXED:
        from .layer_choice import read_choice

        layers = read_choice(ck.path, len(ck.graph.layers), len(ck.graph.head)).layers
    return CpuBackend(ck, n_threads, precision=precision, preload=preload, use_cache=use_cache,
                      layers=layers)


def open_layers(ck: Checkpoint, threads: int, layers: Sequence[str]) -> Backend:
    """The compiled CPU backend with each layer's GEMMs in the precision `layers` names (the
    encoder's, then the decision head's), packed in memory and not cached: a mix the gate tries
    (`kime.mixed_precision`), which may never be loaded again."""
    from ._cpu.backend import CpuBackend

    return CpuBackend(ck, threads or cpu_count(), precision=Precision.MIXED, layers=layers,
                      use_cache=False)


def bf16_missing() -> Optional[str]:
    """Why BF16 cannot run here, in words, or None when it can (`kime._cpu.backend`); a build
    whose compiled kernels do not load is a reason too, not an ImportError, since the callers
    ask while checking options, before anything loads."""
    try:
        from ._cpu.backend import bf16_missing as why

        return why()  # imports the BF16 kernels' extension
    except ImportError as err:
        return "kime's compiled CPU kernels do not load (%s)" % err


def backend_report() -> dict[str, dict[str, object]]:
    """What the backends find on this machine, for `kime doctor`, so the CLI asks here instead
    of importing `_cpu` or `_cuda`: the CPU kernels this build and CPU run (or why they do not
    load), the NVIDIA driver and the CuPy wheel that fits it, whether GPU 0 runs (and so what
    `device="auto"` picks), the CUDA self-check's newest verdict, and the packed-weight cache
    (where, how much, and how much of it this build never reads). Nothing here raises for a
    broken build or a missing GPU: reporting those is what the doctor is for."""
    cpu: dict[str, object] = {}
    try:
        from ._cpu.backend import kernels_report

        cpu.update(kernels_report())
    except Exception as e:
        cpu["isa"] = None
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
        "self_check": self_check_report(),
    }
    from ._cpu.weights import cache_report

    return {"cpu": cpu, "gpu": gpu, "caches": cache_report()}


def prune_packed_cache() -> dict[str, object]:
    """For `kime doctor --prune`: delete the packed-weight cache's files this build never reads
    (other builds' blobs, packings cut short), as `kime._cpu.weights.prune_cache` says."""
    from ._cpu.weights import prune_cache

    return prune_cache()


def self_check_report() -> dict[str, object]:
    """The CUDA self-check for `kime doctor`: whether loads run it (KIME_CUDA_SELFCHECK), and
    the newest verdict kept on this machine in one line (None: no GPU load has kept one)."""
    newest = gpu_check.last()
    return {"enabled": gpu_check.enabled(),
            "last": None if newest is None else newest.summary(),
            "last_at": None if newest is None else newest.checked_at}


def auto_device_kind() -> str:
    """The kind of device (`cpu`, `cuda`) that `device="auto"` opens at the default precision,
    found as `resolve_auto` finds it (GPU 0 probed quietly) without opening a backend: for a
    layer that says where models will load before any is loaded (the server's `/health`)."""
    return resolve_auto(Precision.AUTO).kind
