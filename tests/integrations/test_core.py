"""The integrations' shared core: `controls`, `guard`, `remote` and `runner` (laya 0.4.15's
`_controls`, `_guard`, `_call_remote` and `_execute_decision`, kept once in kime).

- `remote.call_remote` against real HTTP servers on loopback: the body it sends (controls in
  order, unset ones absent), the bearer key, redirects followed within one origin only (another
  port, another scheme: refused before anything is sent there), malformed replies, HTTP errors,
  a timeout, and `strict=False` handing the raw reply back;
- `runner` on a kime Agent and a kime Router: the same answers as calling them directly, the
  routing hints refused by name on an Agent, hooks and a callable `lang_guess` refused before a
  request, `can_batch`/`execute_batch`;
- `controls` and `guard`: laya's rules, with properties over arbitrary JSON answers.
"""
from __future__ import annotations

import http.server
import json
import math
import threading
import time
import warnings
from typing import Any, Dict, Iterator, List, Tuple

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kime
from kime.integrations import controls, guard, remote, runner

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
        time.sleep(1.5)
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


# ---- remote ----------------------------------------------------------------------------------

def test_the_body_carries_each_set_control_in_order_and_the_bearer_key(server: Server) -> None:
    server.seen.clear()
    got = remote.call_remote(server.url + "/ok/", INVOICE, QUESTIONS, api_key="k1", model="m",
                             lang_guess="de", min_confidence=0.0, lang="", max_len=64,
                             head_max_len=None, task="english")
    assert got == {"answers": {"team": {"choice": "billing"}}, "model": "m"}
    (seen,) = server.seen
    assert (seen["method"], seen["path"], seen["auth"]) == ("POST", "/ok/v1/systemone",
                                                            "Bearer k1")
    assert list(seen["body"]) == ["state", "questions", "model", "max_len", "lang",
                                  "min_confidence", "task", "lang_guess"]
    assert seen["body"]["lang"] == "" and seen["body"]["min_confidence"] == 0.0
    server.seen.clear()
    remote.call_remote(server.url + "/ok/v1/systemone", INVOICE, QUESTIONS, model="")
    assert server.seen[0]["path"] == "/ok/v1/systemone" and server.seen[0]["auth"] is None
    assert list(server.seen[0]["body"]) == ["state", "questions"]


def test_an_unknown_control_is_a_type_error_naming_it(server: Server) -> None:
    with pytest.raises(TypeError, match="hooks, temperature"):
        remote.call_remote(server.url + "/ok", "x", QUESTIONS, temperature=1, hooks=[])


def test_a_same_origin_redirect_is_followed_with_the_key(server: Server) -> None:
    server.seen.clear()
    got = remote.call_remote(server.url + "/same", INVOICE, QUESTIONS, api_key="k2")
    assert got["model"] == "m"
    assert [(s["path"], s["auth"]) for s in server.seen] == [("/same/v1/systemone", "Bearer k2"),
                                                              ("/ok/v1/systemone", "Bearer k2")]


@pytest.mark.parametrize("path", ["/other-port", "/other-host", "/to-https"])
def test_a_redirect_to_another_origin_is_refused_before_it_is_followed(
        server: Server, elsewhere: Server, path: str) -> None:
    server.seen.clear()
    elsewhere.seen.clear()
    with pytest.raises(RuntimeError) as info:
        remote.call_remote(server.url + path, INVOICE, QUESTIONS, api_key="secret")
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
    with pytest.raises(RuntimeError) as info:
        remote.call_remote(url, INVOICE, QUESTIONS)
    assert str(info.value) == ("Malformed decision response from Laya server at "
                               "%s/v1/systemone: %s" % (url, what))
    # strict=False (laya's tool selector) hands the reply back for its own fallback
    assert remote.call_remote(url, INVOICE, QUESTIONS, strict=False) == raw


def test_a_reply_without_answers_is_not_malformed(server: Server) -> None:
    assert remote.call_remote(server.url + "/no-answers", "x", QUESTIONS) == {"model": "m"}


def test_a_reply_that_is_not_json_is_a_connection_failure(server: Server) -> None:
    with pytest.raises(RuntimeError, match=r"^Failed to connect to Laya server at .*/not-json/"
                       r"v1/systemone: Expecting value"):
        remote.call_remote(server.url + "/not-json", "x", QUESTIONS)


