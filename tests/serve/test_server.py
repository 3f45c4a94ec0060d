"""`kime serve` end to end: the real server in a subprocess on a free 127.0.0.1 port, with the
committed tiny checkpoint, answering laya-serve's requests as in-process `predict` does."""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
    import pydantic  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    print("skipping tests/serve/test_server.py: kime serve needs its extra (%s)" % e)
    pytest.skip("kime serve needs fastapi, uvicorn, pydantic and prometheus_client (pip install "
                "'kime[serve]'): %s" % e, allow_module_level=True)

from prometheus_client.parser import text_string_to_metric_families

import kime
from kime.laya.confidence import with_jev_confidence
from kime.serve import load_settings

from .. import paths

ROOT = paths.ROOT
TINY = str(paths.TINY)
KEYS = ["first-key", "second-key"]

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "payments and invoices", "tech": "bugs and outages"}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["low", "normal", "high"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _deadline(what: str, ready, timeout: float = 30.0, every: float = 0.02):
    """Poll `ready()` until it is true; fail naming `what` after `timeout` seconds."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ready():
            return
        time.sleep(every)
    raise AssertionError("timed out waiting for " + what)


class Client:
    """HTTP calls to a server on 127.0.0.1:`port`."""

    port: int

    def url(self, path: str) -> str:
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def request(self, method: str, path: str, body=None, key=KEYS[0], headers=None, raw=None):
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        req = urllib.request.Request(self.url(path), data=data, method=method)
        req.add_header("content-type", "application/json")
        if key is not None:
            req.add_header("authorization", "Bearer " + key)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=120) as r:
                return r.status, r.read(), r.headers
        except urllib.error.HTTPError as e:
            return e.code, e.read(), e.headers

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        status, data, headers = self.request("POST", path, body, **kw)
        return status, json.loads(data) if data else None, headers

    def metrics(self) -> dict:
        """`/metrics` through prometheus_client's parser: {(sample name, labels): value}."""
        status, data, headers = self.get("/metrics")
        assert status == 200 and headers["content-type"].startswith("text/plain")
        return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
                for family in text_string_to_metric_families(data.decode())
                for sample in family.samples}

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics()[(name, tuple(sorted(labels.items())))]


class Server(Client):
    """`kime serve` in a subprocess, as a user runs it."""

    def __init__(self, tmp: Path, *extra: str, env: dict = None):
        self.port = _free_port()
        key_file = tmp / "keys"
        key_file.write_text("# keys\n%s\n\n%s\n" % tuple(KEYS))
        environ = {k: v for k, v in os.environ.items()
                   if not k.startswith(("KIME_", "LAYA_"))}
        environ.update(env or {})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kime.cli", "serve", "--model", TINY, "--host", "127.0.0.1",
             "--port", str(self.port), "--api-key-file", str(key_file), "--threads", "2",
             "--device", "cpu", "--log-level", "warning", *extra],
            cwd=str(ROOT), env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited: %s" % self.proc.stdout.read().decode())
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError("server did not come up")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class InProcessServer(Client):
    """uvicorn on a thread over an engine the test holds, so the test can watch the engine's
    scheduler and hold its backend."""

    def __init__(self, engine, **settings):
        import uvicorn

        from kime.serve import Settings, create_app

        self.port = _free_port()
        app = create_app(engine, Settings(model=TINY, api_keys=KEYS, **settings))
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _deadline("the in-process server to start", lambda: self.server.started)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(30)


