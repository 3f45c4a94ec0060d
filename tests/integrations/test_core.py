"""The integrations' shared core and the one HTTP client: `kime.client.Client`,
`kime.integrations.caller` and `kime.integrations.reading` (laya 0.4.15's `_controls`,
`_guard`, `_call_remote` and `_execute_decision`, kept once in kime).

- `Client` against real HTTP servers on loopback: the body it sends (options in order, unset
  ones absent), the bearer key, redirects followed within one origin only (another port,
  another scheme: refused before anything is sent there), malformed replies (with the body
  kept), HTTP errors, a timeout, and the retry policy (502/503/504 and a dropped connection,
  bounded; nothing else retried);
- `Caller` on a kime Agent, a kime Router and a plain object: the same answers as calling them
  directly, the routing hints refused by name on an Agent, hooks and a callable `lang_guess`
  refused before a request, batching;
- `reading`: `pick` and `screen` fail closed, with properties over arbitrary JSON answers.
"""
from __future__ import annotations

import http.server
import json
import math
import socket
import threading
import time
import warnings
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kime
from kime.client import Client, MalformedReply, Retry, StatusError
from kime.integrations import reading
from kime.integrations.caller import Caller, Foreign, default_router
from kime.laya.options import NO_OPTIONS, CallOptions

from .. import paths

TINY = str(paths.TINY)
ML = str(paths.MULTILINGUAL_TINY)
QUESTIONS = {"team": {"type": "choice", "instructions": "Which team should handle this?",
                      "criteria": {"billing": "payments and invoices", "tech": "bugs"}},
             "urgent": {"type": "noul", "instructions": "Is it urgent?"}}
INVOICE = "I was charged twice on my last invoice and want a refund."


class Server:
    """A real HTTP server on a free loopback port. `routes` maps a path to `(status, headers,
    raw body)` or to a callable of the handler returning that; every request is logged."""

    def __init__(self, routes: Dict[str, Any]) -> None:
        self.routes = routes
        self.seen: List[Dict[str, Any]] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen.append({"method": self.command, "path": self.path,
                                   "auth": self.headers.get("Authorization"),
                                   "body": json.loads(raw) if raw else None})
                route = outer.routes.get(self.path, (404, {}, b'{"detail":"no such path"}'))
                status, headers, body = route(self) if callable(route) else route
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = _answer

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _json(value: Any, status: int = 200) -> Tuple[int, Dict[str, str], bytes]:
    return status, {"Content-Type": "application/json"}, json.dumps(value).encode("utf-8")


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[Server]:
    """Another origin (another port) a redirect may point to."""
    server = Server({"/v1/systemone": _json({"answers": {}, "where": "elsewhere"})})
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(elsewhere: Server) -> Iterator[Server]:
    def slow(handler: Any) -> Tuple[int, Dict[str, str], bytes]:
        time.sleep(0.6)
        return _json({"answers": {}})

    def redirect(to: str) -> Tuple[int, Dict[str, str], bytes]:
        return 303, {"Location": to}, b""

    srv: Server
    routes = {
        "/ok/v1/systemone": _json({"answers": {"team": {"choice": "billing"}}, "model": "m"}),
        "/array/v1/systemone": _json([1, 2]),
        "/string/v1/systemone": _json("oops"),
        "/null/v1/systemone": _json(None),
        "/answers-list/v1/systemone": _json({"answers": []}),
        "/no-answers/v1/systemone": _json({"model": "m"}),
        "/not-json/v1/systemone": (200, {"Content-Type": "text/html"}, b"<html>gateway</html>"),
        "/error/v1/systemone": (500, {}, b'{"detail":"boom"}'),
        "/unprocessable/v1/systemone": _json({"detail": "max_len too large"}, 422),
        "/slow/v1/systemone": slow,
        "/same/v1/systemone": lambda h: redirect("/ok/v1/systemone"),
        "/other-port/v1/systemone": lambda h: redirect(elsewhere.url + "/v1/systemone"),
        "/other-host/v1/systemone": lambda h: redirect(
            "http://localhost:%d/ok/v1/systemone" % srv.port),
        "/to-https/v1/systemone": lambda h: redirect(
            "https://127.0.0.1:%d/ok/v1/systemone" % srv.port),
    }
    srv = Server(routes)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def agent() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(TINY, device="cpu", threads=1)