@pytest.mark.parametrize("path, status, body", [
    ("/error", 500, '{"detail":"boom"}'),
    ("/unprocessable", 422, '{"detail": "max_len too large"}'),
    ("/nowhere", 404, '{"detail":"no such path"}'),
])
def test_an_http_error_is_the_status_and_the_body(server: Server, path: str, status: int,
                                                  body: str) -> None:
    with pytest.raises(RuntimeError) as info:
        remote.call_remote(server.url + path, "x", QUESTIONS)
    assert str(info.value) == "Laya server error %d: %s" % (status, body)


def test_the_timeout_is_kept(server: Server) -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="Failed to connect to Laya server at .*timed out"):
        remote.call_remote(server.url + "/slow", "x", QUESTIONS, timeout=0.3)
    assert time.monotonic() - started < 1.4
    assert remote.call_remote(server.url + "/slow", "x", QUESTIONS, timeout=5) == {"answers": {}}


def test_a_closed_port_is_a_connection_failure() -> None:
    with pytest.raises(RuntimeError, match=r"^Failed to connect to Laya server at "
                       r"http://127\.0\.0\.1:1/v1/systemone: "):
        remote.call_remote("http://127.0.0.1:1", "x", QUESTIONS)


# ---- runner ----------------------------------------------------------------------------------

def test_execute_decision_on_an_agent_is_its_predict(agent: Any) -> None:
    got = runner.execute_decision(INVOICE, QUESTIONS, agent=agent, max_len=64, lang="en",
                                  min_confidence=0.3)
    assert got == agent.predict(INVOICE, QUESTIONS, max_len=64, lang="en", min_confidence=0.3)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the test checkpoints' temperatures
def test_the_routing_hints_are_refused_on_an_agent_and_read_by_a_router(agent: Any,
                                                                          router: Any) -> None:
    with pytest.raises(ValueError) as info:
        runner.execute_decision(INVOICE, QUESTIONS, agent=agent, task="english", lang_guess="de")
    assert str(info.value) == (
        "task, lang_guess are a routing hint, and Agent.predict does not read it: this runner "
        "answers on the checkpoint it was built with. Pass a Router as `agent=`, or drop them.")
    got = runner.execute_decision(INVOICE, QUESTIONS, agent=router, task="english")
    assert got["routing"]["model"] == "english"
    german = runner.execute_decision(INVOICE, QUESTIONS, agent=router, lang_guess="de")
    assert german["routing"]["model"] == "multilingual"


def test_hooks_and_a_callable_lang_guess_are_refused_before_a_request(server: Server) -> None:
    server.seen.clear()
    with pytest.raises(ValueError, match="^hooks, on_predict_end run in the local runner"):
        runner.execute_decision("x", QUESTIONS, base_url=server.url + "/ok", hooks=[],
                                on_predict_end=print)
    with pytest.raises(ValueError, match="^lang_guess=<built-in function len> cannot be sent"):
        runner.execute_decision("x", QUESTIONS, base_url=server.url + "/ok", lang_guess=len)
    assert server.seen == []
    got = runner.execute_decision("x", QUESTIONS, base_url=server.url + "/ok", api_key="k",
                                  task="english", lang_guess="de", max_len=32)
    assert got["model"] == "m"
    assert server.seen[0]["body"]["task"] == "english" and server.seen[0]["auth"] == "Bearer k"


def test_can_batch_and_execute_batch(agent: Any, router: Any) -> None:
    assert runner.can_batch(agent) and runner.can_batch(router)
    assert not runner.can_batch(agent, base_url="http://127.0.0.1:1")
    assert runner.can_batch(agent, hooked=True) and not runner.can_batch(router, hooked=True)
    assert not runner.can_batch(object())
    states = [INVOICE, "The app crashes on start.", "Wie viel kostet das?"]
    ours = runner.execute_batch(states, QUESTIONS, agent=agent, max_len=64)
    assert ours == agent.predict_batch(states, QUESTIONS, max_len=64)
    routed = runner.execute_batch(states, QUESTIONS, agent=router, min_confidence=0.0,
                                  lang_guess="de")
    assert [r["routing"]["model"] for r in routed] == ["multilingual"] * 3
    with pytest.raises(ValueError, match="Agent.predict_batch does not read it"):
        runner.execute_batch(states, QUESTIONS, agent=agent, task="english")


def test_the_default_router_is_one_kime_router() -> None:
    first = runner.default_router()
    assert isinstance(first, kime.Router) and runner.default_router() is first


# ---- controls --------------------------------------------------------------------------------

