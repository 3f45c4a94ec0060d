"""Laya's Python surface over the engine (the compat layer): `load`, `Agent` and the names
`laya` exports at its top level, with Laya 0.4.15's signatures, results and refusals. One
module per rule: `agent` (signatures, attributes, loading), `hooks`, `calibration`,
`confidence` (the gate), `long` (`predict_long`), `structured` (schemas), `wire` (result dicts),
`device`, `revisions`, `lang` (script and language detection), `routing` (which checkpoint a
request goes to), `router` (`Router`: several checkpoints behind one object). The engine below
knows nothing of these."""
from .agent import Agent, RLAgent, load
from .hooks import AsyncHook, BaseHook, Hook, PredictContext, PredictHook
from .router import Router
from .routing import DEFAULT_MODELS, RouteDecision

__all__ = ["Agent", "AsyncHook", "BaseHook", "DEFAULT_MODELS", "Hook", "PredictContext",
           "PredictHook", "RLAgent", "RouteDecision", "Router", "load"]
