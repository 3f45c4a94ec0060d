"""The backend contract: what the executor needs from a device, and the typed device and precision.

A backend holds one checkpoint's weights on one device in its own layout and runs packed
`Batch`es into `Outputs`. Everything the rest of kime reads from a backend is on `Backend`
below; nothing reaches past it with `getattr`. This module imports no backend: the factory that
picks `_cpu` or `_cuda` (`kime.factory`) sits beside the engine, so the protocol and its
implementations never import each other.

`Device` and `Precision` are parsed once, where a user's string enters (`Device.parse`,
`Precision.parse`), and travel as typed values after that.
"""
from __future__ import annotations

import enum
import os
from dataclasses import dataclass
from typing import Optional, Protocol, Union

from .batch import Batch, Outputs
from .cpus import cpu_budget
from .errors import BadOption, Unsupported


@dataclass(frozen=True)
class Memory:
    """Bytes a model holds on its device: the weights in the device's layout, and the plans
    (arenas and staging buffers) built so far."""

    weights: int
    plans: int


@dataclass(frozen=True)
class Device:
    """Where a model runs: `auto` (a GPU when one runs here, else the CPU), `cpu`, or `cuda:N`.

    `str(device)` is the spelling `parse` reads back (`cpu`, `cuda:0`, `auto`).
    """

    kind: str  # "auto", "cpu" or "cuda"
    ordinal: int = 0

    @classmethod
    def parse(cls, value: Union[str, "Device", None]) -> "Device":
        """`None`/`auto`, `cpu`, `cuda`, `cuda:N`; anything else is refused with what to use."""
        if isinstance(value, Device):
            return value
        name = "auto" if value is None else str(value).strip().lower()
        if name in ("auto", "cpu"):
            return cls(name)
        if name == "cuda" or name.startswith("cuda:"):
            ordinal = name.partition(":")[2] or "0"
            if not ordinal.isdigit():
                raise BadOption("device %r: a CUDA device is 'cuda' or 'cuda:N' with N a GPU "
                                "ordinal" % (value,))
            return cls("cuda", int(ordinal))
        if name in ("metal", "mps", "ane"):
            raise Unsupported("device %r: the Apple backends are not part of kime yet; use "
                              "device='cpu'" % (value,))
        raise BadOption("device %r is not a device kime knows; use 'auto', 'cpu', 'cuda' or "
                        "'cuda:N'" % (value,))

    @property
    def is_auto(self) -> bool:
        return self.kind == "auto"

    def __str__(self) -> str:
        return "cuda:%d" % self.ordinal if self.kind == "cuda" else self.kind


class Precision(str, enum.Enum):
    """The arithmetic a backend runs in.

    `auto` (the default) is FP16 on a GPU and FP32 on the CPU. `f16` is the GPU's FP16 weights
    and activations with FP32 accumulation; the CPU has no FP16 kernels, so `f16` on the CPU is
    refused rather than quietly run in FP32. `f32` is FP32 everywhere; `int8` is the CPU's INT8
    GEMMs and `bf16` its BF16 GEMMs (bfloat16 weights and GEMM inputs, FP32 sums), both with FP32
    attention, norms and heads. `bf16` needs a CPU with AVX512_BF16, which the CPU backend checks.
    `mixed` (CPU only) runs each layer's GEMMs in the precision `kime gate --mixed` chose for it
    on the user's own requests (`kime.layer_choice`), INT8, BF16 or FP32.
    """

    AUTO = "auto"
    F16 = "f16"
    F32 = "f32"
    INT8 = "int8"
    BF16 = "bf16"
    MIXED = "mixed"

    @classmethod
    def parse(cls, value: Union[str, "Precision", None]) -> "Precision":
        if isinstance(value, Precision):
            return value
        if value is None:
            return cls.AUTO
        key = str(value).strip().lower()
        aliases = {"fp16": "f16", "float16": "f16", "half": "f16", "fp32": "f32",
                   "float32": "f32", "i8": "int8", "bfloat16": "bf16"}
        key = aliases.get(key, key)
        try:
            return cls(key)
        except ValueError:
            raise BadOption("precision %r is not one kime knows; use 'auto', 'f16' (GPU), 'f32', "
                            "'int8' (CPU), 'bf16' (CPU with AVX512_BF16) or 'mixed' (CPU, after "
                            "`kime gate --mixed`)" % (value,)) from None

    def on(self, device: Device, cpu_bf16: bool = True) -> "Precision":
        """The precision this one means on a resolved device (`auto` becomes concrete); refuses
        a precision the device has no kernels for. `cpu_bf16=False` (the CPU lacks BF16) keeps
        'bf16' out of what the CPU's refusal of 'f16' suggests instead."""
        if device.is_auto:
            raise ValueError("resolve the device before the precision")
        if device.kind == "cuda":
            if self in CPU_ONLY:
                raise Unsupported("precision=%r runs on the CPU only; on device=%r use 'f16' "
                                  "(the default on a GPU) or 'f32'" % (self.value, str(device)))
            return Precision.F16 if self is Precision.AUTO else self
        if self is Precision.F16:
            raise Unsupported("precision='f16' runs on a GPU only: the CPU has no FP16 kernels "
                              "and would compute in FP32; use 'f32' (what 'auto' picks on the "
                              "CPU)%s" % (", 'int8' or 'bf16'" if cpu_bf16 else " or 'int8'"))
        return Precision.F32 if self is Precision.AUTO else self

    def __str__(self) -> str:
        return self.value


