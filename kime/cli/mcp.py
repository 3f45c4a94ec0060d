"""`kime mcp`: laya-mcp-server's MCP tools (`kime.mcp`) over stdio, or streamable HTTP
(`--transport http`), answered by a kime Router here or by a server at `--base-url`.

The model settings are `kime serve`'s (`kime.serve.settings`: `--model`, `--device`, the
`LAYA_*`/`KIME_*` environment, `--config`), read by the same loader; only the flags that shape
the engines, the HTTP endpoint and its keys are offered here. Without the mcp extra the command
stays listed and, run, says what to install.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .exits import UsageError, error_line, exit_code

DESCRIPTION = ("laya-mcp-server's ten MCP tools (laya_predict, laya_route, laya_predict_batch, "
               "laya_route_batch, laya_shortlist, laya_tournament, laya_preset, laya_decide, "
               "laya_predict_long, laya_status) over stdio or streamable HTTP, answered by a "
               "kime Router in this process or by a laya-serve-compatible server (--base-url). "
               "Model settings as kime serve's: flags > KIME_* / LAYA_* environment > --config "
               "> defaults; LAYA_MODELS unset preloads english and multilingual, as laya's MCP "
               "server does.")

LIMIT_ENV = "KIME_MCP_MAX_STATE_CHARS"

SETTINGS = ("model", "device", "precision", "threads", "api_key_file", "answer_cache",
            "default_model", "auto_task", "max_loaded", "idle_unload_seconds", "preload",
            "preload_models", "host", "port", "log_level")
"""The `kime serve` settings `kime mcp` takes as flags (each also from its environment)."""


def _mcp(args: argparse.Namespace) -> int:
    try:
        from ..mcp.runner import Runner, env_base_url, remote_key
        from ..mcp.server import run
        from ..serve.settings import ConfigError, load_settings
    except ImportError as e:
        raise UsageError("kime mcp needs the MCP SDK: pip install 'kime[mcp]' (%s)" % e) from e
    flags = {name: getattr(args, name, None) for name in SETTINGS}
    try:
        settings = load_settings(flags, config=args.config)
    except ConfigError as e:
        raise UsageError(str(e)) from e
    base_url = args.base_url or env_base_url()
    runner = Runner(settings, base_url=base_url,
                    api_key=remote_key(settings) if base_url else None,
                    max_state_chars=_state_limit(args.max_state_chars))
    if base_url:
        try:
            runner.get()
        except Exception as e:  # a base URL that cannot be one: refuse to start
            raise UsageError(str(getattr(e, "message", e))) from e
    run(runner, transport=args.transport, host=settings.host, port=settings.port,
        path=args.path, keys=settings.api_keys, log_level=settings.log_level)
    return 0


def _state_limit(flag: Optional[str]) -> int:
    from ..laya.limits import STATE_CHARS

    raw = flag if flag is not None else os.environ.get(LIMIT_ENV, "").strip()
    if not raw:
        return STATE_CHARS
    try:
        value = int(raw)
    except ValueError:
        value = -1
    if value < 0:
        raise UsageError("invalid %s %r for max_state_chars: 0 (no limit) or a positive "
                         "integer" % ("flag value" if flag is not None else LIMIT_ENV, raw))
    return value


def main(argv: Optional[List[str]] = None) -> int:
    """`kime-mcp-server`: laya-mcp-server's console script on kime, `kime mcp` with `argv`
    (none: stdio, configured by the environment, as laya's is)."""
    parser = argparse.ArgumentParser(prog="kime-mcp-server", description=DESCRIPTION)
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return _mcp(args)
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line and an exit code, as `kime` reports a failed command
        if args.verbose:
            raise
        print(error_line(e), file=sys.stderr)
        return exit_code(e)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `mcp` to `kime`'s subcommands (an argparse subparsers action)."""
    m = sub.add_parser("mcp", help="serve laya-mcp-server's MCP tools (needs kime[mcp])",
                       description=DESCRIPTION)
    add_arguments(m)


def add_arguments(m: argparse.ArgumentParser) -> None:
    """`kime mcp`'s flags: the transport, the remote server, the state cap, and the `kime
    serve` settings in `SETTINGS`; the command's handler as `run`."""
    m.add_argument("--transport", choices=("stdio", "http"), default="stdio",
                   help="stdio (default: a client starts this process) or streamable HTTP on "
                   "--host/--port at --path, behind the bearer keys when any is configured")
    m.add_argument("--path", default="/mcp", help="the streamable HTTP endpoint (default /mcp)")
    m.add_argument("--base-url", default=None, help="answer from this laya-serve-compatible "
                   "server instead of loading checkpoints (env KIME_BASE_URL, LAYA_BASE_URL; "
                   "its key: LAYA_API_KEY, KIME_API_KEY; LAYA_REMOTE_TIMEOUT seconds)")
    m.add_argument("--max-state-chars", default=None, help="refuse a state longer than this "
                   "as JSON (default: laya serve's cap, 50000; laya_predict_long takes any; 0: "
                   "no limit; env %s)" % LIMIT_ENV)
    try:
        from ..serve.settings import Settings, flag_name, sources
    except ImportError:
        m.set_defaults(any_arguments=True)
    else:
        declared = sources()
        for name in SETTINGS:
            source = declared[name]
            default = Settings.model_fields[name].get_default(call_default_factory=True)
            where = ["env " + ", ".join(source.env)] if source.env else []
            if default is not None:
                where.append("default %s" % (default,))
            names = [flag_name(name)] + ([source.short] if source.short else [])
            m.add_argument(*names, dest=name, default=None,
                           action="append" if source.repeat else "store",
                           help=source.help + (" (%s)" % "; ".join(where) if where else ""))
        m.add_argument("--config", default=None, help="TOML file with the settings (as kime "
                       "serve's)")
    m.set_defaults(run=_mcp)
