"""Laya's Python surface over the engine (the compat layer): `load`, `Agent` and the names
`laya` exports at its top level, with Laya 0.4.15's signatures, results and refusals. One
module per rule: `agent` (signatures, attributes, loading), `hooks`, `calibration`,
`confidence` (the gate), `long` (`predict_long`), `structured` (schemas), `wire` (result dicts),
`device`, `revisions`. The engine below knows nothing of these."""
from .agent import Agent, RLAgent, load
from .hooks import AsyncHook, BaseHook, Hook, PredictContext, PredictHook

__all__ = ["Agent", "AsyncHook", "BaseHook", "Hook", "PredictContext", "PredictHook", "RLAgent",
           "load"]
