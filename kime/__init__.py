"""kime: Laya's decision models without PyTorch.

Two surfaces over one engine: `kime.Kime` (the engine API: `decide`, `decide_batch`,
`decide_async`, ...) and `kime.load` (Laya's API: `predict`, `system_one`, `predict_batch`,
`predict_long`, `decide`, hooks, calibration; `kime.Router` over several checkpoints), which
also exports what `laya` exports at its top level for these, so `import kime as laya` runs Laya
code. Nothing compiled is imported until a model is loaded; Laya's helpers, structured decisions
and submodules load on first use.
"""
from .answers import Answer, Response, Usage
from .backend import Device, Memory, Precision
from .engine import Kime, Timing
from .errors import (BadDeviceOrdinal, BadOption, CheckpointError, CheckpointFileMissing,
                     BackendError, CudaMismatch, CudaUnavailable, CupyMissing, InvalidArgument,
                     InvalidRequest,
                     KimeError, ModelNotFound, NoGpu, NonFiniteLogits, TokenizerError, TooLong,
                     Unsupported)
from .precision_gate import GateReport, gate
from .laya import (DEFAULT_MODELS, Agent, AsyncHook, BaseHook, Hook, PredictContext, PredictHook,
                   RLAgent, RouteDecision, Router, load)
from ._version import __version__
from .request import Request

_LAZY = {
    "check_min_confidence": ("kime.laya.confidence", "check_min_confidence"),
    "check_min_confidence_map": ("kime.laya.confidence", "check_min_confidence_map"),
    "resolve_min_confidence": ("kime.laya.confidence", "resolve_min_confidence"),
    "flag_low_confidence": ("kime.laya.confidence", "flag_low_confidence"),
    "apply_confidence_gate": ("kime.laya.confidence", "apply_confidence_gate"),
    "GATE_STATES": ("kime.laya.confidence", "GATE_STATES"),
    "answer_confidence": ("kime.laya.confidence", "answer_confidence"),
    "confidence_from_probs": ("kime.laya.confidence", "confidence_from_probs"),
    "jev_confidence": ("kime.laya.confidence", "jev_confidence"),
    "decide": ("kime.laya.structured", "decide"),
    "decide_batch": ("kime.laya.structured", "decide_batch"),
    "DecisionResult": ("kime.laya.structured", "DecisionResult"),
    "SchemaError": ("kime.laya.structured", "SchemaError"),
    "PINNED_REVISIONS": ("kime.laya.revisions", "PINNED_REVISIONS"),
    "detect_language": ("kime.laya.lang", "analyse"),
    "detect_script": ("kime.laya.lang", "detect_script"),
    "is_english": ("kime.laya.lang", "is_english"),
    # Laya's submodules, for `laya.hooks.set_default_hooks(...)` and the like.
    "hooks": ("kime.laya.hooks", None),
    "confidence": ("kime.laya.confidence", None),
    "structured": ("kime.laya.structured", None),
    "lang": ("kime.laya.lang", None),
}
"""Laya's top-level names that `import kime` need not pay for: resolved on first use."""


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        raise AttributeError("module 'kime' has no attribute %r" % name) from None
    import importlib

    value = importlib.import_module(module)
    found = value if attr is None else getattr(value, attr)
    globals()[name] = found
    return found


def __dir__() -> list:
    return sorted(list(globals()) + list(_LAZY))


__all__ = [
    "AsyncHook", "BaseHook", "DEFAULT_MODELS", "RouteDecision", "Router", "Hook", "PredictContext",
    "PredictHook", "RLAgent",
    *[name for name, (_, attr) in _LAZY.items() if attr is not None],
    "Agent", "Answer", "BackendError", "BadDeviceOrdinal", "BadOption", "CudaMismatch",
    "CudaUnavailable", "Device", "Precision",
    "CupyMissing", "NoGpu", "CheckpointError", "CheckpointFileMissing", "GateReport",
    "InvalidArgument",
    "InvalidRequest", "Kime", "KimeError", "Memory", "ModelNotFound", "NonFiniteLogits", "Request",
    "Response", "Timing", "TokenizerError", "TooLong", "Unsupported", "Usage", "gate", "load",
    "__version__",
]
