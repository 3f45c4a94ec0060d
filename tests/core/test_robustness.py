"""Every input gets an answer or a clear error, on every surface: random requests (nested JSON,
wrong types, lone surrogates, NUL, NaN and infinity, huge numbers, deep nesting, huge strings)
through the engine API, Laya's API and a real `kime serve` on loopback. An answer answers every
question asked; an error is a `KimeError` (`InvalidRequest` for a request) listing problems in
FastAPI's format, and the server answers 4xx, never 5xx.

A few hundred examples per surface run by default; `--hypothesis-profile=long` runs 10,000.
"""
from __future__ import annotations

import json
import math
import socket
import threading
import time
import urllib.error
import urllib.request
import warnings
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kime

TINY = str(Path(__file__).parent / "goldens" / "checkpoints" / "tiny")

TEXT = st.one_of(
    st.text(st.characters(categories=("L", "N", "P", "S", "Z", "Cc", "Cs")), max_size=24),
    st.sampled_from(["", " ", "\x00", "\ud800", "\udfff x", "[MASK]", "<mask>", "true", "false",
                     "choice", "score", "noul", "é" * 300]),
)
SCALAR = st.one_of(st.none(), st.booleans(), st.integers(-2 ** 70, 2 ** 70),
                   st.floats(allow_nan=True, allow_infinity=True), TEXT)
JSON = st.recursive(SCALAR, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(TEXT, inner, max_size=4)), max_leaves=10)


def _nested(depth: int) -> Any:
    value: Any = "deep"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


# Depths past the interpreter's recursion limit are tested on their own below: hypothesis cannot
# print such a value when it reports a failure.
ODD = st.one_of(JSON, st.integers(1, 600).map(_nested), st.just("x" * 120_000))
CRITERIA = st.one_of(
    st.lists(st.one_of(TEXT, st.integers(), st.none(), JSON), max_size=6),
    st.dictionaries(TEXT, st.one_of(TEXT, st.none(), JSON), max_size=6),
    JSON,
)
WORDS = st.text(st.characters(categories=("L", "N", "Zs", "Cs")), min_size=1, max_size=16)
# Mostly well-formed questions, so most requests reach the tokenizer and the model with odd text.
WELL_FORMED = st.one_of(
    st.fixed_dictionaries({"type": st.just("choice"), "instructions": WORDS,
                           "criteria": st.one_of(
                               st.lists(WORDS, min_size=1, max_size=6, unique=True),
                               st.dictionaries(WORDS, st.one_of(WORDS, st.none()), min_size=1,
                                               max_size=6))}),
    st.fixed_dictionaries({"type": st.just("score"), "instructions": WORDS,
                           "criteria": st.lists(WORDS, min_size=1, max_size=6)}),
    st.fixed_dictionaries({"type": st.just("noul"), "instructions": WORDS},
                          optional={"criteria": st.fixed_dictionaries({"true": WORDS}),
                                    "labels": st.fixed_dictionaries({"false": WORDS,
                                                                     "true": WORDS})}),
)
QUESTION = st.one_of(
    WELL_FORMED, WELL_FORMED, WELL_FORMED,
    st.fixed_dictionaries(
        {"type": st.one_of(st.sampled_from(["choice", "score", "noul"]), JSON),
         "instructions": st.one_of(TEXT, JSON)},
        optional={"criteria": CRITERIA, "labels": st.one_of(JSON, st.fixed_dictionaries(
                      {"false": TEXT, "true": TEXT})),
                  "option_order": st.one_of(st.lists(st.integers(-2, 7), max_size=7), JSON)}),
    JSON,
)
QUESTIONS = st.one_of(
    st.dictionaries(st.one_of(WORDS, TEXT, st.integers(-3, 3)), QUESTION, min_size=0, max_size=4),
    st.dictionaries(WORDS, QUESTION, min_size=0, max_size=4),
    JSON,
)
BUDGET = st.one_of(st.none(), st.integers(-3, 3000), JSON)


@st.composite
def requests(draw: Any) -> Dict[str, Any]:
    body: Dict[str, Any] = {"state": draw(st.one_of(WORDS, TEXT, ODD)),
                            "questions": draw(QUESTIONS)}
    for key in ("max_len", "head_max_len"):
        if draw(st.booleans()):
            body[key] = draw(BUDGET)
    if draw(st.integers(0, 9)) == 0:
        body[draw(TEXT)] = draw(SCALAR)  # an unknown field
    return body