@pytest.fixture(scope="module")
def router() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.Router(models={"english": TINY, "multilingual": ML,
                                   "typed-decisions": TINY}, device="cpu")


# ---- the client -------------------------------------------------------------------------------

def answer(url: str, state: Any = INVOICE, options: CallOptions = NO_OPTIONS,
           **client: Any) -> Any:
    return Client(url, **client).answer(state, QUESTIONS, options)


def test_the_body_carries_each_set_option_in_order_and_the_bearer_key(server: Server) -> None:
    server.seen.clear()
    got = answer(server.url + "/ok/", options=CallOptions(
        model="m", lang_guess="de", min_confidence=0.0, lang="", max_len=64, task="english"),
        api_key="k1")
    assert got == {"answers": {"team": {"choice": "billing"}}, "model": "m"}
    (seen,) = server.seen
    assert (seen["method"], seen["path"], seen["auth"]) == ("POST", "/ok/v1/systemone",
                                                            "Bearer k1")
    assert list(seen["body"]) == ["state", "questions", "model", "max_len", "lang",
                                  "min_confidence", "task", "lang_guess"]
    assert seen["body"]["lang"] == "" and seen["body"]["min_confidence"] == 0.0
    server.seen.clear()
    answer(server.url + "/ok/v1/systemone", options=CallOptions(model="auto"))
    assert server.seen[0]["path"] == "/ok/v1/systemone" and server.seen[0]["auth"] is None
    assert list(server.seen[0]["body"]) == ["state", "questions"]


def test_a_same_origin_redirect_is_followed_with_the_key(server: Server) -> None:
    server.seen.clear()
    assert answer(server.url + "/same", api_key="k2")["model"] == "m"
    assert [(s["path"], s["auth"]) for s in server.seen] == [("/same/v1/systemone", "Bearer k2"),
                                                              ("/ok/v1/systemone", "Bearer k2")]


@pytest.mark.parametrize("path", ["/other-port", "/other-host", "/to-https"])
def test_a_redirect_to_another_origin_is_refused_before_it_is_followed(
        server: Server, elsewhere: Server, path: str) -> None:
    server.seen.clear()
    elsewhere.seen.clear()
    with pytest.raises(RuntimeError) as info:
        answer(server.url + path, api_key="secret")
    assert str(info.value) == (
        "Failed to connect to Laya server at %s%s/v1/systemone: <urlopen error refusing "
        "cross-origin or HTTPS-downgrade redirect>" % (server.url, path))
    assert elsewhere.seen == [] and [s["path"] for s in server.seen] == [path + "/v1/systemone"]


@pytest.mark.parametrize("path, what, raw", [
    ("/array", "expected a JSON object, got list", [1, 2]),
    ("/string", "expected a JSON object, got str", "oops"),
    ("/null", "expected a JSON object, got NoneType", None),
    ("/answers-list", "'answers' must be a JSON object, got list", {"answers": []}),
])
def test_a_malformed_reply_is_refused_in_layas_words(server: Server, path: str, what: str,
                                                     raw: Any) -> None:
    url = server.url + path
    with pytest.raises(MalformedReply) as info:
        answer(url)
    assert str(info.value) == ("Malformed decision response from Laya server at "
                               "%s/v1/systemone: %s" % (url, what))
    assert isinstance(info.value, RuntimeError)
    assert info.value.body == raw  # laya's tool selector reads it for its own fallback


def test_a_reply_without_answers_is_not_malformed_to_the_client(server: Server) -> None:
    """Whether a reply answers what was asked is the reader's to judge (`reading`)."""
    assert answer(server.url + "/no-answers", "x") == {"model": "m"}


def test_a_reply_that_is_not_json_is_a_connection_failure(server: Server) -> None:
    with pytest.raises(RuntimeError, match=r"^Failed to connect to Laya server at .*/not-json/"
                       r"v1/systemone: Expecting value"):
        answer(server.url + "/not-json", "x")


