"""`laya.serve` on kime: laya serve's module functions, with laya's signatures and environment.

- `build_router()`: the Router the `LAYA_*` environment describes, preloaded unless
  `LAYA_PRELOAD=0` (kime serve's settings read that environment: `kime.serve.settings`);
- `create_app(router=None)`: the app over `router`, which may be a kime Router or any object
  with a Router's methods (`kime.serve.foreign`), else over `build_router()`;
- `main()`: the `laya-serve` console script: kime serve configured by the environment alone,
  bound to `LAYA_HOST`, whose default is laya's `0.0.0.0` (kime serve's own is `127.0.0.1`).

A setting the environment gets wrong ends the process with its message, as laya serve's do.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Optional

from ..laya import limits
from .settings import ConfigError, Settings, load_settings

# laya serve's module constants, under its names; the values are kime.laya.limits', the one home
# every surface asks.
MAX_QUESTIONS = limits.QUESTIONS
MAX_STATE_CHARS = limits.STATE_CHARS
MAX_BATCH_STATES = limits.BATCH_STATES
MAX_BODY_BYTES = limits.BODY_BYTES
MAX_CHOICE_OPTIONS = limits.CHOICE_OPTIONS
MAX_TOURNAMENT_CHOICE_OPTIONS = limits.TOURNAMENT_CHOICE_OPTIONS
MAX_SCORE_LEVELS = limits.BODY_SCORE_LEVELS
MAX_TOTAL_OPTIONS = limits.TOTAL_OPTIONS

LAYA_HOST_DEFAULT = "0.0.0.0"
"""Where `laya-serve` binds when neither LAYA_HOST nor KIME_HOST is set (laya serve's default:
every interface, as a container wants)."""
DEFAULT_PORT = 8000


def settings_from_env(environ: Optional[Dict[str, str]] = None) -> Settings:
    """kime serve's settings from the environment alone, with laya serve's host default."""
    env = dict(os.environ if environ is None else environ)
    flags: Dict[str, Any] = {}
    if not any(env.get(var, "").strip() for var in ("KIME_HOST", "LAYA_HOST")):
        flags["host"] = LAYA_HOST_DEFAULT
    try:
        return load_settings(flags, environ=env)
    except ConfigError as e:
        raise SystemExit(str(e)) from None


def build_router() -> Any:
    """A Router from the environment (`LAYA_MODELS`, `LAYA_EXTRA_MODELS`, `LAYA_DEFAULT_MODEL`,
    `LAYA_AUTO_TASK`, `LAYA_MAX_LOADED`, `LAYA_DEVICE`, ...), preloaded unless told otherwise."""
    from .routing import build_router as routed

    try:
        return routed(settings_from_env())
    except ConfigError as e:
        raise SystemExit(str(e)) from None


def create_app(router: Optional[Any] = None) -> Any:
    """laya serve's app over `router` (any object with a Router's `predict`/`predict_batch`),
    or over `build_router()`; the rest of its settings from the environment."""
    from .app import create_app as app_over

    settings = settings_from_env()
    return app_over(build_router() if router is None else router, settings)


def main() -> None:
    """`laya-serve`: serve the environment's Router until SIGINT/SIGTERM."""
    from .app import serve

    try:
        serve(settings_from_env())
    except ConfigError as e:
        raise SystemExit(str(e)) from None


__all__ = ["DEFAULT_PORT", "MAX_BATCH_STATES", "MAX_BODY_BYTES", "MAX_CHOICE_OPTIONS",
           "MAX_QUESTIONS", "MAX_SCORE_LEVELS", "MAX_STATE_CHARS", "MAX_TOTAL_OPTIONS",
           "MAX_TOURNAMENT_CHOICE_OPTIONS", "build_router", "create_app", "main"]

if __name__ == "__main__":
    main()
