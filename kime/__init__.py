"""kime: Laya's decision models without PyTorch.

Two surfaces over one engine: `kime.Kime` (the engine API: `decide`, `decide_batch`,
`decide_async`, ...) and `kime.load` (Laya's API: `predict`, `system_one`, `predict_batch`,
`predict_long`, `decide`, hooks, calibration; `kime.Router` over several checkpoints), which
also exports what `laya` exports at its top level for these, so `import kime as laya` runs Laya
code. Nothing compiled is imported until a model is loaded; Laya's helpers (calibration fitters,
shortlist and tournament, `OptionStabilityHook`, presets, email cleaning), structured decisions
and Laya's submodule paths (`kime.presets`, `kime.email`, `kime.router`, `kime.hooks`,
`kime.confidence`, `kime.structured`, `kime.lang`) load on first use.
"""
from .answers import Answer, Response, Usage
from .backend import Device, Memory, Precision
from .engine import Kime, Timing
from .errors import (BadDeviceOrdinal, BadOption, CheckpointError, CheckpointFileMissing,
                     BackendError, CudaMismatch, CudaSelfCheckFailed, CudaUnavailable, CupyMissing,
                     InvalidArgument,
                     InvalidRequest,
                     KimeError, ModelNotFound, NoGpu, NonFiniteLogits, TokenizerError, TooLong,
                     Unsupported)
from .precision_gate import GateReport, gate
from .mixed_precision import MixedReport, mixed_gate
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
    # laya.calibrate's fitters and laya.common's helpers, torch-free
    "fit_temperatures": ("kime.jobs.laya_calibrate", "fit_temperatures"),
    "fit_one_temperature": ("kime.jobs.laya_calibrate", "fit_one_temperature"),
    "fit_temperature_map": ("kime.jobs.laya_calibrate", "fit_temperature_map"),
    "fit_abstention_thresholds": ("kime.jobs.laya_calibrate", "fit_abstention_thresholds"),
    "fit_binning_map": ("kime.jobs.laya_calibrate", "fit_binning_map"),
    "apply_binning_map": ("kime.laya.calibration", "apply_binning_map"),
    "ece_score": ("kime.jobs.laya_calibrate", "ece_score"),
    "proper_reward": ("kime.laya.common", "proper_reward"),
    "td_lambda_targets": ("kime.laya.common", "td_lambda_targets"),
    "render_options": ("kime.laya.common", "render_options"),
    "QTYPES": ("kime.render", "QTYPES"),
    "QTYPE_NAMES": ("kime.render", "QTYPE_NAMES"),
    # wide label sets, reliability, presets and email
    "shortlist_choice": ("kime.laya.shortlist", "shortlist_choice"),
    "predict_shortlist": ("kime.laya.shortlist", "predict_shortlist"),
    "predict_tournament": ("kime.laya.shortlist", "predict_tournament"),
    "embed_fn_from_agent": ("kime.laya.embedding", "embed_fn_from_agent"),
    "cached_embed_fn": ("kime.laya.embedding", "cached_embed_fn"),
    "OptionStabilityHook": ("kime.laya.stability", "OptionStabilityHook"),
    "clean_email_body": ("kime.laya.email", "clean_email_body"),
    "email_state": ("kime.laya.email", "email_state"),
    "email_questions": ("kime.laya.presets", "email_questions"),
    "guard_questions": ("kime.laya.presets", "guard_questions"),
    "moderation_questions": ("kime.laya.presets", "moderation_questions"),
    "router_questions": ("kime.laya.presets", "router_questions"),
    "triage_questions": ("kime.laya.presets", "triage_questions"),
    # Laya's submodule paths (`laya.hooks.set_default_hooks(...)`, `from kime.presets import
    # ...`): each kime/<name>.py holds what laya.<name> offers, from the modules that own it.
    "confidence": ("kime.confidence", None),
    "email": ("kime.email", None),
    "hooks": ("kime.hooks", None),
    "lang": ("kime.lang", None),
    "presets": ("kime.presets", None),
    "router": ("kime.router", None),
    "structured": ("kime.structured", None),
    # laya's module paths served from kime (`import laya` after it): kime.shim.paths' table
    "install_as_laya": ("kime.shim.paths", "install"),
}
"""Laya's top-level names that `import kime` need not pay for: resolved on first use."""

_INTEGRATIONS = ("LayaRouter", "LayaGuardrail", "LayaGuardrailError", "LayaTriage",
                 "LayaEvaluator", "LayaDecision")
"""Laya's LangChain classes, from `kime.integrations.langchain` on first use. Where langchain-core
is installed they are in `__all__` and `dir(kime)`, as laya lists them; where it is not they stay
out, so `from kime import *`, `help(kime)` and `inspect.getmembers(kime)` keep working on a bare
install (laya's fail there), and using one raises an ImportError naming the extra,
`pip install 'kime[langchain]'`. `hasattr` raises that too rather than answer False: a feature
check that took False for "absent" would quietly take another path where the user wants to hear
why."""


def _langchain_installed() -> bool:
    import importlib.util

    return importlib.util.find_spec("langchain_core") is not None  # a path search, no import


def _integration(name: str) -> object:
    import importlib

    try:
        module = importlib.import_module("kime.integrations.langchain")
    except ImportError as e:
        if "kime[langchain]" in str(e) or (e.name or "").startswith("kime"):
            raise
        raise ImportError(
            "kime.%s is one of laya's LangChain integrations, which need LangChain: "
            "pip install 'kime[langchain]' (%s)" % (name, e), name=e.name) from e
    found = getattr(module, name)
    globals()[name] = found
    return found


def __getattr__(name: str) -> object:
    try:
        module, attr = _LAZY[name]
    except KeyError:
        if name in _INTEGRATIONS:
            return _integration(name)
        raise AttributeError("module 'kime' has no attribute %r" % name) from None
    import importlib

    value = importlib.import_module(module)
    found = value if attr is None else getattr(value, attr)
    globals()[name] = found
    return found


def __dir__() -> list:
    listed = set(globals()) | set(_LAZY)
    if _langchain_installed():
        listed.update(_INTEGRATIONS)
    return sorted(listed)


__all__ = [
    "AsyncHook", "BaseHook", "DEFAULT_MODELS", "RouteDecision", "Router", "Hook", "PredictContext",
    "PredictHook", "RLAgent",
    *_LAZY,
    "Agent", "Answer", "BackendError", "BadDeviceOrdinal", "BadOption", "CudaMismatch",
    "CudaSelfCheckFailed", "CudaUnavailable", "Device", "Precision",
    "CupyMissing", "NoGpu", "CheckpointError", "CheckpointFileMissing", "GateReport",
    "InvalidArgument",
    "InvalidRequest", "Kime", "KimeError", "Memory", "MixedReport", "ModelNotFound",
    "NonFiniteLogits", "Request",
    "Response", "Timing", "TokenizerError", "TooLong", "Unsupported", "Usage", "gate", "load",
    "mixed_gate",
    "__version__",
]
if _langchain_installed():
    __all__ += _INTEGRATIONS