@pytest.mark.parametrize("path, status, body", [
    ("/error", 500, '{"detail":"boom"}'),
    ("/unprocessable", 422, '{"detail": "max_len too large"}'),
    ("/nowhere", 404, '{"detail":"no such path"}'),
])
def test_an_http_error_is_the_status_and_the_body(server: Server, path: str, status: int,
                                                  body: str) -> None:
    with pytest.raises(StatusError) as info:
        answer(server.url + path, "x")
    assert str(info.value) == "Laya server error %d: %s" % (status, body)
    assert info.value.status == status and info.value.detail == json.loads(body)["detail"]


def test_the_timeout_is_kept(server: Server) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="Failed to connect to Laya server at .*timed out"):
        answer(server.url + "/slow", "x", timeout=0.2)
    assert time.monotonic() - started < 0.55
    assert answer(server.url + "/slow", "x", timeout=5) == {"answers": {}}


def test_a_closed_port_is_a_connection_failure() -> None:
    with pytest.raises(RuntimeError, match=r"^Failed to connect to Laya server at "
                       r"http://127\.0\.0\.1:1/v1/systemone: "):
        answer("http://127.0.0.1:1", "x")


class Flaky:
    """A loopback server that fails its first `failures` requests (answering `status`, or
    closing the connection without a reply when `status` is 0), then answers a decision."""

    def __init__(self, failures: int, status: int, body: bytes = b'{"detail":"later"}') -> None:
        outer = self
        self.failures, self.status, self.seen = failures, status, 0

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                outer.seen += 1
                if outer.seen <= outer.failures and outer.status == 0:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                status, reply = ((outer.status, body)
                                 if outer.seen <= outer.failures
                                 else (200, b'{"answers":{}, "try": %d}' % outer.seen))
                self.send_response(status)
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = "http://127.0.0.1:%d" % self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.mark.parametrize("status", [502, 503, 504, 0])
def test_a_retry_policy_sends_an_idempotent_request_again(status: int) -> None:
    """A 502/503/504 or a dropped connection is sent again, up to `attempts` in all; without a
    policy (laya's clients make none) the first failure is the answer."""
    flaky = Flaky(failures=2, status=status)
    try:
        got = answer(flaky.url, retry=Retry(attempts=3, backoff_s=0.01))
        assert got == {"answers": {}, "try": 3} and flaky.seen == 3
        flaky.seen = 0
        with pytest.raises(RuntimeError):
            answer(flaky.url)
        assert flaky.seen == 1
        flaky.seen = 0
        with pytest.raises(RuntimeError):
            answer(flaky.url, retry=Retry(attempts=2, backoff_s=0.01))
        assert flaky.seen == 2
    finally:
        flaky.stop()


@pytest.mark.parametrize("status", [500, 401, 422])
def test_other_failures_are_not_retried(status: int) -> None:
    flaky = Flaky(failures=5, status=status)
    try:
        with pytest.raises(StatusError) as info:
            answer(flaky.url, retry=Retry(attempts=4, backoff_s=0.01))
        assert info.value.status == status and flaky.seen == 1
    finally:
        flaky.stop()


def test_a_proxys_500_is_retried_and_the_servers_own_is_not() -> None:
    """Ray Serve's proxy answers a plain-text 500 when the replica under a request dies; a
    laya-serve server's own 500 is a JSON object (FastAPI's), a failure a retry would repeat."""
    flaky = Flaky(failures=2, status=500, body=b"Internal Server Error")
    try:
        got = answer(flaky.url, retry=Retry(attempts=3, backoff_s=0.01))
        assert got == {"answers": {}, "try": 3} and flaky.seen == 3
        flaky.seen = 0
        with pytest.raises(StatusError):
            answer(flaky.url, retry=Retry(attempts=3, backoff_s=0.01, proxy_500=False))
        assert flaky.seen == 1
    finally:
        flaky.stop()


