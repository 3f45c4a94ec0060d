"""Every body gets an answer or a 4xx, never a 5xx, from a real `kime serve` on loopback: random
requests (tests/request_strategies.py), bytes that are not JSON, the bodies once reported, NaN in
a refusal's input, and clients that trickle their headers or body (slowloris). The same requests
through the engine API: tests/core/test_robustness.py.
"""
from __future__ import annotations

import json
import socket
import time
import warnings
from typing import Any, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kime

from ..request_strategies import (JSON, ODD, QUESTION_OK, QUESTIONS, RUN, TEXT, questions_answered,
                                  requests)
from .loopback import TINY, LoopbackServer


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        own = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    srv = LoopbackServer(own)
    yield srv
    srv.stop()


def _body_bytes(body: Any) -> bytes:
    # Python's json writes NaN and lone surrogates (as \ud800 escapes): both reach the server.
    return json.dumps(body).encode()


@pytest.mark.slow  # hypothesis: a few hundred HTTP requests
@RUN
@given(requests())
def test_server_answers_4xx_never_5xx(server, body):
    status, reply = server.post("/v1/systemone", _body_bytes(body))
    assert status < 500, (status, reply)
    if status == 200:  # what the server read: JSON keys are strings, so 0 and "0" are one
        questions_answered(json.loads(_body_bytes(body)), reply["answers"])
    else:
        assert isinstance(reply, dict) and reply.get("detail")


@pytest.mark.slow  # hypothesis: a few hundred HTTP requests
@RUN
@given(st.one_of(st.fixed_dictionaries({"states": st.one_of(st.lists(st.one_of(TEXT, ODD),
                                                                      max_size=3), JSON),
                                         "questions": QUESTIONS}), JSON))
def test_server_batch_answers_4xx_never_5xx(server, body):
    status, reply = server.post("/v1/systemone/batch", _body_bytes(body))
    assert status < 500, (status, reply)
    if status != 200:
        assert isinstance(reply, dict) and reply.get("detail")


@pytest.mark.parametrize("raw", [b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"state": "\\ud800"}',
                                 b"[" * 100000, b'{"state": "x", "questions": ' + b"[" * 5000])
def test_server_refuses_bytes_that_are_not_a_request(server, raw):
    status, reply = server.post("/v1/systemone", raw)
    assert 400 <= status < 500 and reply.get("detail")


def test_the_reported_server_bodies_get_4xx(server):
    """Regression (issue 14): these bodies got a 500 from kime serve."""
    bodies = [
        {"state": "", "questions": {"": {"type": "Choice", "instructions": "",
                                         "criteria": {"true": "t"}}}},
        {"state": "x", "questions": {"a": {"type": "score", "instructions": {"k": "v"},
                                           "criteria": ["lo", "hi"]},
                                     "b": {"type": {"x": 1}, "instructions": "y"}}},
        {"state": "x", "questions": {"a": {"type": "choice", "instructions": ["list"],
                                           "criteria": ["p", "q"]}}},
    ]
    for body in bodies:
        status, reply = server.post("/v1/systemone", _body_bytes(body))
        assert status < 500, (body, status, reply)


def _trickle(port: int, first: bytes, drip: bytes, every: float,
             for_at_most: float) -> Tuple[bytes, float]:
    """Send `first`, then `drip` every `every` seconds until the server answers or closes;
    returns what it sent back and when (seconds after connecting)."""
    t0 = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=for_at_most) as sock:
        sock.sendall(first)
        sock.settimeout(every)
        got = b""
        while time.monotonic() - t0 < for_at_most:
            try:
                chunk = sock.recv(4096)
            except socket.timeout:
                try:
                    sock.sendall(drip)
                except OSError:
                    break
                continue
            except OSError:
                break
            if not chunk:
                break
            got += chunk
        return got, time.monotonic() - t0


@pytest.mark.slow  # waits out two read deadlines
def test_slow_headers_and_slow_bodies_are_cut_off_and_free_their_slot():
    """A client that trickles its headers (slowloris) gets a 408 and is closed by the header
    deadline; one that trickles its body gets laya serve's 408 from the body deadline; a normal
    request is answered throughout."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        own = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    srv = LoopbackServer(own, header_read_timeout=0.6, body_read_timeout=0.6)
    try:
        got, took = _trickle(srv.port, b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\n",
                             b"x-slow: 1\r\n", every=0.1, for_at_most=10)
        assert got.startswith(b"HTTP/1.1 408") and took < 5, (got, took)
        body = json.dumps({"state": "hi", "questions": QUESTION_OK}).encode()
        head = (b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n" % len(body))
        got, took = _trickle(srv.port, head + body[:3], b" ", every=0.1, for_at_most=10)
        assert got.startswith(b"HTTP/1.1 408") and took < 5, (got, took)
        status, reply = srv.post("/v1/systemone", body)
        assert status == 200 and list(reply["answers"]) == ["q"]
    finally:
        srv.stop()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), {"deep": [float("-inf")]}])
def test_a_422_whose_input_holds_nan_or_infinity_is_still_a_422(server, bad):
    """Regression (found by test_server_answers_4xx_never_5xx): the problem's `input` echoed a
    NaN, which strict JSON cannot carry, and the 422 became a 500."""
    body = {"state": "x", "questions": {"q": {"type": "score", "instructions": "y",
                                              "criteria": bad}}}
    status, reply = server.post("/v1/systemone", _body_bytes(body))
    assert status == 422 and reply["problems"][0]["loc"] == ["questions", "q", "criteria"]


