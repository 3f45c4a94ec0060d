"""Admission: `--max-queue` bounds requests in flight, counted from admission (while the body
is still arriving) until the handler ends, against a real `kime serve` on loopback."""
import json
import socket

import pytest

from .test_server import KEYS, QUESTIONS, Server, _deadline


def _open_post(port: int, body: bytes, send: int) -> socket.socket:
    """A POST whose headers promise `body` but which sends only its first `send` bytes."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                 b"application/json\r\nauthorization: Bearer " + KEYS[0].encode()
                 + b"\r\ncontent-length: " + str(len(body)).encode() + b"\r\n\r\n" + body[:send])
    return sock


@pytest.mark.slow  # a kime serve process held busy
def test_busy_503_counts_every_request_in_flight(tmp_path):
    """`max_queue` bounds requests in flight from admission on, bodies still arriving included:
    with two slow bodies holding both slots a third request is refused (503, Retry-After) and
    `/ready` says busy; once they are answered (each still gets its answer) slots are free."""
    srv = Server(tmp_path, "--max-queue", "2", "--body-read-timeout", "60")
    held = []
    try:
        body = json.dumps({"state": "held", "questions": QUESTIONS}).encode()
        held = [_open_post(srv.port, body, 10) for _ in range(2)]
        _deadline("both slow bodies to be admitted",
                  lambda: json.loads(srv.get("/ready")[1]).get("in_flight") == 2)
        status, refused, headers = srv.post("/v1/systemone", {"state": "x", "questions": QUESTIONS})
        assert (status, refused) == (503, {"detail": "server busy, try again later"})
        assert headers["retry-after"] == "1"
        # the refusal comes before routing (bench.overload), after the same checks as before:
        # a caller without a key still hears 401, and another method 405
        assert srv.post("/v1/systemone", {"state": "x", "questions": QUESTIONS},
                        key=None)[0] == 401
        assert srv.get("/v1/systemone")[0] == 405
        status, ready, _ = srv.get("/ready")
        assert status == 503 and json.loads(ready)["status"] == "busy"
        assert srv.metric("kime_rejected_busy_total") == 1
        for sock in held:
            sock.sendall(body[10:])
        for sock in held:
            reply = b""
            while b"\r\n\r\n" not in reply:
                reply += sock.recv(65536)
            assert reply.startswith(b"HTTP/1.1 200")
        _deadline("the slots to free", lambda: srv.get("/ready")[0] == 200)
        assert srv.post("/v1/systemone", {"state": "x", "questions": QUESTIONS})[0] == 200
    finally:
        for sock in held:
            sock.close()
        srv.stop()


@pytest.mark.slow  # a server in this process, a hook held on purpose
def test_a_hung_up_request_holds_its_slot_until_its_hooks_end(tiny_path):
    """A client that hangs up cancels its request, and the request keeps its slot (`/ready`'s
    `in_flight`, `max_queue`'s count) until the cancelled call has finished its hooks: a slot
    freed while a hook still runs would let the next request in beside it."""
    import threading
    import time
    import urllib.error
    import urllib.request
    import warnings

    import uvicorn

    import kime
    from kime.serve import Settings, create_app

    entered, release, ended = threading.Event(), threading.Event(), []

    class Held:
        def on_predict_start(self, ctx):
            entered.set()
            release.wait(30)

        def on_predict_end(self, ctx):
            ended.append(type(ctx.error).__name__)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(str(tiny_path), device="cpu", threads=1, hooks=[Held()])
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(
        create_app(agent, Settings(model=agent.model_id, max_queue=1)), host="127.0.0.1",
        port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()

    def in_flight():
        try:
            with urllib.request.urlopen("http://127.0.0.1:%d/ready" % port, timeout=10) as r:
                return json.loads(r.read())["in_flight"]
        except urllib.error.HTTPError as busy:  # 503 while the one slot is held
            return json.loads(busy.read())["in_flight"]

    try:
        _deadline("the server to start", lambda: server.started)
        body = json.dumps({"state": "hung up", "questions": QUESTIONS}).encode()
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: "
                     b"application/json\r\ncontent-length: " + str(len(body)).encode()
                     + b"\r\n\r\n" + body)
        assert entered.wait(30)
        sock.close()  # the client hangs up while the start hook runs
        time.sleep(0.6)  # the server has seen the hang-up (it polls every 50 ms)
        assert in_flight() == 1 and ended == []
        release.set()
        _deadline("the cancelled call to end", lambda: in_flight() == 0)
        assert ended == ["CancelledError"]
    finally:
        release.set()
        server.should_exit = True
        thread.join(timeout=30)
