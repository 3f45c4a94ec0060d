"""Laya's Python surface over the engine (the compat layer): `load` and `Agent` with Laya
0.4.15's signatures and results, Laya's wire format (`wire`) and confidence numbers
(`confidence`). The engine below knows nothing of these."""
from .agent import Agent, load

__all__ = ["Agent", "load"]
