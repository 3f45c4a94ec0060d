"""`laya.router` at kime's path (`from kime.router import Router, DEFAULT_MODELS`): what Laya's
module offers, from the kime modules that own each rule: the `Router` (`kime.laya.router`), which
checkpoint a name or request means (`kime.laya.routing`), and the hook, gate and language helpers
Laya's router module also exposes."""
from .laya.confidence import apply_confidence_gate, check_min_confidence
from .laya.hooks import (HookRegistry, PredictContext, aggregate_usage, compose_hooks, dispatch,
                         normalise_hooks, validate_timeout)
from .laya.lang import analyse
from .laya.router import Router, check_agent_kwargs
from .laya.routing import (BUNDLE_REPO, DEFAULT_MODELS, STANDALONE_MODELS, RouteDecision,
                           canonical_name, match_typed_decisions_workflow, normalise_name,
                           resolve_model_spec)

__all__ = ["BUNDLE_REPO", "DEFAULT_MODELS", "HookRegistry", "PredictContext", "RouteDecision",
           "Router", "STANDALONE_MODELS", "aggregate_usage", "analyse", "apply_confidence_gate",
           "canonical_name", "check_agent_kwargs", "check_min_confidence", "compose_hooks",
           "dispatch", "match_typed_decisions_workflow", "normalise_hooks", "normalise_name",
           "resolve_model_spec", "validate_timeout"]
