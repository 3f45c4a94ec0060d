"""Laya's device semantics at its surface: `agent.device` reads like a `torch.device`, and a
device that cannot run here warns and falls back to the CPU, as `laya.load` does. The engine
(`kime.Kime`) keeps refusing such a device, because its users asked never to be moved silently.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional, Tuple

from ..backend import Device
from ..errors import BadDeviceOrdinal, CudaUnavailable, warn_caller
from ..factory import Target, check_options

CPU = Device("cpu")


class TorchLikeDevice:
    """`str()`, `.type` and `.index` as `torch.device` gives them: `cpu`, `cuda`, `cuda:1`.

    Equal to another of its kind with the same type and index; hashable, so it can key a dict.
    """

    __slots__ = ("type", "index")

    def __init__(self, type: str, index: Optional[int] = None):
        self.type = type
        self.index = index

    @classmethod
    def of(cls, device: Device, asked: Any) -> "TorchLikeDevice":
        """The device the engine runs on, spelled as the caller asked (`cuda` keeps no index,
        like `torch.device("cuda")`; `auto` on a GPU reads `cuda`)."""
        if device.kind != "cuda":
            return cls("cpu")
        spelled = str(asked).strip().lower() if asked is not None else "auto"
        return cls("cuda", device.ordinal if ":" in spelled else None)

    def __str__(self) -> str:
        return self.type if self.index is None else "%s:%d" % (self.type, self.index)

    def __repr__(self) -> str:
        if self.index is None:
            return "device(type=%r)" % self.type
        return "device(type=%r, index=%d)" % (self.type, self.index)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TorchLikeDevice) and other.type == self.type
                and other.index == self.index)

    def __hash__(self) -> int:
        return hash((self.type, self.index))


def requested(device: Any) -> Tuple[Any, Optional[str]]:
    """What to ask the engine for, and Laya's warning when that is the CPU instead of what was
    asked: Apple's `mps` and Intel's `xpu` are not kime devices, so they run on the CPU."""
    if device is None:
        return "auto", None
    name = str(device).strip().lower()
    for kind, label in (("mps", "MPS"), ("xpu", "XPU")):
        if name == kind or name.startswith(kind + ":"):
            return "cpu", "Warning: %s requested but not available. Falling back to CPU." % label
    return device, None


def choose(device: Any, precision: Any = None, threads: Any = 0) -> Tuple[Target, Optional[str]]:
    """The device and precision to open, checked once here where Laya's caller's strings enter
    (`kime.factory.check_options`), and why it is the CPU instead of what was asked (None when
    it is what was asked). The engine takes the `Target` as it is. A GPU that cannot run here
    warns with Laya's message and the CPU answers, and so does one that fails the CUDA
    self-check at load (`Target.cpu_fallback`: Laya places a model it cannot place on the GPU
    on the CPU, even when the GPU was asked for by name); an unknown device or a bad
    precision/threads is still refused, before any file of the checkpoint is read."""
    asked, warning = requested(device)
    if warning is not None:
        warn_caller(warning)
        return check_options(asked, precision, threads), warning
    wanted = Device.parse(asked)
    try:
        return replace(check_options(wanted, precision, threads), cpu_fallback=True), None
    except CudaUnavailable as err:
        if isinstance(err, BadDeviceOrdinal):
            message = ("Warning: CUDA device %s not found (%s). Falling back to CPU."
                       % (wanted, err))
        else:
            message = "Warning: CUDA requested but not available. Falling back to CPU."
        warn_caller(message)
        return check_options(CPU, precision, threads), str(err)