@pytest.mark.parametrize("retries", [None, "0", "1"])
def test_the_integrations_and_kime_mcp_retry_a_server_by_default(retries: Optional[str],
                                                               monkeypatch) -> None:
    """`base_url=` (every integration's `Caller`) and `kime mcp --base-url` (`RemoteRouter`)
    retry as `SERVER_RETRY` says, 3 more tries; KIME_CLIENT_RETRIES sets how many."""
    from kime.client import SERVER_RETRY
    from kime.integrations.caller import Caller
    from kime.mcp.remote import RemoteRouter

    if retries is not None:
        monkeypatch.setenv("KIME_CLIENT_RETRIES", retries)
    tries = SERVER_RETRY.attempts if retries is None else int(retries) + 1
    for ask in (lambda url: Caller(base_url=url).decide(INVOICE, QUESTIONS),
                lambda url: RemoteRouter(url).answer(INVOICE, QUESTIONS)):
        flaky = Flaky(failures=3, status=503)
        try:
            if tries > 3:
                assert ask(flaky.url) == {"answers": {}, "try": 4}
            else:
                with pytest.raises(Exception, match="503|busy"):  # each edge words it
                    ask(flaky.url)
            assert flaky.seen == min(tries, 4)
        finally:
            flaky.stop()
    monkeypatch.setenv("KIME_CLIENT_RETRIES", "many")
    with pytest.raises(ValueError, match="KIME_CLIENT_RETRIES must be a number of retries"):
        Caller(base_url="http://127.0.0.1:1").decider()


def test_a_retry_policy_is_checked() -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="attempts"):
            Retry(attempts=bad)
    with pytest.raises(ValueError, match="backoff_s"):
        Retry(backoff_s=float("nan"))


# ---- who answers -------------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the test checkpoints' temperatures
def test_agent_router_and_client_are_one_decider(agent: Any, router: Any) -> None:
    """One protocol: `answer`, `answer_batch` and their async twins, with `CallOptions`;
    each the same as the answerer's own Laya methods."""
    import asyncio

    from kime.laya.decider import Decider

    assert all(isinstance(d, Decider) for d in (agent, router, Client("http://127.0.0.1:1")))
    states = [INVOICE, "Die App stürzt ab."]
    options = CallOptions(max_len=96, min_confidence=0.2)
    assert agent.answer(INVOICE, QUESTIONS, options) == agent.predict(
        INVOICE, QUESTIONS, max_len=96, min_confidence=0.2)
    assert asyncio.run(agent.answer_batch_async(states, QUESTIONS, options)) == \
        agent.answer_batch(states, QUESTIONS, options) == agent.predict_batch(
            states, QUESTIONS, max_len=96, min_confidence=0.2)
    routed = router.answer_batch(states, QUESTIONS, options.but(lang_guess="de"))
    assert routed == router.predict_batch(
        [{"state": s, "questions": QUESTIONS, "max_len": 96, "lang_guess": "de"}
         for s in states], min_confidence=0.2)
    assert asyncio.run(router.answer_async(INVOICE, QUESTIONS, options)) == router.answer(
        INVOICE, QUESTIONS, options) == router.predict(INVOICE, QUESTIONS, max_len=96,
                                                        min_confidence=0.2)


