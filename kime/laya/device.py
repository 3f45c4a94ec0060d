"""Laya's device semantics at its surface: `agent.device` reads like a `torch.device` and
`agent.dtype` like a `torch.dtype`, a device that cannot run here warns and falls back to the
CPU, as `laya.load` does, and Laya's CPU autocast switch (`LAYA_CPU_AMP=bf16`) asks for kime's
`bf16`. The engine (`kime.Kime`) keeps refusing such a device, because its users asked never to
be moved silently, and reads no Laya environment.
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Optional, Tuple

from ..backend import Device, Precision
from ..errors import BadDeviceOrdinal, CudaUnavailable, warn_caller
from ..factory import Target, bf16_missing, check_options

if TYPE_CHECKING:
    from ..engine import Kime

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


class TorchLikeDtype:
    """`str()` and `repr()` as a `torch.dtype` gives them (`torch.float32`, `torch.bfloat16`,
    `torch.float16`), with `.itemsize` and `.is_floating_point`; equal to another of its kind
    with the same name, and hashable."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self.name = name

    @classmethod
    def of(cls, precision: Precision) -> "TorchLikeDtype":
        """The dtype Laya reports for a model computing in `precision`: its autocast dtype for
        BF16 and FP16; FP32 otherwise (INT8 and mixed keep FP32 around their INT8 GEMMs)."""
        return cls({Precision.BF16: "bfloat16", Precision.F16: "float16"}.get(precision,
                                                                              "float32"))

    @property
    def itemsize(self) -> int:
        return 4 if self.name == "float32" else 2

    @property
    def is_floating_point(self) -> bool:
        return True

    def __str__(self) -> str:
        return "torch." + self.name

    __repr__ = __str__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TorchLikeDtype) and other.name == self.name

    def __hash__(self) -> int:
        return hash(self.name)


class Placement:
    """Laya's attributes of where and in what an agent's model runs, for a class that sets
    `engine` (a `kime.Kime`) and `_device` (`TorchLikeDevice.of` the device it asked for)."""

    engine: "Kime"
    _device: TorchLikeDevice

    @property
    def device(self) -> TorchLikeDevice:
        """Where the model runs, as a `torch.device` reads: `str(agent.device)`, `.type`."""
        return self._device

    @property
    def dtype(self) -> TorchLikeDtype:
        """The precision the model computes in, as Laya's autocast dtype reads:
        `torch.bfloat16` for `bf16` (what `LAYA_CPU_AMP=bf16` asks for where the CPU has BF16),
        `torch.float16` on a GPU in FP16, `torch.float32` otherwise."""
        return TorchLikeDtype.of(self.engine.backend.precision)

    @property
    def amp_enabled(self) -> bool:
        """Whether the model computes below FP32 in Laya's sense: BF16 or FP16."""
        return self.dtype.name != "float32"

    def dtype_for(self, rows: int) -> TorchLikeDtype:
        """The precision a forward pass with `rows` question rows runs in (Laya's; on kime's
        devices it does not depend on `rows`)."""
        return self.dtype if self.amp_enabled else TorchLikeDtype("float32")


def laya_cpu_amp(target: Target, precision: Any) -> Target:
    """The CPU target under Laya's `LAYA_CPU_AMP=bf16|bfloat16` when the caller named no
    precision: kime's `bf16`, which moves answers no further than Laya's autocast does
    (docs/precision.md). Where the CPU has no BF16 kernels for kime, a warning says so and FP32
    answers (Laya's autocast runs there, slower than its FP32)."""
    amp = os.environ.get("LAYA_CPU_AMP", "").strip().lower()
    if amp not in ("bf16", "bfloat16") or target.device.kind != "cpu" or \
            Precision.parse(precision) is not Precision.AUTO:
        return target
    missing = bf16_missing()
    if missing is not None:
        warn_caller("LAYA_CPU_AMP=%s: kime has no BF16 kernels on this CPU (%s); it answers in "
                    "FP32" % (os.environ["LAYA_CPU_AMP"], missing))
        return target
    return replace(target, precision=Precision.BF16)


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
        return laya_cpu_amp(check_options(asked, precision, threads), precision), warning
    wanted = Device.parse(asked)
    try:
        target = check_options(wanted, precision, threads)
        return replace(laya_cpu_amp(target, precision), cpu_fallback=True), None
    except CudaUnavailable as err:
        if isinstance(err, BadDeviceOrdinal):
            message = ("Warning: CUDA device %s not found (%s). Falling back to CPU."
                       % (wanted, err))
        else:
            message = "Warning: CUDA requested but not available. Falling back to CPU."
        warn_caller(message)
        return laya_cpu_amp(check_options(CPU, precision, threads), precision), str(err)
