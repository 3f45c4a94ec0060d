"""kime: Laya's decision models without PyTorch.

Two surfaces over one engine: `kime.Kime` (the engine API: `decide`, `decide_batch`,
`decide_async`, ...) and `kime.load` (Laya's API: `predict`, `system_one`, `predict_batch`).
Nothing compiled is imported until a model is loaded.
"""
from .answers import Answer, Response, Usage
from .backend import Device, Memory, Precision
from .engine import Kime, Timing
from .errors import (BadDeviceOrdinal, BadOption, CheckpointError, CheckpointFileMissing,
                     BackendError, CudaMismatch, CudaUnavailable, CupyMissing, InvalidArgument,
                     InvalidRequest,
                     KimeError, ModelNotFound, NoGpu, NonFiniteLogits, TokenizerError, TooLong,
                     Unsupported)
from .gate import GateReport, gate
from .laya import Agent, load
from ._version import __version__
from .request import Request

__all__ = [
    "Agent", "Answer", "BackendError", "BadDeviceOrdinal", "BadOption", "CudaMismatch",
    "CudaUnavailable", "Device", "Precision",
    "CupyMissing", "NoGpu", "CheckpointError", "CheckpointFileMissing", "GateReport",
    "InvalidArgument",
    "InvalidRequest", "Kime", "KimeError", "Memory", "ModelNotFound", "NonFiniteLogits", "Request",
    "Response", "Timing", "TokenizerError", "TooLong", "Unsupported", "Usage", "gate", "load",
    "__version__",
]