def test_controls_keep_decisions_and_drop_absences() -> None:
    assert controls.hook_kwargs(hooks=[], hooks_raise=False) == {"hooks": [],
                                                                 "hooks_raise": False}
    assert controls.predict_kwargs(model="", lang="", min_confidence=0.0, max_len=8) == {
        "max_len": 8, "lang": "", "min_confidence": 0.0}
    assert list(controls.predict_kwargs("m", 1, 2, "de", 0.5)) == [
        "model", "max_len", "head_max_len", "lang", "min_confidence"]
    assert controls.router_kwargs(lang_guess="") == {"lang_guess": ""}
    controls.reject_remote_hooks({"hooks": []}, None)
    controls.reject_remote_hooks({}, "http://x")
    controls.reject_remote_lang_guess({"lang_guess": len}, None)
    controls.reject_remote_lang_guess({"lang_guess": "de"}, "http://x")


def test_require_router_controls_asks_the_signature() -> None:
    class Open:
        def predict(self, state: Any, questions: Any, **kw: Any) -> None: ...

    class Narrow:
        def predict(self, state: Any, questions: Any, task: Any = None) -> None: ...

    given_ = {"task": "english", "lang_guess": "de"}
    assert controls.require_router_controls(Open(), "predict", given_) == given_
    assert controls.require_router_controls(object(), "predict", given_) == given_
    assert controls.require_router_controls(Narrow(), "predict", {"task": "x"}) == {"task": "x"}
    with pytest.raises(ValueError, match=r"^lang_guess is a routing hint, and Narrow\.predict "
                       r"does not read it: .* or drop it\.$"):
        controls.require_router_controls(Narrow(), "predict", given_)


# ---- guard -----------------------------------------------------------------------------------

def test_score_violation_probability() -> None:
    probs = {"0": 0.1, "1": 0.2, "2": 0.3, "3": 0.4}
    assert guard.score_violation_probability({"probabilities": probs}) == pytest.approx(0.7)
    assert guard.score_violation_probability({"probabilities": {"0": 0.5, "1": "0.5"}}) == 0.5
    # unusable distributions fall through to the normalised expected level
    assert guard.score_violation_probability({"probabilities": {"0": 0.5, "1": True},
                                              "score": 0.5}) == 0.5
    assert guard.score_violation_probability({"probabilities": [0.5], "score": 2.0},
                                             levels=5) == 0.5
    assert guard.score_violation_probability({"score": True}, levels=3) == 0.0
    assert guard.score_violation_probability({"score": 1.0}, levels=1) == 0.0


def test_the_malformed_refusals_name_where_and_what() -> None:
    where = guard.where_of("http://h:1")
    assert where == "Laya server at http://h:1" and guard.where_of(None) == "Laya"
    with pytest.raises(RuntimeError, match=r"^Malformed decision response from Laya server at "
                       r"http://h:1: 'answers' must be a JSON object, got list$"):
        guard.answers_map({"answers": []}, where)
    with pytest.raises(RuntimeError, match=r"the answer for 'q' must be a JSON object, got str"):
        guard.answers_map({"answers": {"q": "yes"}})
    with pytest.raises(RuntimeError, match=r"got NoneType"):
        guard.answers_map(None)
    assert guard.answers_map({"model": "m"}) == {}
    for bad in (True, "0.5", None, math.nan, math.inf):
        with pytest.raises(RuntimeError, match=r"'noul' must be a finite number, got "):
            guard.answer_number({"noul": bad}, "noul")
    assert guard.answer_number({}, "noul", default=0.25) == 0.25
    assert guard.probability_map({"probabilities": {"a": 1, "z": "x"}}, ["a", "b"]) == {
        "a": 1.0, "b": 0.0}
    with pytest.raises(RuntimeError, match="'probabilities' must be a JSON object, got list"):
        guard.probability_map({"probabilities": [1]}, ["a"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=True)
    | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner,
                                                                 max_size=4),
    max_leaves=10)
answers = st.dictionaries(st.sampled_from(["probabilities", "score", "noul", "choice"]),
                          json_values | st.dictionaries(st.sampled_from(["0", "1", "2", "a"]),
                                                        json_values, max_size=4), max_size=4)


@given(answers, st.integers(0, 6))
def test_guard_reads_any_answer_or_refuses_it_in_one_wording(answer: Dict[str, Any],
                                                             levels: int) -> None:
    value = guard.score_violation_probability(answer, levels)
    assert isinstance(value, (int, float))
    for call in (lambda: guard.answer_number(answer, "noul"),
                 lambda: guard.probability_map(answer, ["0", "1"]),
                 lambda: guard.answers_map({"answers": answer})):
        try:
            call()
        except RuntimeError as e:
            assert str(e).startswith(guard.MALFORMED_PREFIX + " from Laya: ")


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
