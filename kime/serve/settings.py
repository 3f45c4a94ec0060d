"""What `kime serve` runs with, declared once.

`Settings` is the one declaration: each field's type and bounds (pydantic validates them) and,
in its `Source` marker, the environment variables that may set it and its flag's help. The
`kime serve` flags (`add_arguments`), the environment lookup and the TOML file's keys are all
derived from it, so adding a setting is one line here.

Precedence: flags > environment (`KIME_*` first, then laya serve's `LAYA_*` equivalent) > the
TOML file (`--config`/`KIME_CONFIG`: a `[serve]` table or top-level keys) > the defaults. The
API keys then gather from the settings, the key file and `KIME_API_KEY`/`LAYA_API_KEY`.

The routing settings read their values as laya serve reads its environment, from every source:
a switch is on only for `1`, `true`, `yes` or `on`; `max_loaded` that is not a positive integer
leaves the Router's own default; `idle_unload_seconds` that is not a finite number is off (with
a warning); `extra_models` that is not a JSON object of sources refuses to start;
`tournament_group` outside [2, 100] is off; `max_batch_tokens` that is not a positive integer
is laya's 131072 (with a warning). `LAYA_MAX_CONCURRENT` sets `max_queue` when neither
`KIME_MAX_QUEUE` nor the flag does, read as laya reads it (not a positive integer: 16).
"""
from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from ..cache import ANSWER_CACHE
from ..laya.limits import CHOICE_OPTIONS

KEY_ENV = ("KIME_API_KEY", "LAYA_API_KEY")
LAYA_MAX_CONCURRENT = 16
"""laya serve's admission cap, what a `LAYA_MAX_CONCURRENT` that is not a positive integer means."""
MAX_BATCH_TOKENS = 131072
"""laya serve's `DEFAULT_MAX_BATCH_TOKENS`: 256 rows of 512 tokens in one forward pass."""
"""Each one, when set, adds one bearer key (laya serve reads LAYA_API_KEY)."""
CONFIG_ENV = "KIME_CONFIG"
ENGINES = ("local", "ray")
"""What `--engine` may name: this process, or Ray Serve."""
_log = logging.getLogger("kime.serve")


class ConfigError(ValueError):
    """A setting that does not parse (a flag, an environment variable or the TOML file)."""


@dataclass(frozen=True)
class Source:
    """Where a setting comes from besides the TOML file: its environment variables (the first
    one set wins) and its `kime serve` flag. `flag=False` keeps a setting off the command line
    (bearer keys there would show in `ps`)."""

    help: str
    env: Tuple[str, ...] = ()
    flag: bool = True
    short: Optional[str] = None
    repeat: bool = False  # the flag may be given several times; each adds one value
    # (variable, reading): a variable whose value means something else here, read first
    readers: Tuple[Tuple[str, Callable[[str], Any]], ...] = ()


def _no_bool(value: Any) -> Any:
    # pydantic reads True as 1; a boolean where a number belongs is a mistake in the file.
    if isinstance(value, bool):
        raise ValueError("a boolean is not a number")
    return value


def _one_or_many(value: Any) -> Any:
    # `api_key = "k"` in the file is one key, not a list of characters.
    return [value] if isinstance(value, str) else value


class Refused(ValueError):
    """A value refused with a reason the operator needs (laya serve's own words), which the
    `ConfigError` then carries after naming the value and its source."""


def _laya_switch(value: Any) -> Any:
    # laya serve's `_env_bool`: only these four spellings turn a switch on; anything else is off.
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


def _laya_max_loaded(value: Any) -> Optional[int]:
    # laya serve's `_resolve_max_loaded`: not a positive integer -> None (the Router's default).
    if value is None or isinstance(value, bool):
        return None
    try:
        n = int(str(value))
    except ValueError:
        return None
    return n if n > 0 else None


def _laya_seconds(value: Any) -> float:
    # laya serve's `_resolve_idle_unload_seconds`: unparseable or not finite -> off, with a warning.
    try:
        seconds = float(str(value).strip()) if not isinstance(value, bool) else math.nan
    except ValueError:
        seconds = math.nan
    if not math.isfinite(seconds):
        _log.warning("invalid LAYA_IDLE_UNLOAD_SECONDS %r; idle unload disabled", value)
        return 0.0
    return seconds if seconds > 0 else 0.0


