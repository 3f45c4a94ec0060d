"""Finding a GPU: import CuPy and check the device, with one clear error per reason it fails.

The reasons a user can act on differ, so each has its own exception (kime/errors.py):
`CupyMissing` (install CuPy), `CudaMismatch` (CuPy built for a CUDA major this machine's driver
or libraries lack: install the other wheel), `NoGpu` (no driver or no device), and
`BadDeviceOrdinal` (`cuda:N` past the GPUs there are). `probe` asks the same questions quietly,
for `device="auto"`. `cupy_advice` tells `kime doctor` which CuPy wheel fits the NVIDIA driver,
read without CuPy (the driver API, else `nvidia-smi`), so it helps before CuPy is installed.
`stack` names the driver and library versions a GPU's arithmetic depends on.
"""
from __future__ import annotations

import re
import sys
from typing import Any, Dict, Optional, Tuple

from ..errors import BadDeviceOrdinal, CudaMismatch, CudaUnavailable, CupyMissing, NoGpu

MIN_CUPY = (13, 0)

# cudaError_t values the checks tell apart.
INSUFFICIENT_DRIVER = 35
NO_DEVICE = 100
SYSTEM_DRIVER_MISMATCH = 803
COMPAT_NOT_SUPPORTED = 804

INSTALL = ("install the CuPy wheel for this machine's CUDA major: `pip install cupy-cuda12x` for a "
           "CUDA 12 driver, `pip install cupy-cuda13x` for CUDA 13 (`nvidia-smi` shows the "
           "driver's CUDA version)")


def import_cupy() -> Any:
    """`import cupy`, on its own so tests can stand in a broken or missing CuPy."""
    import cupy

    return cupy