RUN = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                     HealthCheck.data_too_large,
                                                     HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def engine() -> kime.Kime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)


def _well_formed(error: kime.InvalidRequest) -> None:
    assert error.problems, "an error lists its problems"
    for p in error.problems:
        assert set(p) == {"loc", "msg", "type", "input"} and p["msg"]
    json.dumps(error.to_json())  # the 422 body serialises, whatever the input held


def _questions_answered(request: Dict[str, Any], answers: Dict[Any, Any]) -> None:
    assert list(answers) == list(request["questions"])


@RUN
@given(requests())
def test_engine_answers_or_refuses_clearly(engine, request):
    try:
        response = engine.decide(request, cache=False)
    except kime.InvalidRequest as e:
        _well_formed(e)
    else:
        _questions_answered(request, response.answers)
        for answer in response.answers.values():
            assert all(math.isfinite(float(p)) for p in answer.probabilities)


@RUN
@given(st.one_of(TEXT, ODD), QUESTIONS, BUDGET, BUDGET)
def test_laya_api_answers_or_refuses_clearly(engine, state, questions, max_len, head_max_len):
    agent = kime.Agent(engine)
    try:
        result = agent.predict(state, questions, max_len=max_len, head_max_len=head_max_len)
    except kime.InvalidRequest as e:
        _well_formed(e)
    else:
        _questions_answered({"questions": questions}, result["answers"])
        json.dumps(result)


@RUN
@given(st.one_of(st.lists(st.one_of(TEXT, ODD), max_size=4), JSON), QUESTIONS)
def test_laya_batch_api_answers_or_refuses_clearly(engine, states, questions):
    agent = kime.Agent(engine)
    try:
        results = agent.predict_batch(states, questions)
    except kime.InvalidRequest as e:
        _well_formed(e)
    else:
        assert len(results) == len(states)