def test_an_agent_answers_as_its_predict(agent: Any) -> None:
    options = CallOptions(max_len=64, lang="en", min_confidence=0.3)
    got = Caller(agent=agent, options=options).decide(INVOICE, QUESTIONS)
    assert got == agent.predict(INVOICE, QUESTIONS, max_len=64, lang="en", min_confidence=0.3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the test checkpoints' temperatures
def test_the_routing_hints_are_refused_on_an_agent_and_read_by_a_router(agent: Any,
                                                                          router: Any) -> None:
    with pytest.raises(ValueError) as info:
        Caller(agent=agent, options=CallOptions(task="english", lang_guess="de")).decide(
            INVOICE, QUESTIONS)
    assert str(info.value) == (
        "task, lang_guess are a routing hint, and Agent.predict does not read it: this runner "
        "answers on the checkpoint it was built with. Pass a Router as `agent=`, or drop them.")
    with pytest.raises(ValueError, match="^model is a routing hint, and Agent.predict does not"):
        agent.answer(INVOICE, QUESTIONS, CallOptions(model="english"))
    got = Caller(agent=router, options=CallOptions(task="english")).decide(INVOICE, QUESTIONS)
    assert got["routing"]["model"] == "english"
    german = Caller(agent=router, options=CallOptions(lang_guess="de")).decide(INVOICE, QUESTIONS)
    assert german["routing"]["model"] == "multilingual"


def test_hooks_and_a_callable_lang_guess_are_refused_before_a_request(server: Server) -> None:
    server.seen.clear()
    url = server.url + "/ok"
    with pytest.raises(ValueError, match="^hooks, on_predict_end run in the local runner"):
        Caller(base_url=url, options=CallOptions(hooks=[], on_predict_end=print)).decide(
            "x", QUESTIONS)
    with pytest.raises(ValueError, match="^lang_guess=<built-in function len> cannot be sent"):
        Caller(base_url=url, options=CallOptions(lang_guess=len)).decide("x", QUESTIONS)
    assert server.seen == []
    got = Caller(base_url=url, api_key="k", options=CallOptions(
        task="english", lang_guess="de", max_len=32)).decide("x", QUESTIONS)
    assert got["model"] == "m"
    assert server.seen[0]["body"]["task"] == "english" and server.seen[0]["auth"] == "Bearer k"


def test_batching_and_batches(agent: Any, router: Any) -> None:
    hooked = CallOptions(hooks=[])
    assert Caller(agent=agent).batches() and Caller(agent=router).batches()
    assert not Caller(agent=agent, base_url="http://127.0.0.1:1").batches()
    assert Caller(agent=agent, options=hooked).batches()
    assert not Caller(agent=router, options=hooked).batches()
    assert not Caller(agent=object()).batches()
    states = [INVOICE, "The app crashes on start.", "Wie viel kostet das?"]
    ours = Caller(agent=agent, options=CallOptions(max_len=64)).decide_batch(states, QUESTIONS)
    assert ours == agent.predict_batch(states, QUESTIONS, max_len=64)
    routed = Caller(agent=router, options=CallOptions(min_confidence=0.0, lang_guess="de")
                    ).decide_batch(states, QUESTIONS)
    assert [r["routing"]["model"] for r in routed] == ["multilingual"] * 3
    with pytest.raises(ValueError, match="Agent.predict_batch does not read it"):
        Caller(agent=agent, options=CallOptions(task="english")).decide_batch(states, QUESTIONS)


def test_a_plain_object_is_asked_through_its_signature(agent: Any) -> None:
    """laya's agents (any object with `predict`) get the options as keywords; a routing hint
    its `predict` has no place for is refused by name, never retried without."""
    calls: List[Dict[str, Any]] = []

    class Narrow:
        def predict(self, state: Any, questions: Any, lang: Any = None) -> Any:
            calls.append({"state": state, "lang": lang})
            return agent.predict(state, questions, lang=lang)

    class Open:
        def predict(self, state: Any, questions: Any, **options: Any) -> Any:
            calls.append(options)
            return {"answers": {}}

    assert not isinstance(Narrow(), kime.Agent) and isinstance(
        Caller(agent=Narrow()).decider(), Foreign)
    got = Caller(agent=Narrow(), options=CallOptions(lang="en")).decide(INVOICE, QUESTIONS)
    assert got == agent.predict(INVOICE, QUESTIONS, lang="en") and calls == [
        {"state": INVOICE, "lang": "en"}]
    with pytest.raises(ValueError, match=r"^lang_guess is a routing hint, and Narrow\.predict "
                       r"does not read it: .* or drop it\.$"):
        Caller(agent=Narrow(), options=CallOptions(lang_guess="de")).decide(INVOICE, QUESTIONS)
    assert len(calls) == 1
    Caller(agent=Open(), options=CallOptions(task="english", lang_guess="de")).decide("x", {})
    assert calls[-1] == {"task": "english", "lang_guess": "de"}


def test_the_default_router_is_one_kime_router() -> None:
    first = default_router()
    assert isinstance(first, kime.Router) and default_router() is first


# ---- reading -----------------------------------------------------------------------------------

def test_score_violation_probability() -> None:
    probs = {"0": 0.1, "1": 0.2, "2": 0.3, "3": 0.4}
    assert reading.score_violation_probability({"probabilities": probs}) == pytest.approx(0.7)
    assert reading.score_violation_probability({"probabilities": {"0": 0.5, "1": "0.5"}}) == 0.5
    # unusable distributions fall through to the normalised expected level
    assert reading.score_violation_probability({"probabilities": {"0": 0.5, "1": True},
                                                "score": 0.5}) == 0.5
    assert reading.score_violation_probability({"probabilities": [0.5], "score": 2.0},
                                               levels=5) == 0.5
    assert reading.score_violation_probability({"score": 1.0}, levels=1) == 0.0
    # an upper level left out, or NaN, falls back to the score: never read as 0 ("no violation")
    assert reading.score_violation_probability({"probabilities": {"0": 0.1, "1": 0.2, "3": 0.7},
                                                "score": 3.0}) == pytest.approx(1.5)
    assert reading.score_violation_probability({"probabilities": {"0": 0.1, "1": "nan"},
                                                "score": 1.0}) == 1.0
    # and with no score to fall back on, the answer is refused, naming the field and the server
    for answer in ({"score": True}, {}, {"probabilities": {"0": 0.5, "1": None}},
                   {"score": float("nan")}):
        with pytest.raises(reading.MalformedDecision,
                           match=r"^Malformed decision response from Laya server at http://h:1: "
                                 r"'score' must be a finite number, got "):
            reading.score_violation_probability(answer, 3, "Laya server at http://h:1")


def test_the_malformed_refusals_name_where_and_what() -> None:
    where = reading.where_of("http://h:1")
    assert where == "Laya server at http://h:1" and reading.where_of(None) == "Laya"
    with pytest.raises(RuntimeError, match=r"^Malformed decision response from Laya server at "
                       r"http://h:1: 'answers' must be a JSON object, got list$"):
        reading.answers_map({"answers": []}, where)
    with pytest.raises(RuntimeError, match=r"the answer for 'q' must be a JSON object, got str"):
        reading.answers_map({"answers": {"q": "yes"}})
    with pytest.raises(RuntimeError, match=r"the reply must be a JSON object, got NoneType"):
        reading.answers_map(None)
    # no 'answers' at all is a malformed reply, never an empty one a fallback could read
    with pytest.raises(RuntimeError, match=r"^Malformed decision response from Laya: the reply "
                       r"has no 'answers' object$"):
        reading.answers_map({"model": "m"})
    assert reading.answers_map({"answers": {}}) == {}
    for bad in (True, "0.5", None, math.nan, math.inf):
        with pytest.raises(RuntimeError, match=r"'noul' must be a finite number, got "):
            reading.answer_number({"noul": bad}, "noul")
    with pytest.raises(RuntimeError, match=r"'noul' must be a finite number, got None"):
        reading.answer_number({}, "noul")  # missing is not 0.0
    assert reading.probability_map({"probabilities": {"a": 1, "b": 0.5}}, ["a", "b"]) == {
        "a": 1.0, "b": 0.5}
    with pytest.raises(RuntimeError, match="'b' must be a finite number, got None"):
        reading.probability_map({"probabilities": {"a": 1}}, ["a", "b"])
    with pytest.raises(RuntimeError, match="'probabilities' must be a JSON object, got list"):
        reading.probability_map({"probabilities": [1]}, ["a"])


GUARD = {"jailbreak": {"type": "noul", "instructions": "?"},
         "toxic": {"type": "score", "instructions": "?", "criteria": ["no", "bit", "very"]},
         "topic": {"type": "choice", "instructions": "?", "criteria": {"a": "", "b": ""}}}
PASSING = {"jailbreak": {"type": "noul", "noul": 0.1, "confidence": 0.9},
           "toxic": {"type": "score", "score": 0.2, "probabilities": {"0": 0.8, "1": 0.2,
                                                                       "2": 0.0}},
           "topic": {"type": "choice", "choice": "a"}}


@pytest.mark.parametrize("reply, what", [
    ({}, "the reply has no 'answers' object"),
    ({"answers": {}}, "no answer to question 'jailbreak'"),
    ({"answers": {k: v for k, v in PASSING.items() if k != "toxic"}},
     "no answer to question 'toxic'"),
    ({"answers": dict(PASSING, jailbreak={"type": "noul", "confidence": 0.9})},
     "'noul' must be a finite number, got None"),
    ({"answers": dict(PASSING, jailbreak={"type": "noul", "noul": math.nan})},
     "'noul' must be a finite number, got nan"),
    ({"answers": dict(PASSING, jailbreak={"type": "noul", "noul": 1.5})},
     "'noul' must be a probability in [0, 1], got 1.5"),
    ({"answers": dict(PASSING, jailbreak={"type": "choice", "noul": 0.9})},
     "the answer to 'jailbreak' is a 'choice', the question a 'noul'"),
    ({"answers": dict(PASSING, toxic={"type": "score"})}, "'score' must be a finite number"),
    ({"answers": dict(PASSING, toxic={"type": "score", "score": 1.0,
                                      "probabilities": {"0": math.inf, "1": 0.0, "2": 0.0}})},
     "'0' must be a finite number, got inf"),
    # the upper levels dropped: the scale would read as one level, so never a violation
    ({"answers": dict(PASSING, toxic={"type": "score", "score": 0.0,
                                      "probabilities": {"0": 1.0}})},
     "'probabilities' of 'toxic' must give levels ['0', '1', '2'], got ['0']"),
    ({"answers": dict(PASSING, toxic={"type": "score", "score": 0.0,
                                      "probabilities": {"0": 0.5, "1": 0.5, "x": 0.0}})},
     "must give levels ['0', '1', '2'], got ['0', '1', 'x']"),
])
def test_screen_fails_closed(reply: Any, what: str) -> None:
    """A guard reply that leaves a question unanswered, or answers it without its finite
    numbers or as another type, is refused: laya reads a missing `noul` as 0.0 (safe)."""
    with pytest.raises(reading.MalformedDecision) as info:
        reading.screen(reply, GUARD, 0.5, "Laya")
    assert what in str(info.value)


def test_screen_reports_what_breaks_the_policy() -> None:
    assert reading.screen({"answers": PASSING}, GUARD, 0.5, "Laya") == ({}, PASSING)
    worse = dict(PASSING, jailbreak={"type": "noul", "noul": 0.7, "confidence": 0.4},
                 toxic={"type": "score", "score": 1.6, "probabilities": {
                     "0": 0.1, "1": 0.2, "2": 0.7}, "confidence": 0.6})
    found, _ = reading.screen({"answers": worse}, GUARD, 0.5, "Laya")
    assert found == {"jailbreak": {"probability": 0.7, "confidence": 0.4},
                     "toxic": {"score": 1.6, "probability": 0.9, "confidence": 0.6}}


@pytest.mark.parametrize("choice, kind", [
    (None, reading.Unanswered), ("c", reading.Unanswered), ("agent_-1", reading.Unanswered),
    (["a"], reading.MalformedDecision), (1, reading.MalformedDecision)])
def test_pick_refuses_what_is_not_a_candidate(choice: Any, kind: type) -> None:
    reply = {"answers": {"q": {"choice": choice, "answer_confidence": 0.9}}}
    with pytest.raises(kind):
        reading.pick(reply, "q", ["a", "b"], "Laya")
    with pytest.raises(reading.Unanswered):
        reading.pick({"answers": {}}, "q", ["a", "b"], "Laya")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=4),
    max_leaves=10)
