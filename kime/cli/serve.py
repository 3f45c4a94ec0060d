"""`kime serve`: laya-serve's HTTP API. Its flags come from the settings' declaration
(`kime.serve.settings`); without the serve extra the command stays listed and, run with any
flags, says what to install."""
from __future__ import annotations

import argparse

from .exits import UsageError


def _serve(args: argparse.Namespace) -> int:
    try:
        from ..serve import ConfigError, load_settings, serve
        from ..serve.settings import check_engine, flags_from
    except ImportError as e:
        raise UsageError("kime serve needs the HTTP stack: pip install 'kime[serve]' (%s)"
                         % e) from e
    try:
        settings = load_settings(flags_from(args), config=args.config)
        check_engine(settings)
        if settings.engine == "ray":
            try:
                from ..serve import on_ray
            except ImportError as e:
                raise UsageError("kime serve --engine ray needs Ray Serve: pip install "
                                 "'kime[serve,ray]' (%s)" % e) from e
            on_ray.run(settings)
        else:
            serve(settings)
    except ConfigError as e:
        raise UsageError(str(e)) from e
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `serve` to `kime`'s subcommands (an argparse subparsers action)."""
    s = sub.add_parser("serve", help="serve laya-serve's HTTP API (needs kime[serve])",
                       description="Serve Laya's HTTP API (POST /v1/systemone, "
                       "/v1/systemone/batch; GET /health, /ready, /v1/models, /metrics) on "
                       "FastAPI + uvicorn: one checkpoint (--model SOURCE), or, as laya serve, a "
                       "Router that sends each request to its checkpoint (no --model: Laya's "
                       "english, multilingual and typed-decisions; --model NAME=SOURCE, "
                       "repeatable, and LAYA_EXTRA_MODELS register others). Settings: flags > "
                       "KIME_* / LAYA_* environment > --config TOML file > defaults.")
    try:
        from ..serve.settings import add_arguments
    except ImportError:
        s.set_defaults(any_arguments=True)
    else:
        add_arguments(s)
    s.set_defaults(run=_serve)
