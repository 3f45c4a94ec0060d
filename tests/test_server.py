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
    import uvicorn  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    print("skipping tests/test_server.py: kime serve needs fastapi and uvicorn (%s)" % e)
    pytest.skip("kime serve needs fastapi and uvicorn (pip install 'kime[serve]'): %s" % e,
                allow_module_level=True)

import kime
from kime.server import load_settings, with_jev_confidence

ROOT = Path(__file__).resolve().parent.parent
TINY = str(ROOT / "tests" / "goldens" / "checkpoints" / "tiny")
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


class Server:
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
             "--log-level", "warning", *extra],
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

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = Server(tmp_path_factory.mktemp("serve"))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def agent():
    return kime.load(TINY, threads=2)


def _expected(agent, state, questions=QUESTIONS, **kw):
    # What laya-serve answers: predict's dict, through JSON, plus x_jev_confidence.
    return json.loads(json.dumps(with_jev_confidence(agent.predict(state, questions, **kw))))


def test_systemone_equals_predict(server, agent):
    for state in ["I was charged twice, please refund one.", {"subject": "outage", "body": "down"},
                  [{"role": "user", "content": "the app crashes"}]]:
        status, body, headers = server.post("/v1/systemone", {"state": state, "questions": QUESTIONS})
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
    wide = {"c": {"type": "choice", "instructions": "?", "criteria": ["o%d" % i for i in range(101)]}}
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
    status, data, headers = server.get("/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    samples = {}
    for line in data.decode().splitlines():
        if not line or line.startswith("#"):
            assert not line or line.startswith(("# HELP ", "# TYPE "))
            continue
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    assert samples['kime_http_requests_total{method="POST",path="/v1/systemone",status="200"}'] >= 1
    assert 'kime_cache_hit_ratio{cache="answers"}' in samples
    assert samples["kime_scheduler_batches_total"] >= 1
    assert samples['kime_memory_bytes{kind="weights"}'] > 0
    assert 'kime_http_request_duration_seconds_bucket{path="/v1/systemone",le="+Inf"}' in samples
    assert "kime_truncated_questions_total" in samples


def test_busy_503_with_retry_after():
    pytest.importorskip("httpx", reason="fastapi's TestClient needs httpx")
    from fastapi.testclient import TestClient

    from kime.server import Settings, create_app

    engine = kime.Kime(TINY, threads=1)
    engine.scheduler.depth = lambda: 3  # type: ignore[method-assign]  # a queue past the bound
    app = create_app(engine, Settings(model=TINY, max_queue=3))
    with TestClient(app) as client:
        r = client.post("/v1/systemone", json={"state": "x", "questions": QUESTIONS})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert r.json() == {"detail": "server busy, try again later"} and r.headers["x-request-id"]
        r = client.get("/ready")
        assert r.status_code == 503 and r.json()["queue_depth"] == 3
        engine.scheduler.depth = lambda: 2  # type: ignore[method-assign]
        assert client.post("/v1/systemone", json={"state": "x", "questions": QUESTIONS}).status_code == 200
        assert client.get("/ready").status_code == 200


def test_graceful_shutdown_finishes_request_in_flight(tmp_path, agent):
    srv = Server(tmp_path, "--graceful-shutdown", "15")
    body = json.dumps({"state": "a slow upload", "questions": QUESTIONS}).encode()
    head = ("POST /v1/systemone HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            "Authorization: Bearer %s\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
            % (KEYS[0], len(body))).encode()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=20) as sock:
            sock.sendall(head + body[:10])       # the request is in flight: half its body sent
            time.sleep(0.3)
            srv.proc.send_signal(signal.SIGTERM)
            time.sleep(0.5)
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


def _metric(server, name: str) -> float:
    _, data, _ = server.get("/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no metric %s" % name)


def test_a_client_that_hangs_up_costs_no_forward_pass(server):
    """A request queued behind a long batch costs no forward pass when its client hangs up:
    whether it was caught while being laid out or while queued, none of its rows run."""
    import socket

    questions = {"q%d" % i: {"type": "choice", "instructions": "Pick one of these %d" % i,
                             "criteria": ["alpha", "beta", "gamma", "delta"]} for i in range(40)}
    states = ["a long state number %d: " % i + "words " * 80 for i in range(40)]
    busy = threading.Thread(target=server.post, args=("/v1/systemone/batch",
                                                      {"states": states, "questions": questions}))
    rows = _metric(server, "kime_scheduler_rows_total")
    busy.start()
    time.sleep(0.3)  # the big batch is on the device now
    body = json.dumps({"state": "nobody will read this", "questions": QUESTIONS}).encode()
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json"
                 b"\r\nauthorization: Bearer " + KEYS[0].encode() + b"\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    time.sleep(0.2)
    sock.close()
    busy.join(60)
    deadline = time.time() + 10
    while time.time() < deadline and _metric(server, "kime_client_disconnects_total") < 1:
        time.sleep(0.1)
    assert _metric(server, "kime_client_disconnects_total") >= 1
    assert _metric(server, "kime_scheduler_rows_total") == rows + len(states) * len(questions)
