"""The one client of laya serve's HTTP API (`kime serve`, laya serve, or anything that speaks it):
`Client`, a `kime.laya.decider.Decider` over `POST /v1/systemone` and `/v1/systemone/batch`,
with `GET /health`. The integrations' `base_url=` and `kime mcp --base-url` hold one; each edge
turns the errors below into its own wording (laya's `RuntimeError`s, the MCP's tool codes).

Standard library only, so no integration needs an HTTP client installed. Every request goes
through `request`, the one place a request is sent, so the transport's rules live once:

- redirects are followed within one origin only (scheme, host and port), so a bearer key never
  reaches another host nor leaves HTTPS;
- `retry` (a `Retry`; none by default, as laya's clients make none; the integrations and `kime
  mcp --base-url` use `SERVER_RETRY`) sends a request again after a 502, 503 or 504, a 500 that
  is not the server's own (a proxy's plain-text page: Ray Serve's when the replica under the
  request died), or a connection the server dropped, a bounded number of times with a growing
  pause. Every route this client calls is idempotent (a decision changes nothing on the server),
  so a retry can only repeat work, never an effect;
- a failure is an exception that says what went wrong and keeps what the edges need: the status
  and body of an HTTP error (`StatusError`), the cause of a connection failure
  (`ConnectFailure`), a reply that is not JSON (`BodyNotJson`) or not a decision
  (`MalformedReply`, which keeps the parsed body).

The async methods run the same request on a worker thread (`asyncio.to_thread`, which carries
the caller's context), so the two share every rule. Per-call hooks are Python callables and are
refused before anything is sent, as is a `lang_guess` that is not a language code.
"""
from __future__ import annotations

import dataclasses
import http.client
import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .laya.options import NO_OPTIONS, CallOptions

ENDPOINT = "/v1/systemone"
BODY_OPTIONS = ("max_len", "head_max_len", "lang", "min_confidence", "task", "lang_guess")
"""The options that ride in a request body after `model`, in the order the body lists them."""
MALFORMED_PREFIX = "Malformed decision response"


@dataclasses.dataclass(frozen=True)
class Retry:
    """How often a request is sent again after a `statuses` answer, a 500 that is not the
    server's own (`proxy_500`: a proxy's page, such as Ray Serve's when the replica under the
    request died) or a dropped connection: `attempts` in all (1: never again), waiting
    `backoff_s`, then twice that, ... between."""

    attempts: int = 1
    backoff_s: float = 0.2
    statuses: Tuple[int, ...] = (502, 503, 504)
    proxy_500: bool = True

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int) \
                or self.attempts < 1:
            raise ValueError("Retry.attempts must be an integer of at least 1, got %r"
                             % (self.attempts,))
        if not 0 <= self.backoff_s < float("inf"):
            raise ValueError("Retry.backoff_s must be a finite number of seconds >= 0, got %r"
                             % (self.backoff_s,))


NO_RETRY = Retry()
SERVER_RETRY = Retry(attempts=4, backoff_s=0.2)
"""What the integrations' `base_url=` and `kime mcp --base-url` retry with: 3 more tries, after
0.2, 0.4 and 0.8 s (`KIME_CLIENT_RETRIES` sets how many; 0: none, as laya)."""
RETRIES_ENV = "KIME_CLIENT_RETRIES"


def server_retry(environ: Optional[Dict[str, str]] = None) -> Retry:
    """`SERVER_RETRY`, with `KIME_CLIENT_RETRIES` retries when it is set (a count >= 0)."""
    import os

    raw = (os.environ if environ is None else environ).get(RETRIES_ENV, "").strip()
    if not raw:
        return SERVER_RETRY
    if not raw.isdigit():
        raise ValueError("%s must be a number of retries >= 0, got %r" % (RETRIES_ENV, raw))
    return dataclasses.replace(SERVER_RETRY, attempts=int(raw) + 1)

DROPPED = (http.client.RemoteDisconnected, ConnectionResetError, ConnectionAbortedError,
           BrokenPipeError)
"""A connection the server closed under a request: what a restarting replica does."""


class ClientError(RuntimeError):
    """A request that did not come back as a decision; `url` is where it went."""

    def __init__(self, message: str, url: str):
        super().__init__(message)
        self.url = url