def _version(text: str) -> tuple:
    parts = []
    for piece in str(text).split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _cuda_version(code: int) -> str:
    return "%d.%d" % (code // 1000, (code % 1000) // 10) if code else "none"


def _status(error: BaseException) -> Optional[int]:
    status = getattr(error, "status", None)
    return int(status) if isinstance(status, int) else None


def open_cupy(ordinal: int = 0) -> Any:
    """CuPy, once it is certain that GPU `ordinal` can run kime; raises a `CudaUnavailable`
    subclass naming the reason and the fix otherwise."""
    where = "device='cuda:%d'" % ordinal
    try:
        cupy = import_cupy()
    except ModuleNotFoundError as e:
        if e.name != "cupy":  # CuPy is there but something it imports is not
            raise CudaMismatch("%s: CuPy is installed but does not import (%s); %s"
                               % (where, e, INSTALL)) from e
        raise CupyMissing("%s needs CuPy, which is not installed: `pip install 'kime[cuda]'` "
                          "(or %s), or use device='cpu'"
                          % (where, INSTALL.split(": ", 1)[1])) from e
    except Exception as e:  # ImportError for a missing libcudart/libnvrtc of another major, ...
        raise CudaMismatch("%s: CuPy is installed but does not load (%s: %s); a CuPy built for "
                           "another CUDA major than this machine's fails this way; %s"
                           % (where, type(e).__name__, e, INSTALL)) from e
    version = getattr(cupy, "__version__", "0")
    if _version(version) < MIN_CUPY:
        raise CudaMismatch("%s: CuPy %s is too old; kime needs CuPy %d.%d or newer"
                           % ((where, version) + MIN_CUPY))
    runtime = cupy.cuda.runtime
    try:
        count = int(runtime.getDeviceCount())
    except Exception as e:  # CUDARuntimeError, or a missing library
        raise _no_device(runtime, where, e) from e
    if count == 0:
        raise NoGpu("%s: the NVIDIA driver sees no GPU; use device='cpu'" % where)
    if ordinal >= count:
        raise BadDeviceOrdinal("%s: this machine has %d GPU%s (cuda:0%s); pick one of those"
                               % (where, count, "" if count == 1 else "s",
                                  "" if count == 1 else " to cuda:%d" % (count - 1)))
    return cupy


def _no_device(runtime: Any, where: str, error: BaseException) -> CudaUnavailable:
    """The reason `getDeviceCount` failed, as the error to raise."""
    status = _status(error)
    driver = runtime_version = 0
    try:
        driver = int(runtime.driverGetVersion())
    except Exception:
        pass
    try:
        runtime_version = int(runtime.runtimeGetVersion())
    except Exception:
        pass
    if status == NO_DEVICE:
        return NoGpu("%s: no CUDA GPU is visible (%s); check CUDA_VISIBLE_DEVICES or use "
                     "device='cpu'" % (where, error))
    if driver == 0:
        return NoGpu("%s: no NVIDIA driver is installed or it does not load (%s); use device='cpu'"
                     % (where, error))
    if status in (INSUFFICIENT_DRIVER, SYSTEM_DRIVER_MISMATCH, COMPAT_NOT_SUPPORTED) or (
            runtime_version and driver // 1000 < runtime_version // 1000):
        return CudaMismatch("%s: this CuPy is built for CUDA %s but the NVIDIA driver runs CUDA "
                            "up to %s (%s); %s" % (where, _cuda_version(runtime_version),
                                                   _cuda_version(driver), error, INSTALL))
    return NoGpu("%s: CUDA does not start (%s); use device='cpu'" % (where, error))


def parse_driver_version(text: str) -> Optional[str]:
    """The driver's version in /proc/driver/nvidia/version's banner ("... Kernel Module
    550.54.15 ...", or "... Open Kernel Module for x86_64  535.104.05 ..."), or None."""
    found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
    return found.group(1) if found else None


def nvidia_driver() -> Optional[str]:
    """The NVIDIA kernel driver's version (`550.54.15`), or None where it cannot be read (not
    Linux, or no driver loaded)."""
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
            return parse_driver_version(f.read())
    except OSError:
        return None


def stack(cupy: Any) -> Dict[str, str]:
    """The software under kime that a GPU's arithmetic depends on: the NVIDIA driver, the CUDA
    driver API and runtime it reports, and CuPy (the CUDA self-check's verdict is kept per
    these). A version that cannot be read is "unknown", never an error."""
    runtime = cupy.cuda.runtime
    out = {"nvidia_driver": nvidia_driver() or "unknown", "cupy": str(cupy.__version__)}
    for key, read in (("cuda_driver", runtime.driverGetVersion),
                      ("cuda_runtime", runtime.runtimeGetVersion)):
        try:
            out[key] = _cuda_version(int(read()))
        except Exception:
            out[key] = "unknown"
    return out


def probe(ordinal: int = 0) -> Optional[str]:
    """None when GPU `ordinal` can run kime, else the reason in words (for `auto`)."""
    try:
        open_cupy(ordinal)
    except CudaUnavailable as e:
        return str(e)
    return None


# The CuPy wheel (and kime extra) per CUDA major; a driver runs builds of its own major and older.
CUPY_WHEELS = {12: ("cupy-cuda12x", "kime[cuda12]"), 13: ("cupy-cuda13x", "kime[cuda13]")}
_KNOWN_CUPY = ("cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy")


def _driver_api_version() -> Optional[int]:
    """`cuDriverGetVersion` from the driver library (no CUDA context is made), or None when
    the library does not load."""
    import ctypes

    names = ["nvcuda.dll"] if sys.platform == "win32" else ["libcuda.so.1", "libcuda.so"]
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return int(version.value)
    return None


def parse_smi_version(text: str) -> Optional[int]:
    """The driver's CUDA version in `nvidia-smi`'s banner ("CUDA Version: 12.4"), as 12040."""
    found = re.search(r"CUDA Version:\s*(\d+)\.(\d+)", text)
    return int(found.group(1)) * 1000 + int(found.group(2)) * 10 if found else None


def _smi_version() -> Optional[int]:
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run([smi], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_smi_version(done.stdout)


def driver_cuda_version() -> Tuple[Optional[int], str]:
    """The highest CUDA version the NVIDIA driver runs (CUDA's integer form: 12040 is 12.4) and
    where it was read ("driver API", "nvidia-smi"), or (None, why not)."""
    version = _driver_api_version()
    if version is not None:
        return version, "driver API"
    version = _smi_version()
    if version is not None:
        return version, "nvidia-smi"
    return None, "no NVIDIA driver found (the driver library does not load, no nvidia-smi)"


def installed_cupy() -> Optional[str]:
    """The CuPy distribution installed (`cupy-cuda12x` ...), read from its metadata so CuPy is
    not imported; None when there is none."""
    from importlib import metadata

    for name in _KNOWN_CUPY:
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
        return name
    return None


def cupy_advice(driver: Optional[int], installed: Optional[str], why: str = "") -> str:
    """Which CuPy fits a driver that runs CUDA `driver` (None: no driver), given the CuPy
    distribution `installed`, as one line for `kime doctor`."""
    if driver is None:
        return "none: %s; kime runs on the CPU" % (why or "no NVIDIA driver found")
    major, cuda = driver // 1000, _cuda_version(driver)
    if major < min(CUPY_WHEELS):
        return ("none: the driver runs CUDA %s, and kime's CuPy builds need CUDA %d or newer; "
                "update the NVIDIA driver" % (cuda, min(CUPY_WHEELS)))
    wheel, extra = CUPY_WHEELS[min(major, max(CUPY_WHEELS))]
    if installed == wheel:
        return "%s (installed) for the driver's CUDA %s" % (wheel, cuda)
    fix = "pip install '%s'" % extra
    if installed is not None:
        built = re.fullmatch(r"cupy-cuda(\d+)x", installed)
        if built is None:
            note = "is built from source"
        else:
            note = "runs on it" if int(built.group(1)) <= major else "needs a newer driver"
        fix = "pip uninstall %s, then %s (the installed %s %s)" % (installed, fix, installed, note)
    return "%s for the driver's CUDA %s: %s" % (wheel, cuda, fix)