def _laya_max_concurrent(raw: str) -> int:
    # laya serve's `_resolve_max_concurrent`: not a positive integer -> its default, 16.
    try:
        n = int(raw)
    except ValueError:
        return LAYA_MAX_CONCURRENT
    return n if n > 0 else LAYA_MAX_CONCURRENT


def _laya_tournament_group(value: Any) -> int:
    # laya serve's `_resolve_tournament_group`: an integer in [2, 100], anything else off (0),
    # so every choice the raised cap admits is over the group and narrowed.
    if value is None or isinstance(value, bool):
        return 0
    try:
        n = int(str(value))
    except ValueError:
        return 0
    return n if 2 <= n <= CHOICE_OPTIONS else 0


def _laya_batch_tokens(value: Any) -> int:
    # laya serve's `_resolve_max_batch_tokens`: not a positive integer -> its default, warned.
    try:
        n = int(str(value).strip()) if not isinstance(value, bool) else 0
    except ValueError:
        _log.warning("invalid LAYA_MAX_BATCH_TOKENS %r; falling back to %d", value,
                     MAX_BATCH_TOKENS)
        return MAX_BATCH_TOKENS
    if n <= 0:
        _log.warning("LAYA_MAX_BATCH_TOKENS must be positive (got %d); falling back to %d", n,
                     MAX_BATCH_TOKENS)
        return MAX_BATCH_TOKENS
    return n