answers = st.dictionaries(st.sampled_from(["probabilities", "score", "noul", "choice", "type",
                                           "answer_confidence", "confidence"]),
                          json_values | st.dictionaries(st.sampled_from(["0", "1", "2", "a"]),
                                                        json_values, max_size=4), max_size=6)


@given(answers, st.integers(0, 6), st.floats(0, 1))
def test_reading_any_answer_passes_only_a_complete_one_or_refuses_in_one_wording(
        answer: Dict[str, Any], levels: int, threshold: float) -> None:
    try:
        value = reading.score_violation_probability(answer, levels)
    except reading.MalformedDecision as e:  # neither its distribution nor its score reads
        assert str(e).startswith(reading.MALFORMED_PREFIX + " from Laya: 'score' must be")
    else:
        assert isinstance(value, (int, float)) and not math.isnan(value)
    question = {"q": {"type": "noul", "instructions": "?"}}
    for call in (lambda: reading.answer_number(answer, "noul"),
                 lambda: reading.probability_map(answer, ["0", "1"]),
                 lambda: reading.screen({"answers": {"q": answer}}, question, threshold, "Laya"),
                 lambda: reading.pick({"answers": {"q": answer}}, "q", ["a", "0"], "Laya",
                                      threshold)):
        try:
            got = call()
        except RuntimeError as e:
            assert str(e).startswith(reading.MALFORMED_PREFIX + " from Laya: ")
            continue
        if isinstance(got, tuple):  # screen passed or found: the noul was there, a probability
            noul = answer["noul"]
            assert answer.get("type", "noul") == "noul" and 0 <= noul <= 1
            assert bool(got[0]) == (noul >= threshold)
        elif isinstance(got, reading.Pick):  # a pick: a candidate, low unless confident enough
            assert got.key == answer["choice"] and got.key in ("a", "0")
            assert got.low == (threshold > 0 and (got.confidence is None
                                                  or got.confidence < threshold))