class HeldBackend:
    """Wraps a backend's `run`: `entered` is set when a batch reaches the device, and the batch
    stays there until `release()`."""

    def __init__(self, backend):
        self.entered = threading.Event()
        self._released = threading.Event()
        self._run = backend.run
        backend.run = self

    def __call__(self, batch):
        self.entered.set()
        if not self._released.wait(120):
            raise RuntimeError("the held batch was never released")
        return self._run(batch)

    def release(self) -> None:
        self._released.set()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("serve"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def agent():
    return kime.load(TINY, device="cpu", threads=2)


def _expected(agent, state, questions=QUESTIONS, **kw):
    # What laya-serve answers: predict's dict, through JSON, plus x_jev_confidence.
    return json.loads(json.dumps(with_jev_confidence(agent.predict(state, questions, **kw))))


@pytest.mark.slow  # the first of the module's server tests: starts kime serve
def test_systemone_equals_predict(server, agent):
    for state in ["I was charged twice, please refund one.", {"subject": "outage", "body": "down"},
                  [{"role": "user", "content": "the app crashes"}]]:
        status, body, headers = server.post("/v1/systemone",
                                            {"state": state, "questions": QUESTIONS})
        assert status == 200, body
        assert body == _expected(agent, state)
        assert headers["x-request-id"]
    status, body, _ = server.post("/v1/systemone", {"state": "short", "questions": QUESTIONS,
                                                    "max_len": 64, "head_max_len": 32})
    assert status == 200, body
    assert body == _expected(agent, "short", max_len=64, head_max_len=32)


def test_batch_equals_predict_batch(server, agent):
    states = ["refund please", "the site is down", {"text": "hello"}]
    status, body, _ = server.post("/v1/systemone/batch", {"states": states, "questions": QUESTIONS})
    assert status == 200, body
    want = [_expected(agent, s) for s in states]
    assert body["results"] == want
    assert body["total_usage"] == {"input_tokens": sum(r["usage"]["input_tokens"] for r in want),
                                   "output_tokens": 0}


def test_request_id_echoed_and_generated(server):
    status, _, headers = server.get("/health", headers={"x-request-id": "abc-123"})
    assert status == 200 and headers["x-request-id"] == "abc-123"
    status, _, headers = server.post("/v1/systemone", raw=b"{")
    assert status == 400 and len(headers["x-request-id"]) >= 16


def test_bad_requests(server):
    post = server.post
    assert post("/v1/systemone", raw=b"{not json")[:2] == (
        400, {"detail": "request body must be valid JSON"})
    assert post("/v1/systemone", ["x"])[:2] == (
        400, {"detail": "request body must be an object with a 'questions' field"})
    assert post("/v1/systemone", {"questions": QUESTIONS})[:2] == (
        400, {"detail": "'state' is required"})
    assert post("/v1/systemone", {"state": "x", "questions": ["a"]})[:2] == (
        400, {"detail": "'questions' must be an object"})
    assert post("/v1/systemone/batch", {"states": [], "questions": QUESTIONS})[:2] == (
        400, {"detail": "'states' must be a non-empty list"})
    assert post("/v1/systemone/batch", {"questions": QUESTIONS})[:2] == (
        400, {"detail": "request body must be an object with 'states' and 'questions' fields"})
    assert post("/v1/systemone", {"state": "x", "questions": QUESTIONS, "max_len": "7"})[:2] == (
        422, {"detail": "max_len must be an integer"})
    assert post("/v1/systemone", {"state": "x", "questions": QUESTIONS, "max_len": 10**6})[:2] == (
        422, {"detail": "max_len exceeds server limit (1000000 > 8192)"})


def test_limits_413(server):
    post = server.post
    # Refused on its Content-Length, before the body is read (the client never sends it).
    head = ("POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n"
            "Content-Length: %d\r\nConnection: close\r\n\r\n" % (KEYS[0], 2 * 1024 * 1024 + 1))
    with socket.create_connection(("127.0.0.1", server.port), timeout=20) as sock:
        sock.sendall(head.encode() + b" " * 1000)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    assert data.startswith(b"HTTP/1.1 413 "), data
    assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == {"detail": "request body too large"}
    assert post("/v1/systemone", {"state": "x" * 50001, "questions": QUESTIONS})[:2] == (
        413, {"detail": "state too large (50001 > 50000 chars)"})
    many = {"q%d" % i: QUESTIONS["refund"] for i in range(65)}
    assert post("/v1/systemone", {"state": "x", "questions": many})[:2] == (
        413, {"detail": "too many questions (65 > 64)"})
    wide = {"c": {"type": "choice", "instructions": "?",
                  "criteria": ["o%d" % i for i in range(101)]}}
    assert post("/v1/systemone", {"state": "x", "questions": wide})[:2] == (
        413, {"detail": "too many choice options for 'c' (101 > 100)"})
    assert post("/v1/systemone/batch", {"states": ["x"] * 65, "questions": QUESTIONS})[:2] == (
        413, {"detail": "too many states in batch (65 > 64)"})


def test_validation_422_lists_every_problem(server, agent):
    bad = {"a": {"type": "bogus", "instructions": "?"}, "b": {"type": "choice"}}
    status, body, _ = server.post("/v1/systemone", {"state": "x", "questions": bad})
    assert status == 422
    with pytest.raises(kime.InvalidRequest) as err:
        agent.predict("x", bad)
    assert body["detail"] == str(err.value)
    assert body["problems"] == json.loads(json.dumps(err.value.problems))
    assert len(body["problems"]) >= 3
    status, body, _ = server.post("/v1/systemone/batch", {"states": ["x", "y"], "questions": bad})
    assert status == 422 and len(body["problems"]) >= 3


def test_auth(server):
    ok = {"state": "x", "questions": QUESTIONS}
    assert server.post("/v1/systemone", ok, key=None)[:2] == (
        401, {"detail": "invalid or missing bearer token"})
    assert server.post("/v1/systemone", ok, key="wrong")[0] == 401
    assert server.post("/v1/systemone/batch", {"states": ["x"], "questions": QUESTIONS},
                       key=None)[0] == 401
    assert server.post("/v1/systemone", ok, key=KEYS[1])[0] == 200
    assert server.get("/v1/models", key=None)[0] == 401
    assert server.get("/metrics", key="nope")[0] == 401
    status, data, _ = server.get("/health", key=None)
    assert status == 200 and json.loads(data) == {"status": "ok"}
    status, data, _ = server.get("/health")
    health = json.loads(data)
    assert health["status"] == "ok" and health["model"] == TINY and health["device"]


def test_ready_and_models(server):
    status, data, _ = server.get("/ready")
    ready = json.loads(data)
    assert status == 200 and ready["loaded"] == [TINY] and ready["queue_depth"] >= 0
    status, data, _ = server.get("/v1/models")
    assert status == 200 and json.loads(data)["data"][0]["id"] == TINY


@pytest.mark.slow  # many clients at once against kime serve
def test_concurrent_clients(server, agent):
    states = ["client %d says: my invoice %d is wrong" % (i, i * 7) for i in range(64)]
    want = {s: _expected(agent, s) for s in states}
    got, errors = {}, []
    barrier = threading.Barrier(64)

    def client(state):
        try:
            barrier.wait(10)
            status, body, _ = server.post("/v1/systemone", {"state": state, "questions": QUESTIONS})
            got[state] = (status, body)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(s,)) for s in states]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    for s in states:
        assert got[s] == (200, want[s])


