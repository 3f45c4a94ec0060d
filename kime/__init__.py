"""kime: Laya's decision models without PyTorch.

Two surfaces over one engine: `kime.Kime` (the engine API: `decide`, `decide_batch`,
`decide_async`, ...) and `kime.load` (Laya's API: `predict`, `system_one`, `predict_batch`).
Nothing compiled is imported until a model is loaded.
"""
from .answers import Answer, Response, Usage
from .backend import Memory
from .engine import Kime, Timing
from .errors import (BadDeviceOrdinal, BadOption, CheckpointError, CheckpointFileMissing,
                     CudaMismatch, CudaUnavailable, CupyMissing, InvalidArgument, InvalidRequest,
                     KimeError, ModelNotFound, NoGpu, NonFiniteLogits, TokenizerError, TooLong,
                     Unsupported)
from .gate import GateReport, gate
from .laya import Agent, load
from .request import Request

__version__ = "0.1.0"

__all__ = [
    "Agent", "Answer", "BadDeviceOrdinal", "BadOption", "CudaMismatch", "CudaUnavailable",
    "CupyMissing", "NoGpu", "CheckpointError", "CheckpointFileMissing", "GateReport",
    "InvalidArgument",
    "InvalidRequest", "Kime", "KimeError", "Memory", "ModelNotFound", "NonFiniteLogits", "Request",
    "Response", "Timing", "TokenizerError", "TooLong", "Unsupported", "Usage", "gate", "load",
    "__version__",
]