class StatusError(ClientError):
    """An HTTP error status: `status`, the raw body `text`, and FastAPI's `detail`."""

    def __init__(self, url: str, status: int, text: str, reason: str = ""):
        super().__init__("Laya server error %s: %s" % (status, text), url)
        self.status = status
        self.text = text
        self.reason = reason

    @property
    def from_server(self) -> bool:
        """Whether the server itself answered (a JSON object body, as FastAPI's errors are),
        not a proxy in front of it with a page of its own."""
        try:
            return isinstance(json.loads(self.text), dict)
        except ValueError:
            return False

    @property
    def detail(self) -> str:
        """FastAPI's `detail` (a string, or the 422's list as JSON), else the status text."""
        try:
            body = json.loads(self.text)
        except ValueError:
            return self.reason
        detail = body.get("detail") if isinstance(body, dict) else None
        if isinstance(detail, str):
            return detail
        return json.dumps(detail, ensure_ascii=False) if detail is not None else self.reason


class ConnectFailure(ClientError):
    """No answer: refused, dropped, timed out (`timed_out`); `cause` is the original error."""

    def __init__(self, url: str, cause: BaseException):
        super().__init__("Failed to connect to Laya server at %s: %s" % (url, cause), url)
        self.cause = cause
        reason = getattr(cause, "reason", cause)
        self.timed_out = isinstance(cause, TimeoutError) or isinstance(reason, TimeoutError)


class BodyNotJson(ConnectFailure):
    """A reply that is not JSON (a proxy's HTML page): laya counts it a failed connection."""


class MalformedReply(ClientError):
    """A reply that is JSON but not a decision (not an object, or `answers` not an object);
    `body` is what came."""

    def __init__(self, url: str, what: str, body: Any):
        super().__init__("%s from Laya server at %s: %s" % (MALFORMED_PREFIX, url, what), url)
        self.body = body


def _origin(url: str) -> Tuple[str, str, int]:
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), parts.port or (443 if scheme == "https" else 80)


class SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follow a redirect only to the same scheme, host and port; refuse any other."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any,
                         newurl: str) -> Optional[urllib.request.Request]:
        if _origin(req.full_url) != _origin(newurl):
            raise urllib.error.URLError("refusing cross-origin or HTTPS-downgrade redirect")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


def refuse_unsendable(options: CallOptions) -> None:
    """Refuse what cannot cross HTTP (laya's wording): per-call hooks, and a `lang_guess`
    that is not a language code."""
    hooked = options.hooked
    if hooked:
        raise ValueError(
            "%s run in the local runner and cannot be sent to a laya-serve endpoint; "
            "install them where serve runs, or drop them" % ", ".join(sorted(hooked)))
    guess = options.lang_guess
    if guess is not None and not isinstance(guess, str):
        raise ValueError(
            "lang_guess=%r cannot be sent to a laya-serve endpoint: only a language code string "
            "such as \"de\" crosses HTTP. Install the callable on the Router where serve runs, or "
            "pass a code" % (guess,))


def decision_body(options: CallOptions, **fields: Any) -> Dict[str, Any]:
    """A request body: `fields` (the state or states, the questions), `model` when one is
    pinned, then each body option that is set, in `BODY_OPTIONS` order."""
    refuse_unsendable(options)
    body = dict(fields)
    if options.model and options.model != "auto":
        body["model"] = options.model
    body.update(options.given(*BODY_OPTIONS))
    return body


class OnThreads:
    """The async half of the `Decider` protocol for a synchronous answerer (a client: its
    wait is a socket's): each call runs on a worker thread (`asyncio.to_thread`, which
    carries the caller's context)."""

    def answer(self, state: Any, questions: Dict[Any, Any],
               options: CallOptions = NO_OPTIONS) -> Dict[str, Any]:
        raise NotImplementedError

    def answer_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                     options: CallOptions = NO_OPTIONS,
                     batch_size: Optional[int] = None) -> List[Dict[str, Any]]:
        raise NotImplementedError

    async def answer_async(self, state: Any, questions: Dict[Any, Any],
                           options: CallOptions = NO_OPTIONS) -> Dict[str, Any]:
        """`answer` on a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.answer, state, questions, options)

    async def answer_batch_async(self, states: Sequence[Any], questions: Dict[Any, Any],
                                 options: CallOptions = NO_OPTIONS,
                                 batch_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """`answer_batch` on a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.answer_batch, states, questions, options,
                                       batch_size)


