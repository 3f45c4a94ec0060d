"""What the MCP tools answer with over a running laya-serve-compatible server (`kime mcp
--base-url`, or laya-mcp-server's `LAYA_BASE_URL`), with laya 0.4.15's `laya/mcp/remote.py`
behaviour: routing stays local (it needs no model), each answer is one `POST /v1/systemone`, and
each HTTP failure is a tool error with laya's code (`unauthorized`, `invalid_request`, `busy`,
`upstream_error`, `timeout`, `unreachable`).

`RemoteRouter` is composed, not inherited: a `kime.Router` that only routes (it never loads an
engine) and the one `kime.client.Client`, which answers. So every answering method, sync or
async, reaches the server, and nothing of the local Router's answering is inherited by
accident. No engine is built in this process.

Not available remotely, with a clear refusal instead of laya's: loading an agent (the
shortlist's embeddings) and `predict_long` (the windows are cut from the checkpoint's tokens,
which the server does not expose); laya's remote `predict_long` fails with a message about
hooks, a detail of how it is built.
"""
from __future__ import annotations

import math
import os
import urllib.parse
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar

from ..client import (BodyNotJson, Client, ClientError, ConnectFailure, MalformedReply,
                      OnThreads, StatusError, server_retry)
from ..laya.options import NO_OPTIONS, CallOptions
from ..laya.router import Router
from .validate import ToolError

DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "LAYA_REMOTE_TIMEOUT"
T = TypeVar("T")


def base_url_from(raw: Optional[str]) -> Optional[str]:
    """laya-mcp-server's reading of `LAYA_BASE_URL`: blank is None, a bare `host:port` is
    http, a trailing slash dropped."""
    text = (raw or "").strip()
    if not text:
        return None
    if "://" not in text:
        text = "http://" + text
    return text.rstrip("/")


def timeout_from_env(environ: Optional[Dict[str, str]] = None) -> float:
    """`LAYA_REMOTE_TIMEOUT` seconds; unset, unparseable or not a positive finite number: 300."""
    raw = (os.environ if environ is None else environ).get(TIMEOUT_ENV, "").strip()
    try:
        seconds = float(raw) if raw else DEFAULT_TIMEOUT_S
    except ValueError:
        return DEFAULT_TIMEOUT_S
    return seconds if math.isfinite(seconds) and seconds > 0 else DEFAULT_TIMEOUT_S


def tool_error(exc: ClientError, base_url: str, timeout: float) -> ToolError:
    """A client's failure as laya-mcp-server's tool error."""
    if isinstance(exc, StatusError):
        if exc.status == 401:
            return ToolError("unauthorized", "laya-serve refused the bearer token: " + exc.detail)
        if exc.status in (400, 413, 422):
            return ToolError("invalid_request", exc.detail)
        if exc.status == 503:
            return ToolError("busy", "laya-serve is busy: " + exc.detail)
        return ToolError("upstream_error", "laya-serve answered HTTP %d: %s"
                         % (exc.status, exc.detail))
    if isinstance(exc, BodyNotJson):
        return ToolError("upstream_error", "laya-serve returned a non-JSON body")
    if isinstance(exc, ConnectFailure):
        if exc.timed_out:
            return ToolError("timeout", "laya-serve did not answer within %.0fs" % timeout)
        return ToolError("unreachable", "cannot reach laya-serve at %s: %s"
                         % (base_url, getattr(exc.cause, "reason", exc.cause)))
    if isinstance(exc, MalformedReply) and not isinstance(exc.body, dict):
        return ToolError("upstream_error", "laya-serve returned a non-object body")
    return ToolError("upstream_error", "laya-serve returned a reply that is not a decision: %s"
                     % exc)