class _Server:
    """`kime serve`'s app under uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, engine: kime.Kime, **settings: Any):
        import uvicorn

        from kime.serve import Settings, create_app
        from kime.serve.protocol import with_header_deadline

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        settings_ = Settings(model=engine.model_id, workers=4, **settings)
        config = uvicorn.Config(create_app(engine, settings_), host="127.0.0.1", port=self.port,
                                log_level="error", lifespan="on",
                                http=with_header_deadline(settings_.header_read_timeout))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        end = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > end:
                raise AssertionError("kime serve did not start")
            time.sleep(0.01)

    def post(self, path: str, raw: bytes) -> Tuple[int, Any]:
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=raw,
                                     method="POST", headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("uvicorn", reason="kime serve needs its extra: pip install 'kime[serve]'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        own = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    srv = _Server(own)
    yield srv
    srv.stop()


def _body_bytes(body: Any) -> bytes:
    # Python's json writes NaN and lone surrogates (as \ud800 escapes): both reach the server.
    return json.dumps(body).encode()


@RUN
@given(requests())
def test_server_answers_4xx_never_5xx(server, body):
    status, reply = server.post("/v1/systemone", _body_bytes(body))
    assert status < 500, (status, reply)
    if status == 200:  # what the server read: JSON keys are strings, so 0 and "0" are one
        _questions_answered(json.loads(_body_bytes(body)), reply["answers"])
    else:
        assert isinstance(reply, dict) and reply.get("detail")


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


@pytest.mark.parametrize("depth", [2000, 50_000])
def test_a_state_nested_past_the_recursion_limit_is_refused(engine, depth):
    """Regression: a state too deep for JSON serialisation escaped as a raw RecursionError."""
    request = {"state": _nested(depth), "questions": {"q": {"type": "noul", "instructions": "x"}}}
    with pytest.raises(kime.InvalidRequest) as info:
        engine.decide(request)
    assert info.value.problems[0]["loc"] == ["state"]
    assert "nested too deeply" in info.value.problems[0]["msg"]


QUESTION_OK = {"q": {"type": "noul", "instructions": "Is it spam?"}}


@pytest.mark.parametrize("request_", [
    {"state": "\ud800", "questions": QUESTION_OK},
    {"state": {"a": ["fine", "x\udfff"]}, "questions": QUESTION_OK},
    {"state": "ok", "questions": {"q": {"type": "noul", "instructions": "\udc00"}}},
    {"state": "ok", "questions": {"q": {"type": "choice", "instructions": "Pick",
                                        "criteria": {"a\ud834": "x"}}}},
])
def test_a_lone_surrogate_is_refused_naming_the_field(engine, request_):
    """Regression (issue 14): a lone surrogate reached the tokenizer ('TextInputSequence must be
    str', a raw TypeError)."""
    with pytest.raises(kime.InvalidRequest) as info:
        engine.decide(request_)
    assert all("unpaired surrogate" in p["msg"] for p in info.value.problems)
    assert info.value.problems[0]["loc"][0] in ("state", "questions")


@pytest.mark.parametrize("key, value", [("max_len", "64"), ("head_max_len", 1.5),
                                        ("max_len", True), ("head_max_len", -1)])
def test_a_budget_that_is_not_a_positive_int_is_refused_naming_it(engine, key, value):
    """Regression (issue 14): a string max_len raised "'<' not supported between 'int' and
    'str'"."""
    agent = kime.Agent(engine)
    with pytest.raises(kime.InvalidRequest) as info:
        agent.predict("ok", QUESTION_OK, **{key: value})
    assert info.value.problems[0]["loc"] == [key] and key in info.value.problems[0]["msg"]


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


def _trickle(port: int, first: bytes, drip: bytes, every: float, for_at_most: float) -> Tuple[bytes, float]:
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


def test_slow_headers_and_slow_bodies_are_cut_off_and_free_their_slot():
    """A client that trickles its headers (slowloris) gets a 408 and is closed by the header
    deadline; one that trickles its body gets laya serve's 408 from the body deadline; a normal
    request is answered throughout."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        own = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
    srv = _Server(own, header_read_timeout=0.6, body_read_timeout=0.6)
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


LANG = st.one_of(st.none(), st.sampled_from(["de", "FR-ca", "en", "", "zz", "x" * 300]), TEXT, JSON)
MIN_CONFIDENCE = st.one_of(
    st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-2, 3),
    st.dictionaries(st.one_of(st.sampled_from(["default", "choice:2", "choice:3-5", "score:6-10",
                                               "noul:2", "choice:99"]), TEXT),
                    st.one_of(st.floats(allow_nan=True), st.integers(-1, 2), JSON), max_size=4),
    JSON)
COUNT = st.one_of(st.none(), st.integers(-3, 40), JSON)


@RUN
@given(st.one_of(st.lists(st.one_of(WORDS, TEXT), min_size=1, max_size=3), JSON),
       st.dictionaries(WORDS, WELL_FORMED, min_size=1, max_size=3), LANG, MIN_CONFIDENCE, COUNT,
       st.one_of(st.booleans(), JSON))
def test_laya_call_arguments_answer_or_refuse_clearly(engine, states, questions, lang,
                                                      min_confidence, batch_size, sort):
    """Laya's per-call arguments (lang, min_confidence, batch_size, sort_by_length) at any value:
    an answer per state, or a KimeError naming what was wrong."""
    agent = kime.Agent(engine)
    try:
        results = agent.predict_batch(states, questions, batch_size=batch_size, lang=lang,
                                      sort_by_length=sort, min_confidence=min_confidence)
    except kime.KimeError as e:
        assert str(e)
        if isinstance(e, kime.InvalidRequest):
            _well_formed(e)
    else:
        assert len(results) == len(states)
        json.dumps(results)


@settings(RUN, max_examples=max(60, RUN.max_examples // 50))  # a long state is many windows
@given(st.one_of(WORDS.map(lambda w: (w + " ") * 60), TEXT, JSON,  # not ODD's 120,000 chars:
                 st.integers(1, 200).map(_nested)),                # hundreds of windows each
       st.dictionaries(WORDS, WELL_FORMED, min_size=1, max_size=2), COUNT, COUNT, LANG)
def test_predict_long_answers_or_refuses_clearly(engine, state, questions, window, stride, lang):
    agent = kime.Agent(engine)
    try:
        result = agent.predict_long(state, questions, window=window, stride=stride, lang=lang)
    except kime.KimeError as e:
        assert str(e)
        if isinstance(e, kime.InvalidRequest):
            _well_formed(e)
    else:
        assert list(result["answers"]) == list(questions) and result["usage"]["windows"] >= 1