class Client(OnThreads):
    """A laya-serve-compatible server at `base_url` (its origin, or its `/v1/systemone`);
    `api_key` goes as `Authorization: Bearer`, `timeout` (seconds) bounds each attempt."""

    def __init__(self, base_url: str, api_key: Optional[str] = None, timeout: float = 10.0,
                 retry: Retry = NO_RETRY):
        root = base_url.rstrip("/")
        self.root = root[:-len(ENDPOINT)] if root.endswith(ENDPOINT) else root
        self.base_url = base_url
        self.api_key = api_key or None
        self.timeout = timeout
        self.retry = retry
        self._opener = urllib.request.build_opener(SameOriginRedirects())

    @property
    def endpoint(self) -> str:
        """Where a decision is posted."""
        return self.root + ENDPOINT

    def request(self, path: str, body: Optional[Dict[str, Any]] = None) -> Any:
        """`GET` `path` (or `POST` `body` as JSON) and the parsed reply, under `retry`."""
        url = self.root + path
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode("utf-8")
        headers = {"Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        if self.api_key:
            headers["Authorization"] = "Bearer %s" % self.api_key
        for attempt in range(self.retry.attempts):
            try:
                return self._send(urllib.request.Request(
                    url, data=data, headers=headers, method="GET" if data is None else "POST"))
            except (StatusError, ConnectFailure) as exc:
                if isinstance(exc, StatusError):
                    again = exc.status in self.retry.statuses or (
                        self.retry.proxy_500 and exc.status == 500 and not exc.from_server)
                else:
                    again = isinstance(exc.cause, DROPPED)
                if not again or attempt + 1 == self.retry.attempts:
                    raise
            time.sleep(self.retry.backoff_s * 2 ** attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _send(self, req: urllib.request.Request) -> Any:
        try:
            with self._opener.open(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            text = exc.read().decode("utf-8", errors="replace")
            raise StatusError(req.full_url, exc.code, text, str(exc.reason)) from exc
        except Exception as exc:
            raise ConnectFailure(req.full_url, exc) from exc
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise BodyNotJson(req.full_url, exc) from exc

    def health(self) -> Dict[str, Any]:
        """The server's `GET /health`."""
        reply = self.request("/health")
        if not isinstance(reply, dict):
            raise MalformedReply(self.root + "/health", "expected a JSON object, got %s"
                                 % type(reply).__name__, reply)
        return reply

    def _decision(self, path: str, body: Dict[str, Any]) -> Any:
        reply = self.request(path, body)
        url = self.root + path
        if not isinstance(reply, dict):
            raise MalformedReply(url, "expected a JSON object, got %s" % type(reply).__name__,
                                 reply)
        if "answers" in reply and not isinstance(reply["answers"], dict):
            raise MalformedReply(url, "'answers' must be a JSON object, got %s"
                                 % type(reply["answers"]).__name__, reply)
        return reply

    # --- the Decider protocol ---------------------------------------------------------------

    def answer(self, state: Any, questions: Dict[Any, Any],
               options: CallOptions = NO_OPTIONS) -> Dict[str, Any]:
        """One `POST /v1/systemone`: the reply, an object whose `answers` (when there) is one.
        Whether it answers what was asked is the reader's to judge (`kime.integrations.reading`)."""
        reply: Dict[str, Any] = self._decision(
            ENDPOINT, decision_body(options, state=state, questions=questions))
        return reply

    def answer_batch(self, states: Sequence[Any], questions: Dict[Any, Any],
                     options: CallOptions = NO_OPTIONS,
                     batch_size: Optional[int] = None) -> List[Dict[str, Any]]:
        """One `POST /v1/systemone/batch`: its `results`, one per state, in input order."""
        body = decision_body(options, states=list(states), questions=questions)
        if batch_size is not None:
            body["batch_size"] = batch_size
        path = ENDPOINT + "/batch"
        reply = self.request(path, body)
        results = reply.get("results") if isinstance(reply, dict) else None
        if not isinstance(results, list) or len(results) != len(body["states"]) or not all(
                isinstance(r, dict) for r in results):
            raise MalformedReply(self.root + path, "expected 'results', one object per state",
                                 reply)
        return results

    def __repr__(self) -> str:
        return "Client(%r, timeout=%g, retry=%r)" % (self.root, self.timeout, self.retry)


__all__ = ["BODY_OPTIONS", "BodyNotJson", "Client", "ClientError", "ConnectFailure",
           "MalformedReply", "NO_RETRY", "OnThreads", "Retry", "SERVER_RETRY",
           "SameOriginRedirects", "StatusError", "decision_body", "refuse_unsendable",
           "server_retry"]
