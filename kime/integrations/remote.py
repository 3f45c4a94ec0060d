"""One decision over HTTP: POST `/v1/systemone` to any laya-serve-compatible server (laya 0.4.15's
`_call_remote`, of which laya keeps a copy per integration and kime this one).

Standard library only, so no integration needs an HTTP client installed. Redirects are followed
only within one origin (scheme, host and port), so a bearer key never reaches another host nor
leaves HTTPS. The reply must be a JSON object whose `answers`, when present, is an object; each
failure is a `RuntimeError` in laya's wording. laya's tool selector reads the raw body itself and
routes a malformed one to its fallback tool, which `strict=False` keeps.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Dict, Optional

from .guard import MALFORMED_PREFIX

ENDPOINT = "/v1/systemone"
BODY_CONTROLS = ("max_len", "head_max_len", "lang", "min_confidence", "task", "lang_guess")
"""The per-call controls that ride in the request body, in the order the body lists them."""


def _origin(url: str) -> tuple:
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


def endpoint(base_url: str) -> str:
    """`base_url` with `/v1/systemone` appended unless it already ends with it."""
    url = base_url.rstrip("/")
    return url if url.endswith(ENDPOINT) else url + ENDPOINT


def request_body(state: Any, questions: Dict[str, Any], model: Optional[str] = None,
                 **controls: Any) -> Dict[str, Any]:
    """The JSON body: state, questions, `model` when truthy, then each set control in order."""
    unknown = sorted(set(controls) - set(BODY_CONTROLS))
    if unknown:
        raise TypeError("call_remote() got unexpected keyword argument(s): %s" % ", ".join(unknown))
    body: Dict[str, Any] = {"state": state, "questions": questions}
    if model:
        body["model"] = model
    for key in BODY_CONTROLS:
        if controls.get(key) is not None:
            body[key] = controls[key]
    return body


def call_remote(base_url: str, state: Any, questions: Dict[str, Any], *,
                api_key: Optional[str] = None, model: Optional[str] = None,
                timeout: float = 10.0, strict: bool = True, **controls: Any) -> Dict[str, Any]:
    """POST one decision to `base_url` and return the parsed reply.

    `controls` are the body controls (`BODY_CONTROLS`); unset ones are left out. `api_key`
    travels as `Authorization: Bearer ...`. An HTTP error status is `RuntimeError("Laya server
    error <code>: <body>")`, any other failure `RuntimeError("Failed to connect to Laya server at
    <url>: ...")`; with `strict` (the default) a reply that is not an object, or whose `answers`
    is not one, is `RuntimeError("Malformed decision response from Laya server at <url>: ...")`.
    """
    url = endpoint(base_url)
    data = json.dumps(request_body(state, questions, model, **controls)).encode("utf-8")
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = "Bearer %s" % api_key
    req = urllib.request.Request(url, data=data, headers=headers, method="POST")
    opener = urllib.request.build_opener(SameOriginRedirects())
    try:
        with opener.open(req, timeout=timeout) as resp:
            parsed = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as e:
        text = e.read().decode("utf-8", errors="replace")
        raise RuntimeError("Laya server error %s: %s" % (e.code, text)) from e
    except Exception as e:
        raise RuntimeError("Failed to connect to Laya server at %s: %s" % (url, e)) from e
    if not strict:
        return parsed  # any JSON value: the caller reads it
    # Checked after the try, so the catch-all above cannot swallow it.
    if not isinstance(parsed, dict):
        raise RuntimeError("%s from Laya server at %s: expected a JSON object, got %s"
                           % (MALFORMED_PREFIX, url, type(parsed).__name__))
    if "answers" in parsed and not isinstance(parsed["answers"], dict):
        raise RuntimeError("%s from Laya server at %s: 'answers' must be a JSON object, got %s"
                           % (MALFORMED_PREFIX, url, type(parsed["answers"]).__name__))
    return parsed