_LAZY_PROBE = """
import json, sys
import kime.integrations as pkg
before = sorted(m for m in sys.modules if m.split(".")[0] in
                ("langchain_core", "langgraph", "llama_index", "crewai", "agno", "mcp", "torch"))
missing = [n for n in pkg.__all__ if n not in dir(pkg)]
found = {}
for name in pkg.__all__:
    try:
        found[name] = getattr(pkg, name).__module__
    except ImportError as e:  # a framework that is not installed here: the extra is named
        found[name] = "ImportError: " + str(e)
try:
    pkg.NoSuchName
except AttributeError as e:
    found["<unknown>"] = str(e)
json.dump({"before": before, "missing": missing, "found": found}, sys.stdout)
"""


@pytest.mark.slow  # more than a second and a half (CONTRIBUTING.md's fast tier)
def test_the_package_exports_every_name_lazily() -> None:
    """`import kime.integrations` imports no framework; each of laya's names resolves from its
    framework module (or, where the framework is absent, names the extra to install)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _LAZY_PROBE], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["before"] == [] and out["missing"] == []
    found = out["found"]
    assert found.pop("<unknown>") == "module 'kime.integrations' has no attribute 'NoSuchName'"
    import kime.integrations as pkg

    assert set(found) == set(pkg.__all__) and len(found) == 20
    for name, where in found.items():
        assert where.startswith("kime.integrations.") or "pip install 'kime[" in where, (name,
                                                                                       where)
    assert found["LayaLowConfidenceError"] == "kime.integrations.errors"
    assert found["LayaToolSelector"] == "kime.integrations.tools"


TOX = {"tox": {"type": "score", "criteria": ["none", "low", "high", "severe"]},
       "jb": {"type": "noul"}}


@pytest.mark.parametrize("toxic, what", [
    # issue 53: a score below the scale, and probabilities that are no distribution, read as
    # "no violation" (the first is the reproduction)
    ({"type": "score", "score": -3.0}, "'score' of 'tox' must be a level in [0, 3], got -3.0"),
    ({"type": "score", "score": 7.0}, "'score' of 'tox' must be a level in [0, 3], got 7.0"),
    ({"type": "score", "score": 3.0, "probabilities": {"0": 1.5, "1": 0, "2": -0.5, "3": 0}},
     "the probability of level 0 of 'tox' must be in [0, 1], got 1.5"),
    ({"type": "score", "score": 3.0, "probabilities": {"0": 0.5, "1": 0, "2": 0, "3": 0}},
     "the probabilities of 'tox' must sum to 1, got 0.5"),
    ({"type": "score", "score": 3.0, "probabilities": {"0": 1.0, "1": 0, "2": 0, "3": 0}},
     "'score' of 'tox' is 3.0, but its probabilities give the level 0.0"),
])
def test_screen_refuses_a_score_that_is_no_level_or_distribution(toxic: Any, what: str) -> None:
    reply = {"answers": {"tox": toxic, "jb": {"noul": 0.0}}}
    with pytest.raises(reading.MalformedDecision) as info:
        reading.screen(reply, TOX, 0.5, "x")
    assert what in str(info.value)


def test_screen_reads_a_rounded_distribution() -> None:
    """laya rounds each number to four places: a distribution that sums to 0.9999 or 1.0002,
    and a score a rounding off its probabilities' level, are read, not refused."""
    probs = {"0": 0.1111, "1": 0.2222, "2": 0.3333, "3": 0.3333}  # sums to 0.9999
    level = round(sum(int(k) * v for k, v in probs.items()), 4)
    reply = {"answers": {"tox": {"type": "score", "score": level, "probabilities": probs},
                         "jb": {"noul": 0.0}}}
    found, _ = reading.screen(reply, TOX, 0.5, "x")
    assert found == {"tox": {"score": level, "probability": 0.6666, "confidence": 0.0}}