def test_unknown_model_is_refused_and_a_jev_id_is_not(server, agent):
    for other in ("laya-multilingual", "org/other-checkpoint", "./elsewhere"):
        status, data, _ = server.post("/v1/systemone", {"state": "hi", "questions": QUESTIONS,
                                                        "model": other})
        assert status == 422, other
        assert "unknown model %r" % other in data["detail"]
    status, data, _ = server.post("/v1/systemone", {"state": "hi", "questions": QUESTIONS,
                                                    "model": "jev-1"})
    assert status == 200 and data == _expected(agent, "hi")
    status, _, _ = server.post("/v1/systemone", {"state": "hi", "questions": QUESTIONS,
                                                 "model": TINY})
    assert status == 200


def test_metrics_parse(server):
    samples = server.metrics()  # every line parses with prometheus_client's own parser

    def value(name, **labels):
        return samples[(name, tuple(sorted(labels.items())))]

    assert value("kime_http_requests_total", method="POST", path="/v1/systemone",
                 status="200") >= 1
    assert value("kime_http_request_duration_seconds_bucket", path="/v1/systemone",
                 le="+Inf") >= 1
    assert value("kime_states_answered_total") >= 1
    assert value("kime_truncated_questions_total") >= 0
    # the engine's figures, read at the scrape by the collector
    assert value("kime_scheduler_runs_total") >= 1
    assert value("kime_scheduler_batches_total") >= 1
    assert value("kime_scheduler_rows_total") >= value("kime_scheduler_runs_total")
    assert value("kime_queue_depth") >= 0
    for cache in ("answers", "tokens"):
        assert 0.0 <= value("kime_cache_hit_ratio", cache=cache) <= 1.0
        assert value("kime_cache_hits_total", cache=cache) >= 0
        assert value("kime_cache_size", cache=cache) >= 0
    assert value("kime_memory_bytes", kind="weights") > 0
    _, data, _ = server.get("/metrics")
    types = {f.name: f.type for f in text_string_to_metric_families(data.decode())}
    assert types["kime_scheduler_runs"] == types["kime_cache_hits"] == "counter"
    assert types["kime_queue_depth"] == types["kime_cache_hit_ratio"] == "gauge"
    assert types["kime_http_request_duration_seconds"] == "histogram"