CPU_ONLY = (Precision.INT8, Precision.BF16, Precision.MIXED)
"""The precisions only the CPU backend has kernels for."""


def parse_threads(threads: object) -> int:
    """0 (every core) or a positive count; anything else is refused."""
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise BadOption("threads must be 0 (every core) or a positive integer, got %r" % (threads,))
    return threads


def cache_root() -> str:
    """kime's cache directory, where what is derived from a checkpoint is kept for the next load:
    $KIME_CACHE, else $XDG_CACHE_HOME/kime, else ~/.cache/kime. Packed weights live under
    `packed/` (`kime._cpu.weights.cache_dir`), layer choices under `precision/`
    (`kime.layer_choice`), the CUDA self-check's verdicts under `gpu-check/` (`kime.gpu_check`)."""
    root = os.environ.get("KIME_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "kime")
    return root


def cpu_count() -> int:
    """The default thread count: the CPUs this process may use (the affinity mask, capped by the
    cgroup CPU quota; `kime.cpus`), not the machine's total."""
    return cpu_budget().threads


class Backend(Protocol):
    """One checkpoint on one device, as the executor drives it.

    The executor calls `prepare` and `run` from one thread at a time (under its lock); `run`'s
    outputs are views into the backend's buffers, valid until the next `run`, so the caller
    copies what it keeps.
    """

    device: Device
    """The resolved device (never `auto`)."""
    precision: Precision
    """The resolved precision (never `auto`)."""
    threads: int
    """CPU threads the backend's kernels use (the host threads on a GPU)."""
    max_batch_tokens: int
    """The most tokens one `run` takes; the executor splits work to fit."""
    kernels: str
    """The kernel set that runs, in words (`avx512`, `vnni512`, `sm_90`, `numpy`)."""
    weights_from: str
    """Where the weights came from at load: `cache` (a packed file mapped), `packed` (converted
    now), `checkpoint` (read as stored) or `uploaded` (copied to a device)."""
    weights_file: Optional[str]
    """The packed-weights cache file this backend uses, or None when it keeps none."""

    def prepare(self, tokens: int) -> None:
        """Build the plan (arena and buffers) of the bucket that holds `tokens`, so the first
        `run` that needs it does not allocate. Idempotent."""
        ...

    def run(self, batch: Batch) -> Outputs:
        """Run one batch of at most `max_batch_tokens` tokens."""
        ...

    def memory(self) -> Memory:
        ...

    def describe(self) -> str:
        """The device, precision and kernels in words, for `engine.device` and `kime doctor`."""
        ...

    def close(self) -> None:
        """Free the weights and plans. The backend cannot run afterwards; closing twice is fine."""
        ...
