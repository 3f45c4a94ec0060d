"""A Router that answers from a running laya-serve-compatible server (`kime mcp --base-url`,
or laya-mcp-server's `LAYA_BASE_URL`), with laya 0.4.15's `laya/mcp/remote.py` behaviour:
routing stays local (it needs no model), each answer is one `POST /v1/systemone`, and each HTTP
failure is a tool error with laya's code (`unauthorized`, `invalid_request`, `busy`,
`upstream_error`, `timeout`, `unreachable`).

The request body and the redirect rule (same origin only, so a bearer key never leaves the
server it was meant for) are `kime.integrations.remote`'s, shared with the framework
integrations; this module adds what a tool needs beyond one decision: the status code behind
a failure, and `GET /health` for `laya_status`. No engine is built in this process.

Not available remotely, with a clear refusal instead of laya's: loading an agent (the
shortlist's embeddings) and `predict_long` (the windows are cut from the checkpoint's tokens,
which the server does not expose); laya's remote `predict_long` fails with a message about
hooks, a detail of how it is built.
"""
from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Sequence

from ..integrations.remote import SameOriginRedirects, endpoint, request_body
from ..laya.router import Router
from .validate import ToolError

DEFAULT_TIMEOUT_S = 300.0
TIMEOUT_ENV = "LAYA_REMOTE_TIMEOUT"
HOOKS = ("hooks", "on_predict_start", "on_predict_end", "hooks_raise")


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


def _detail(exc: urllib.error.HTTPError) -> str:
    # FastAPI's `detail` (a string, or the 422's list as JSON), else the status text.
    try:
        body = json.loads(exc.read().decode("utf-8"))
    except Exception:  # any unreadable body: the status text says enough
        return str(exc.reason)
    detail = body.get("detail") if isinstance(body, dict) else None
    if isinstance(detail, str):
        return detail
    return json.dumps(detail, ensure_ascii=False) if detail is not None else str(exc.reason)


class RemoteRouter(Router):
    """Routes here, answers from the server at `base_url` (its origin; the API paths are
    appended). `api_key` goes as `Authorization: Bearer`."""

    remote = True

    def __init__(self, base_url: str, api_key: Optional[str] = None,
                 timeout: Optional[float] = None, **router_kwargs: Any):
        router_kwargs.pop("device", None)
        router_kwargs.pop("preload", None)
        super().__init__(**router_kwargs)
        self.base_url = base_url.rstrip("/")
        parts = urllib.parse.urlsplit(self.base_url)
        if (parts.scheme not in ("http", "https") or not parts.hostname or parts.query
                or parts.fragment):
            raise ValueError("base_url must be an HTTP(S) server URL without a query or "
                             "fragment")
        self.api_key = api_key or None
        self.timeout = timeout_from_env() if timeout is None else float(timeout)
        if not math.isfinite(self.timeout) or self.timeout <= 0:
            raise ValueError("timeout must be a finite positive number")
        self._opener = urllib.request.build_opener(SameOriginRedirects())

    def _request(self, url: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, ensure_ascii=False).encode("utf-8")
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        req = urllib.request.Request(url, data=data, headers=headers,
                                     method="GET" if data is None else "POST")
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = _detail(exc)
            if exc.code == 401:
                raise ToolError("unauthorized", "laya-serve refused the bearer token: "
                                + detail) from exc
            if exc.code in (400, 413, 422):
                raise ToolError("invalid_request", detail) from exc
            if exc.code == 503:
                raise ToolError("busy", "laya-serve is busy: " + detail) from exc
            raise ToolError("upstream_error", "laya-serve answered HTTP %d: %s"
                            % (exc.code, detail)) from exc
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
                raise ToolError("timeout", "laya-serve did not answer within %.0fs"
                                % self.timeout) from exc
            raise ToolError("unreachable", "cannot reach laya-serve at %s: %s"
                            % (self.base_url, reason)) from exc
        try:
            payload = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise ToolError("upstream_error", "laya-serve returned a non-JSON body") from exc
        if not isinstance(payload, dict):
            raise ToolError("upstream_error", "laya-serve returned a non-object body")
        return payload

    # --- what the server owns ------------------------------------------------------------

    def health(self) -> Dict[str, Any]:
        """The server's `GET /health`."""
        return self._request(self.base_url + "/health")

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

    # --- answering -----------------------------------------------------------------------

    def predict(self, state: Any, questions: Dict[Any, Any], model: Optional[str] = None,
                task: Optional[str] = None, lang: Optional[str] = None, lang_guess: Any = None,
                hooks: Any = None, on_predict_start: Any = None, on_predict_end: Any = None,
                hooks_raise: Optional[bool] = None, hooks_timeout: Optional[float] = None,
                max_len: Optional[int] = None, head_max_len: Optional[int] = None,
                min_confidence: Any = None) -> Dict[str, Any]:
        """One `POST /v1/systemone` with the controls that were set; hooks are refused."""
        if hooks_timeout is not None or any(v is not None for v in (
                hooks, on_predict_start, on_predict_end, hooks_raise)):
            raise ToolError("unsupported_remote", "hooks are callables and cannot be sent to "
                            "the server; install them on the server")
        if lang_guess is not None and not isinstance(lang_guess, str):
            raise ToolError("unsupported_remote", "a callable lang_guess cannot be sent over "
                            "HTTP")
        pinned = None if model in (None, "auto") else model
        body = request_body(state, questions, pinned, task=task, lang=lang,
                            lang_guess=lang_guess, max_len=max_len, head_max_len=head_max_len,
                            min_confidence=min_confidence)
        return self._request(endpoint(self.base_url), body)

    system_one = predict

    def predict_batch(self, requests: Sequence[Dict[str, Any]], batch_size: Optional[int] = None,
                      hooks_timeout: Optional[float] = None, min_confidence: Any = None,
                      sort_by_length: bool = False, **hooks: Any) -> List[Dict[str, Any]]:
        """One `/v1/systemone` call per request, answers in input order: each request may
        carry its own questions and controls, which the server's batch route cannot."""
        if hooks_timeout is not None or any(v is not None for k, v in hooks.items()
                                            if k in HOOKS):
            raise ToolError("unsupported_remote", "hooks are callables and cannot be sent to "
                            "the server; install them on the server")
        out = []
        for item in requests:
            controls = {k: item[k] for k in ("model", "task", "lang", "lang_guess", "max_len",
                                             "head_max_len") if k in item}
            out.append(self.predict(item["state"], item["questions"],
                                    min_confidence=min_confidence, **controls))
        return out

    def predict_long(self, *args: Any, **kwargs: Any) -> Dict[str, Any]:
        raise ToolError("unsupported_remote", "laya_predict_long cuts the state into windows of "
                        "the checkpoint's own tokens, which a server at %s does not expose; "
                        "run kime mcp without --base-url to scan long states" % self.base_url)

    def __repr__(self) -> str:
        return "RemoteRouter(base_url=%r, timeout=%g)" % (self.base_url, self.timeout)
