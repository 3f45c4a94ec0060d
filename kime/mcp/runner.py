"""What `kime mcp`'s tools answer with, built once from `kime serve`'s settings: a `kime.Router`
(`build_router`: no `--model`, or `--model NAME=SOURCE` entries, and the `LAYA_*` environment),
one `Agent` (a plain `--model SOURCE`), or a `RemoteRouter` over `--base-url`/`LAYA_BASE_URL`.

laya-mcp-server's environment keeps its meaning: `LAYA_BASE_URL` and `LAYA_API_KEY` (the key
sent to that server), `LAYA_REMOTE_TIMEOUT`, `LAYA_DEVICE`, `LAYA_THREADS`, `LAYA_PRELOAD`,
`LAYA_MODELS` (default here `english,multilingual`: typed-decisions stays lazy, as in laya's
MCP server, where laya serve preloads every checkpoint), `LAYA_AUTO_TASK` and
`LAYA_DEFAULT_MODEL`. The Router is built on first need, under a lock; a build that fails is a
tool error (`router construction failed: ...`) and is tried again on the next call.
"""
from __future__ import annotations

import os
import threading
from typing import Any, Dict, Optional, Tuple

from .remote import RemoteRouter, base_url_from
from ..laya.limits import STATE_CHARS
from .validate import ToolError

MCP_PRELOAD = ("english", "multilingual")
"""What laya's MCP server preloads when `LAYA_MODELS` is unset."""
BASE_URL_ENV = ("KIME_BASE_URL", "LAYA_BASE_URL")
REMOTE_KEY_ENV = ("LAYA_API_KEY", "KIME_API_KEY")


def env_base_url(environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The server to answer from, by `KIME_BASE_URL` then laya's `LAYA_BASE_URL`."""
    env = os.environ if environ is None else environ
    for name in BASE_URL_ENV:
        url = base_url_from(env.get(name))
        if url:
            return url
    return None


class Runner:
    """The tools' router and agent, built from `settings` (a `kime.serve.Settings`) on first
    use. `base_url` answers from a server instead; `api_key` is the key sent to it."""

    def __init__(self, settings: Any, base_url: Optional[str] = None,
                 api_key: Optional[str] = None, timeout: Optional[float] = None,
                 max_state_chars: int = STATE_CHARS):
        self.settings = settings
        self.base_url = base_url_from(base_url)
        self.api_key = api_key
        self.timeout = timeout
        self.max_state_chars = max_state_chars
        self._built: Optional[Tuple[Any, Any]] = None
        self._lock = threading.Lock()

    @property
    def remote(self) -> bool:
        return self.base_url is not None

    @property
    def preload(self) -> bool:
        return bool(self.settings.preload) and not self.remote

    @property
    def built(self) -> Optional[Tuple[Any, Any]]:
        """(router, agent) once built, else None; reading it builds nothing."""
        return self._built

    def get(self) -> Tuple[Any, Any]:
        """(router, agent): one of them None. Raises `ToolError` when the build fails."""
        if self._built is not None:
            return self._built
        with self._lock:
            if self._built is None:
                try:
                    self._built = self._build()
                except ToolError:
                    raise
                except Exception as exc:
                    what = "remote router" if self.remote else "router"
                    raise ToolError("internal_error", "%s construction failed: %s"
                                    % (what, exc)) from exc
            return self._built

    def _build(self) -> Tuple[Any, Any]:
        settings = self.settings
        if self.remote:
            assert self.base_url is not None
            default = ({} if settings.default_model is None
                       else {"default": settings.default_model})
            return RemoteRouter(self.base_url, api_key=self.api_key, timeout=self.timeout,
                                auto_task_detection=settings.auto_task, **default), None
        from ..serve.routing import build_router, single_source

        source = single_source(settings)
        if source is not None:
            from ..laya.agent import Agent

            return None, Agent(source, device=settings.device,
                               precision=settings.precision, threads=settings.threads,
                               answer_cache=settings.answer_cache)
        if not settings.preload_models and not settings.model:
            settings = settings.model_copy(update={"preload_models": list(MCP_PRELOAD)})
        return build_router(settings), None

    def close(self) -> None:
        """Let the engines go (a Router's, or the one Agent's)."""
        built, self._built = self._built, None
        if built is None:
            return
        router, agent = built
        if router is not None:
            router.unload()
        if agent is not None and hasattr(agent, "close"):
            agent.close()


def remote_key(settings: Any, environ: Optional[Dict[str, str]] = None) -> Optional[str]:
    """The bearer key for `--base-url`: laya's `LAYA_API_KEY`, else `KIME_API_KEY`, else the
    first key the settings gathered (the key file, the TOML file)."""
    env = os.environ if environ is None else environ
    for name in REMOTE_KEY_ENV:
        if env.get(name, "").strip():
            return env[name].strip()
    keys = list(getattr(settings, "api_keys", []) or [])
    return keys[0] if keys else None