@pytest.fixture(scope="module")
def app_client():
    """The app in process (fastapi's TestClient), over an engine on the CPU."""
    pytest.importorskip("httpx", reason="fastapi's TestClient needs httpx")
    from fastapi.testclient import TestClient

    from kime.serve import Settings, create_app

    engine = kime.Kime(TINY, device="cpu", threads=1)
    with TestClient(create_app(engine, Settings(model=TINY, api_keys=KEYS))) as client:
        yield client


ROUTES = {"/v1/systemone": {"state": "x", "questions": QUESTIONS},
          "/v1/systemone/batch": {"states": ["x"], "questions": QUESTIONS}}


def _both(client, change=None, raw=None, key=KEYS[0]):
    """The same change to a good body, sent to both POST routes: [(status, json), ...]."""
    out = []
    for path, good in ROUTES.items():
        headers = {"authorization": "Bearer " + key} if key else {}
        if raw is not None:
            r = client.post(path, content=raw, headers=dict(headers, **{
                "content-type": "application/json"}))
        else:
            r = client.post(path, json=dict(good, **(change or {})), headers=headers)
        assert r.headers["x-request-id"]
        out.append((r.status_code, r.json()))
    return out


def test_both_post_routes_share_the_pipeline(app_client):
    """Auth, the body, laya serve's checks and the request's rules answer the same on both."""
    def same(change=None, **kw):
        single, batch = _both(app_client, change, **kw)
        assert single == batch
        return single

    assert same(key=None) == (401, {"detail": "invalid or missing bearer token"})
    assert same(key="wrong")[0] == 401
    assert same(raw=b" " * (2 * 1024 * 1024 + 1)) == (413, {"detail": "request body too large"})
    assert same(raw=b"{nope") == (400, {"detail": "request body must be valid JSON"})
    assert same(raw='{"state": "\\ud800", "states": ["\\ud800"], "questions": {}}'.encode()) \
        == (400, {"detail": "request body contains an unpaired surrogate escape; those cannot "
                            "be encoded as UTF-8"})
    status, body = same({"hooks": ["x"]})
    assert status == 422 and body["detail"].startswith("hooks run inside the server process")
    assert same({"max_len": "7"}) == (422, {"detail": "max_len must be an integer"})
    assert same({"head_max_len": 10 ** 6}) == (
        422, {"detail": "head_max_len exceeds server limit (1000000 > 8192)"})
    status, body = same({"max_len": 0})  # the request's rule, from kime.request
    assert status == 422 and "max_len must be a positive integer" in body["detail"]
    assert body["problems"][0]["loc"] == ["max_len"]
    status, body = same({"model": "laya-multilingual"})
    assert status == 422 and "unknown model 'laya-multilingual'" in body["detail"]
    assert same({"min_confidence": 2}) == (
        422, {"detail": "min_confidence must be a float in [0.0, 1.0], got 2"})
    assert same({"lang": 5}) == (
        422, {"detail": 'lang must be a language code string such as "de", or null'})
    many = {"q%d" % i: QUESTIONS["refund"] for i in range(65)}
    assert same({"questions": many}) == (413, {"detail": "too many questions (65 > 64)"})
    status, body = same({"questions": {"a": {"type": "score", "instructions": "?",
                                             "criteria": ["low", None]}}})
    assert status == 422 and "score level 1 is null" in body["detail"] and body["problems"]
    (s1, single), (s2, batch) = _both(app_client)
    assert s1 == s2 == 200 and batch["results"] == [single]


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.mark.slow  # starts and stops a kime serve process
def test_graceful_shutdown_finishes_request_in_flight(tmp_path, agent):
    srv = Server(tmp_path, "--graceful-shutdown", "15")
    body = json.dumps({"state": "a slow upload", "questions": QUESTIONS}).encode()
    head = ("POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Authorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (KEYS[0], len(body))).encode()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as sock:
            sock.sendall(head + body[:10])       # the request is in flight: half its body sent
            _deadline("the request to reach the app", lambda: srv.metric(
                "kime_http_requests_in_progress", path="/v1/systemone") >= 1)
            srv.proc.send_signal(signal.SIGTERM)
            _deadline("the server to stop listening", lambda: _refused(srv.port))
            assert srv.proc.poll() is None       # still finishing the request
            sock.sendall(body[10:])
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        assert b" 200 " in status_line, data
        assert json.loads(rest.split(b"\r\n\r\n", 1)[1]) == _expected(agent, "a slow upload")
        assert srv.proc.wait(20) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal
    finally:
        srv.stop()


def test_settings_precedence(tmp_path):
    cfg = tmp_path / "kime.toml"
    cfg.write_text('[serve]\nport = 9001\nhost = "0.0.0.0"\nthreads = 3\nmax_queue = 5\n'
                   'api_key = ["from-toml"]\n')
    s = load_settings({}, config=str(cfg), environ={})
    assert (s.port, s.host, s.threads, s.max_queue, s.api_keys) == (9001, "0.0.0.0", 3, 5,
                                                                    ["from-toml"])
    env = {"LAYA_PORT": "9002", "KIME_THREADS": "4", "LAYA_THREADS": "9", "LAYA_API_KEY": "k",
           "KIME_MAX_QUEUE": "7"}
    s = load_settings({}, config=str(cfg), environ=env)
    assert (s.port, s.threads, s.max_queue) == (9002, 4, 7) and "k" in s.api_keys
    s = load_settings({"port": 9003, "threads": None}, config=str(cfg), environ=env)
    assert (s.port, s.threads) == (9003, 4)
    with pytest.raises(ValueError):
        load_settings({}, environ={"LAYA_PORT": "99999"})
    assert load_settings({}, environ={}).max_merge == 0
    assert load_settings({}, environ={"KIME_MAX_MERGE": "1"}).max_merge == 1
    assert load_settings({"max_merge": 2}, environ={"KIME_MAX_MERGE": "1"}).max_merge == 2
    with pytest.raises(ValueError, match="max_merge"):
        load_settings({}, environ={"KIME_MAX_MERGE": "-1"})


def test_settings_lists_and_sources(tmp_path):
    """A list-valued setting stays a list from every source, and each source's value is typed."""
    from kime.serve import ConfigError, Settings
    from kime.serve.settings import sources

    keys = tmp_path / "keys"
    keys.write_text("# comment\nfrom-file\n\n")
    cfg = tmp_path / "kime.toml"
    cfg.write_text('api_key = "single"\nworkers = 4\nbody_read_timeout = 2.5\n')
    s = load_settings({"api_key_file": str(keys)}, config=str(cfg),
                      environ={"KIME_API_KEY": " from-env ", "LAYA_API_KEY": "laya-env"})
    assert s.api_keys == ["single", "from-file", "from-env", "laya-env"]  # not ["s", "i", ...]
    assert (s.workers, s.body_read_timeout) == (4, 2.5)
    cfg.write_text('[serve]\napi_keys = ["a", "b"]\n')
    assert load_settings({}, config=str(cfg), environ={}).api_keys == ["a", "b"]
    assert Settings(api_keys="one").api_keys == ["one"]
    cfg.write_text('[serve]\nbogus = 1\nport = 1\n')
    with pytest.raises(ConfigError, match="unknown setting.*bogus"):
        load_settings({}, config=str(cfg), environ={})
    cfg.write_text('[serve]\nport = true\n')
    with pytest.raises(ConfigError, match=r"^invalid config value True for port$"):
        load_settings({}, config=str(cfg), environ={})
    with pytest.raises(ConfigError, match=r"^invalid environment variable KIME_WORKERS '0' for "
                       r"workers$"):
        load_settings({}, environ={"KIME_WORKERS": "0"})
    with pytest.raises(ConfigError, match=r"^invalid flag value 'soon' for graceful_shutdown$"):
        load_settings({"graceful_shutdown": "soon"}, environ={})
    s = load_settings({"max_token_budget": "4096"}, environ={"KIME_MAX_TOKEN_BUDGET": "1",
                                                             "LAYA_BODY_READ_TIMEOUT": "3"})
    assert (s.max_token_budget, s.body_read_timeout, s.precision) == (4096, 3.0, "auto")
    # every setting has one declaration, and the environment names come from it
    declared = sources()
    assert declared["port"].env == ("KIME_PORT", "LAYA_PORT") and not declared["api_keys"].flag
    assert set(declared) == set(Settings.model_fields)


@pytest.mark.slow  # a kime serve process and clients that hang up
def test_a_client_that_hangs_up_costs_no_forward_pass():
    """A request queued behind a long batch costs no forward pass when its client hangs up: none
    of its rows run. The long batch is held on the device until the hang-up is seen."""
    engine = kime.Kime(TINY, device="cpu", threads=2)
    held = HeldBackend(engine.backend)
    srv = InProcessServer(engine)
    questions = {"q%d" % i: {"type": "choice", "instructions": "Pick one of these %d" % i,
                             "criteria": ["alpha", "beta", "gamma", "delta"]} for i in range(40)}
    states = ["a long state number %d: " % i + "words " * 80 for i in range(40)]
    busy_status = []
    busy = threading.Thread(target=lambda: busy_status.append(srv.post(
        "/v1/systemone/batch", {"states": states, "questions": questions})[0]))
    try:
        rows = engine.scheduler.rows
        busy.start()
        assert held.entered.wait(60), "the big batch never reached the device"
        body = json.dumps({"state": "nobody will read this", "questions": QUESTIONS}).encode()
        sock = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                     b"application/json\r\nauthorization: Bearer " + KEYS[0].encode()
                     + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        _deadline("the request to queue behind the big batch",
                  lambda: engine.scheduler.depth() >= 1)
        sock.close()
        _deadline("the server to see the hang-up",
                  lambda: srv.metric("kime_client_disconnects_total") >= 1)
        held.release()
        busy.join(300)  # 1,600 rows: over a minute on two busy cores
        assert busy_status == [200]
        assert engine.scheduler.rows == rows + len(states) * len(questions)
        assert engine.scheduler.dropped >= 1
    finally:
        held.release()
        srv.stop()
