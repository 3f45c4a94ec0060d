"""`kime serve`: laya serve's HTTP API over one kime engine or a Router of several, on
FastAPI + uvicorn.

    settings.py  the one declaration of the settings; flags, environment and TOML from it
    limits.py    laya serve's body checks: size limits, refusals, controls, the model named
    routing.py   one checkpoint or a Router (from the settings), and a routed body's checks
    served.py    what answers: One checkpoint, or Routed (a Router: leases, routing, idle unload)
    narrowing.py LAYA_TOURNAMENT_GROUP: the choices narrowed by elimination, and their answer
    wire.py      what the routes send: Jev additions, or the strict contract (LAYA_JEV_STRICT)
    metrics.py   /metrics on prometheus_client, a registry per app, the engines' gauges
    app.py       create_app (one pipeline for both POST routes) and serve (uvicorn)

Imported only when serving: `import kime` works without the serve extra. The settings import
without FastAPI (the CLI builds `kime serve`'s flags from them); the app loads on first use.
"""
from __future__ import annotations

from typing import Any

from .settings import ConfigError, Settings, load_settings

__all__ = ["ConfigError", "Settings", "create_app", "load_settings", "serve"]


def __getattr__(name: str) -> Any:
    if name in ("create_app", "serve"):
        from . import app

        return getattr(app, name)
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