def _engine(value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in ENGINES:
        return value.strip().lower()
    raise Refused("one of %s" % ", ".join(ENGINES))


def _replica_bounds(value: Any) -> Any:
    # `MIN:MAX` replicas; kept as written (the flag's spelling), checked here
    if value is None:
        return None
    lo, sep, hi = str(value).partition(":")
    if not (sep and lo.strip().isdigit() and hi.strip().isdigit()
            and int(lo) <= int(hi) and int(hi) >= 1):
        raise Refused("MIN:MAX replicas, 0 <= MIN <= MAX, MAX >= 1 (e.g. 1:4)")
    return "%d:%d" % (int(lo), int(hi))


def _comma_list(value: Any) -> Any:
    # LAYA_MODELS: "english, ml" -> ["english", "ml"]; blank entries dropped.
    if isinstance(value, str):
        return [name.strip() for name in value.split(",") if name.strip()]
    return value


def _extra_models(value: Any) -> Any:
    # laya serve's `_extra_models_option`: a JSON object {name: source}; a source is a repo id
    # or directory, or a [repo, subfolder] pair. Malformed refuses to start: a checkpoint missing
    # from the registry would have its requests answered by another one.
    if isinstance(value, str):
        if not value.strip():
            return {}
        try:
            value = json.loads(value)
        except ValueError as e:
            raise Refused("not a JSON object (%s)" % e) from None
    if not isinstance(value, dict):
        raise Refused("a JSON object {name: source}, got %s" % type(value).__name__)
    for name, source in value.items():
        if not isinstance(source, (str, list)):
            raise Refused("source for %r must be a repo id, a local path, or a [repo, subfolder] "
                          "pair; got %s" % (name, type(source).__name__))
    return value


Count = Annotated[int, BeforeValidator(_no_bool), Field(ge=0)]
Positive = Annotated[int, BeforeValidator(_no_bool), Field(ge=1)]
Seconds = Annotated[float, BeforeValidator(_no_bool), Field(ge=0.0, allow_inf_nan=False)]
Keys = Annotated[List[str], BeforeValidator(_one_or_many)]
Switch = Annotated[bool, BeforeValidator(_laya_switch)]
Sources = Annotated[Dict[str, Union[str, List[str]]], BeforeValidator(_extra_models)]


class Settings(BaseModel):
    """What `kime serve` runs with. Assigning a field validates it, as loading does."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True,
                              coerce_numbers_to_str=True)

    model: Annotated[Keys, Source(
        "SOURCE (an alias, hf://org/repo[/sub], or a checkpoint directory) serves that one "
        "checkpoint; NAME=SOURCE, repeatable, registers a checkpoint under NAME (english, "
        "multilingual, typed-decisions or a name of your own) on a Router that routes every "
        "request; none: Laya's three checkpoints behind a Router, as laya serve",
        env=("KIME_MODEL",), short="-m", repeat=True)] = Field(default_factory=list)
    host: Annotated[str, Source("bind address", env=("KIME_HOST", "LAYA_HOST"))] = "127.0.0.1"
    port: Annotated[int, BeforeValidator(_no_bool), Field(ge=0, le=65535),
                    Source("bind port", env=("KIME_PORT", "LAYA_PORT"))] = 8000
    device: Annotated[str, Source("auto, cpu, cuda or cuda:N",
                                  env=("KIME_DEVICE", "LAYA_DEVICE"))] = "auto"
    precision: Annotated[str, Source("auto (f16 on a GPU, f32 on the CPU), f16, f32, int8, bf16 "
                                     "or mixed", env=("KIME_PRECISION",))] = "auto"
    threads: Annotated[Count, Source("CPU threads, 0: every core",
                                     env=("KIME_THREADS", "LAYA_THREADS"))] = 0
    api_key_file: Annotated[Optional[str], Source(
        "bearer keys, one per line (also KIME_API_KEY, LAYA_API_KEY); without any key the API "
        "is open", env=("KIME_API_KEY_FILE",))] = None
    api_keys: Annotated[Keys, Source("bearer keys (the TOML file's `api_key`)",
                                     flag=False)] = Field(default_factory=list)
    max_queue: Annotated[Count, Source(
        "answer 503 + Retry-After when this many requests are in flight (being read, laid out, "
        "queued or run); 0: no bound. LAYA_MAX_CONCURRENT sets it when it is not set (laya "
        "serve's reading: not a positive integer is 16)",
        env=("KIME_MAX_QUEUE", "LAYA_MAX_CONCURRENT"),
        readers=(("LAYA_MAX_CONCURRENT", _laya_max_concurrent),))] = 256
    max_merge: Annotated[Count, Source(
        "requests one forward run may merge; 0: every queued request that fits",
        env=("KIME_MAX_MERGE",))] = 0
    answer_cache: Annotated[Count, Source(
        "rows whose outputs each engine keeps (a repeated row is answered without a forward "
        "pass); 0: off", env=("KIME_ANSWER_CACHE",))] = ANSWER_CACHE
    max_token_budget: Annotated[Positive, Source(
        "the largest max_len/head_max_len a request may ask for",
        env=("KIME_MAX_TOKEN_BUDGET", "LAYA_MAX_TOKEN_BUDGET"))] = 8192
    body_read_timeout: Annotated[Seconds, Source(
        "seconds a client gets to send its request body; 0: no limit",
        env=("KIME_BODY_READ_TIMEOUT", "LAYA_BODY_READ_TIMEOUT"))] = 10.0
    max_batch_tokens: Annotated[Optional[int], BeforeValidator(_laya_batch_tokens), Source(
        "answer a batch request in chunks of states, each at most this many tokens (states x "
        "questions x max_len, 512 when the request sets none), as laya serve does; never "
        "refused. Unset: one call, whose rows the engine packs unpadded into batches it "
        "bounds itself (laya serve's default: %d)" % MAX_BATCH_TOKENS,
        env=("KIME_MAX_BATCH_TOKENS", "LAYA_MAX_BATCH_TOKENS"))] = None
    tournament_group: Annotated[int, BeforeValidator(_laya_tournament_group), Source(
        "answer a choice of more options than this (2-100) by elimination in groups of this "
        "size, on both decision routes, and raise the option cap from 100 to 255; 0: off",
        env=("KIME_TOURNAMENT_GROUP", "LAYA_TOURNAMENT_GROUP"))] = 0
    jev_strict: Annotated[Switch, Source(
        "1: answer the strict Jev contract: model, answers (each its type's fields only) and "
        "usage's two token counts; no routing, action, answer_confidence or x_ fields",
        env=("KIME_JEV_STRICT", "LAYA_JEV_STRICT"))] = False
    header_read_timeout: Annotated[Seconds, Source(
        "seconds a client gets to send its request line and headers (408 and closed after); "
        "0: no limit", env=("KIME_HEADER_READ_TIMEOUT",))] = 10.0
    workers: Annotated[Positive, Source(
        "threads that lay requests out (the forward pass runs on the scheduler)",
        env=("KIME_WORKERS",))] = 32
    graceful_shutdown: Annotated[Seconds, Source(
        "seconds requests in flight get to finish after SIGTERM",
        env=("KIME_GRACEFUL_SHUTDOWN",))] = 30.0
    log_level: Annotated[str, Source("uvicorn log level",
                                     env=("KIME_LOG_LEVEL", "LAYA_LOG_LEVEL"))] = "info"
    root_path: Annotated[str, Source("public URL prefix behind a reverse proxy",
                                     env=("KIME_ROOT_PATH", "LAYA_ROOT_PATH"))] = ""
    # --- routing across checkpoints (a Router: no --model, or NAME=SOURCE ones) ---------------
    extra_models: Annotated[Sources, Source(
        "JSON object {name: source} registering checkpoints beside Laya's: a repo id, a "
        "directory or a [repo, subfolder] pair",
        env=("KIME_EXTRA_MODELS", "LAYA_EXTRA_MODELS"), flag=False)] = Field(
            default_factory=dict)
    default_model: Annotated[Optional[str], Source(
        "checkpoint for states that carry no language evidence (the Router's default: "
        "multilingual)", env=("KIME_DEFAULT_MODEL", "LAYA_DEFAULT_MODEL"))] = None
    auto_task: Annotated[Switch, Source(
        "1: route questions whose ids match a typed-decisions workflow to typed-decisions",
        env=("KIME_AUTO_TASK", "LAYA_AUTO_TASK"))] = False
    max_loaded: Annotated[Optional[int], BeforeValidator(_laya_max_loaded), Source(
        "checkpoints kept loaded at once, least recently used evicted (the Router's default: "
        "2; a preload raises it to fit)", env=("KIME_MAX_LOADED", "LAYA_MAX_LOADED"))] = None
    idle_unload_seconds: Annotated[float, BeforeValidator(_laya_seconds), Source(
        "unload every checkpoint after this many idle seconds; 0: never",
        env=("KIME_IDLE_UNLOAD_SECONDS", "LAYA_IDLE_UNLOAD_SECONDS"))] = 0.0
    preload: Annotated[Switch, Source(
        "load the checkpoints at startup, not on first use",
        env=("KIME_PRELOAD", "LAYA_PRELOAD"))] = True
    preload_models: Annotated[List[str], BeforeValidator(_comma_list), Source(
        "comma list of the checkpoints to preload (default: the NAME=SOURCE ones, else every "
        "registered one)", env=("KIME_PRELOAD_MODELS", "LAYA_MODELS"))] = Field(
            default_factory=list)
    # --- scale-out: Ray Serve (`--engine ray`, kime[serve,ray]) ---------------------------------
    engine: Annotated[str, BeforeValidator(_engine), Source(
        "local: this process serves; ray: replicas on Ray Serve, its proxy at --host/--port",
        env=("KIME_ENGINE",))] = "local"
    replicas: Annotated[Optional[Positive], Source(
        "with --engine ray: replicas (with --autoscale: the number to start with; default 1)",
        env=("KIME_REPLICAS",))] = None
    threads_per_replica: Annotated[Count, Source(
        "with --engine ray: threads, and the CPUs Ray gives, per replica (--threads means the "
        "same there; neither: 1)", env=("KIME_THREADS_PER_REPLICA",))] = 0
    autoscale: Annotated[Optional[str], BeforeValidator(_replica_bounds), Source(
        "with --engine ray: MIN:MAX replicas, Serve scales between them on requests in flight",
        env=("KIME_AUTOSCALE",))] = None
    ray_address: Annotated[Optional[str], Source(
        "with --engine ray: the cluster to join (auto, or the head's HOST:6379); none: a new "
        "local Ray on this machine, unless RAY_ADDRESS names one",
        env=("KIME_RAY_ADDRESS",))] = None


RAY_ONLY = ("replicas", "threads_per_replica", "autoscale", "ray_address")
"""Settings that mean something only with `engine = "ray"`."""


def check_engine(settings: Settings) -> None:
    """Refuse Ray's settings on the local engine (they would be ignored), all named at once."""
    if settings.engine == "ray":
        return
    given = [flag_name(name) for name in RAY_ONLY if getattr(settings, name)]
    if given:
        raise ConfigError("%s need --engine ray" % ", ".join(given))


def sources() -> Dict[str, Source]:
    """Every setting's `Source`, in declaration order."""
    out: Dict[str, Source] = {}
    for name, info in Settings.model_fields.items():
        found = [m for m in info.metadata if isinstance(m, Source)]
        if len(found) != 1:
            raise TypeError("setting %r needs exactly one Source marker" % name)
        out[name] = found[0]
    return out


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `kime serve` flags, one per setting with a flag, plus `--config`. Every flag defaults
    to None (not given), so the environment and the file still apply beneath it."""
    for name, source in sources().items():
        if not source.flag:
            continue
        default = Settings.model_fields[name].get_default(call_default_factory=True)
        where = ["env " + ", ".join(source.env)] if source.env else []
        if default is not None:
            where.append("default %s" % (default,))
        help_ = source.help + (" (%s)" % "; ".join(where) if where else "")
        names = [flag_name(name)] + ([source.short] if source.short else [])
        parser.add_argument(*names, dest=name, default=None, help=help_,
                            action="append" if source.repeat else "store")
    parser.add_argument("--config", default=None, help="TOML file with the settings (a [serve] "
                        "table or top-level keys; env %s)" % CONFIG_ENV)


def flags_from(args: argparse.Namespace) -> Dict[str, Any]:
    """The settings `add_arguments`' flags hold (None where a flag was not given)."""
    return {name: getattr(args, name, None) for name, s in sources().items() if s.flag}


def _assign(settings: Settings, name: str, value: Any, source: str) -> None:
    try:
        setattr(settings, name, value)
    except ValidationError as e:
        reasons = [str(err["ctx"]["error"]) for err in e.errors()
                   if isinstance(err.get("ctx", {}).get("error"), Refused)]
        raise ConfigError("invalid %s %r for %s%s" % (source, value, name, "".join(
            ": " + reason for reason in reasons))) from None


def _read_toml(path: str) -> Dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # Python 3.10: the serve extra brings tomli
        import tomli as tomllib

    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except OSError as e:
        raise ConfigError("cannot read --config %s: %s" % (path, e.strerror)) from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError("--config %s is not TOML: %s" % (path, e)) from e
    table = data.get("serve", data)
    if not isinstance(table, dict):
        raise ConfigError("--config %s: [serve] must be a table" % path)
    if "api_key" in table:
        table = dict(table, api_keys=table["api_key"])
        del table["api_key"]
    unknown = sorted(k for k in table if k not in Settings.model_fields)
    if unknown:
        raise ConfigError("--config %s: unknown setting(s) %s" % (path, ", ".join(unknown)))
    return table


def _key_file(path: str) -> List[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return [line.strip() for line in f if line.strip() and not line.strip().startswith("#")]
    except OSError as e:
        raise ConfigError("cannot read the API key file %s: %s" % (path, e.strerror)) from e


def load_settings(flags: Optional[Mapping[str, Any]] = None, config: Optional[str] = None,
                  environ: Optional[Mapping[str, str]] = None) -> Settings:
    """Settings from flags (None: not given) > environment > TOML file > defaults; then the
    API keys from the key file and KIME_API_KEY/LAYA_API_KEY. Raises `ConfigError` naming the
    value, where it came from and the setting."""
    env = dict(os.environ if environ is None else environ)
    config = config or env.get(CONFIG_ENV) or None
    declared = sources()
    settings = Settings()
    if config:
        for name, value in _read_toml(config).items():
            _assign(settings, name, value, "config value")
    for name, source in declared.items():
        for var in source.env:
            raw = env.get(var, "").strip()
            if raw:
                reading = dict(source.readers).get(var)
                _assign(settings, name, raw if reading is None else reading(raw),
                        "environment variable %s" % var)
                break
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    unknown = sorted(k for k in given if k not in declared)
    if unknown:
        raise ConfigError("unknown setting(s) %s" % ", ".join(unknown))
    for name, value in given.items():
        _assign(settings, name, value, "flag value")
    keys = list(settings.api_keys)
    if settings.api_key_file:
        keys += _key_file(settings.api_key_file)
    keys += [env[var].strip() for var in KEY_ENV if env.get(var, "").strip()]
    settings.api_keys = keys
    return settings