class RemoteRouter(OnThreads):
    """Routes here, answers from the server at `base_url` (its origin; the API paths are
    appended). `api_key` goes as `Authorization: Bearer`; `router_kwargs` are the routing
    Router's (`auto_task_detection`, `default`, `models`, ...)."""

    remote = True

    def __init__(self, base_url: str, api_key: Optional[str] = None,
                 timeout: Optional[float] = None, **router_kwargs: Any):
        self.base_url = base_url.rstrip("/")
        parts = urllib.parse.urlsplit(self.base_url)
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.query
                or parts.fragment):
            raise ValueError("base_url must be an HTTP(S) server URL without a query or "
                             "fragment")
        self.timeout = timeout_from_env() if timeout is None else float(timeout)
        if not math.isfinite(self.timeout) or self.timeout <= 0:
            raise ValueError("timeout must be a finite positive number")
        router_kwargs.pop("device", None)
        router_kwargs.pop("preload", None)
        self.routing = Router(**router_kwargs)
        self.client = Client(self.base_url, api_key=api_key, timeout=self.timeout,
                             retry=server_retry())

    @property
    def api_key(self) -> Optional[str]:
        return self.client.api_key

    def _call(self, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except ClientError as exc:
            raise tool_error(exc, self.base_url, self.timeout) from exc

    # --- what routing owns (this process) -------------------------------------------------

    def resolve(self, name: Any) -> str:
        """The checkpoint name `name` means (a built-in, an alias, one registered)."""
        return self.routing.resolve(name)

    def route(self, *args: Any, **kwargs: Any) -> Any:
        """`Router.route`: which checkpoint the server will be asked for, loading nothing."""
        return self.routing.route(*args, **kwargs)

    def route_batch(self, *args: Any, **kwargs: Any) -> Any:
        """`Router.route_batch`."""
        return self.routing.route_batch(*args, **kwargs)

    # --- what the server owns -------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """The server's `GET /health`."""
        return self._call(self.client.health)

    @property
    def loaded(self) -> List[str]:
        """What the server has resident, or [] when it cannot be asked."""
        try:
            value = self.health().get("loaded")
        except ToolError:
            return []
        return [v for v in value if isinstance(v, str)] if isinstance(value, list) else []

    def resident(self) -> Dict[str, Any]:
        return {}

    def load(self, name: str) -> Any:
        raise ToolError("unsupported_remote", "checkpoint %r lives in the server at %s; a "
                        "remote router cannot hand out an Agent" % (name, self.base_url))

    def preload(self, names: Optional[List[str]] = None) -> "RemoteRouter":
        return self  # the server decides what is resident

    def unload(self, name: Optional[str] = None) -> None:
        return None

    # --- answering: the Decider protocol over the client ----------------------------------

    def answer(self, state: Any, questions: Dict[Any, Any],
               options: CallOptions = NO_OPTIONS) -> Dict[str, Any]:
        """One `POST /v1/systemone` with the options that are set."""
        return self._call(lambda: self.client.answer(state, questions, options))

    def answer_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                     options: CallOptions = NO_OPTIONS,
                     batch_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """One `POST /v1/systemone/batch`."""
        return self._call(lambda: self.client.answer_batch(states, questions, options,
                                                           batch_size))

    def predict(self, state: Any, questions: Dict[Any, Any], **options: Any) -> Dict[str, Any]:
        """`answer` under Laya's keywords (what `decide` and the tournament call)."""
        return self.answer(state, questions, CallOptions(**options))

    def predict_batch(self, requests: Sequence[Dict[str, Any]], batch_size: Optional[int] = None,
                      hooks_timeout: Optional[float] = None, min_confidence: Any = None,
                      sort_by_length: bool = False) -> List[Dict[str, Any]]:
        """One `/v1/systemone` call per request, answers in input order: each request may
        carry its own questions and controls, which the server's batch route cannot."""
        if hooks_timeout is not None:
            raise ToolError("unsupported_remote", "hooks are callables and cannot be sent to "
                            "the server; install them on the server")
        return [self.answer(item["state"], item["questions"],
                            CallOptions.take(item).but(min_confidence=min_confidence))
                for item in requests]

    def predict_long(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        raise ToolError("unsupported_remote", "laya_predict_long cuts the state into windows of "
                        "the checkpoint's own tokens, which a server at %s does not expose; "
                        "run kime mcp without --base-url to scan long states" % self.base_url)

    def __repr__(self) -> str:
        return "RemoteRouter(base_url=%r, timeout=%g)" % (self.base_url, self.timeout)


__all__ = ["RemoteRouter", "base_url_from", "timeout_from_env", "tool_error"]
