"""`kime serve --engine ray` on a real local Ray cluster of several nodes (a head with no CPUs
and two worker nodes of one CPU, all on 127.0.0.1), no mocks: the command answers as one
`kime serve` does (bodies, statuses, error texts, request ids, /health, /ready, /v1/models) and
its /metrics counts every replica's traffic; the replicas spread over both nodes; a replica
SIGKILLed under load loses no request once clients retry, and comes back; scaling 2 -> 1 under
load loses nothing with no retries at all; SIGTERM leaves no actor alive; a size that does not
fit the cluster is refused before anything is deployed."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple

import pytest

from ..ray_local import LOOPBACK, environ, loopback_cluster  # before Ray

pytest.importorskip("fastapi")
ray = pytest.importorskip("ray")
pytest.importorskip("ray.serve")

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from kime.client import Client, Retry  # noqa: E402

from .. import paths  # noqa: E402
from .test_server import _free_port  # noqa: E402

pytestmark = [pytest.mark.slow,  # a Ray cluster: seconds per deployment
              pytest.mark.filterwarnings("ignore::DeprecationWarning")]

TINY = str(paths.TINY)
QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "payments and invoices", "tech": "bugs and outages"}},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
REPLICA_TITLE = b"ray::ServeReplica:kime:KimeServe"


@pytest.fixture(scope="module")
def cluster():
    with loopback_cluster(workers=2, cpus=1) as address:
        yield address


def replica_processes() -> Dict[int, int]:
    """The kime replicas' processes on this machine: pid -> parent pid (its node's raylet)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read()
            with open("/proc/%s/stat" % entry, "rb") as f:
                stat = f.read()
        except OSError:
            continue
        if cmdline.startswith(REPLICA_TITLE):
            found[int(entry)] = int(stat.rsplit(b")", 1)[1].split()[1])
    return found


def wait_for(what: str, ready, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if ready():
            return
        time.sleep(0.25)
    raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))


def call(port: int, method: str, path: str, body: Optional[bytes] = None,
         headers: Optional[Dict[str, str]] = None) -> Tuple[int, Any, Dict[str, str]]:
    """(status, parsed body, headers) of one request to 127.0.0.1:port."""
    req = urllib.request.Request("http://%s:%d%s" % (LOOPBACK, port, path), data=body,
                                 method=method, headers=dict(headers or {}))
    if body is not None:
        req.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            status, raw, got = r.status, r.read(), r.headers
    except urllib.error.HTTPError as e:
        status, raw, got = e.code, e.read(), e.headers
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = raw  # not kime's: Serve's proxy before the app is routed
    return status, parsed, {k.lower(): v for k, v in got.items()}


def answers(port: int) -> bool:
    try:
        return call(port, "GET", "/ready")[0] == 200
    except OSError:
        return False


def one(state: str) -> bytes:
    return json.dumps({"state": state, "questions": QUESTIONS}).encode()


CASES: List[Tuple[str, str, Optional[bytes], Dict[str, str]]] = [
    ("POST", "/v1/systemone", one("Please refund my last invoice"), {"x-request-id": "abc-123"}),
    ("POST", "/v1/systemone/batch", json.dumps({
        "states": ["the app crashes", "refund please", ""], "questions": QUESTIONS}).encode(), {}),
    ("POST", "/v1/systemone", json.dumps({"state": "x", "questions": {
        "q": {"type": "choice", "instructions": "pick", "criteria": []},
        "r": {"type": "score", "instructions": "", "criteria": ["a"]}}}).encode(), {}),
    ("POST", "/v1/systemone", b"{not json", {}),
    ("POST", "/v1/systemone", json.dumps({"state": "x", "questions": QUESTIONS,
                                          "max_len": 10 ** 9}).encode(), {}),
    ("POST", "/v1/systemone", json.dumps({"state": "x", "questions": QUESTIONS,
                                          "model": "someone-else"}).encode(), {}),
    ("GET", "/health", None, {}),
    ("GET", "/ready", None, {}),
    ("GET", "/v1/models", None, {}),
    ("GET", "/no/such/route", None, {}),
]


def served_per_replica(port: int) -> Dict[str, float]:
    """The 200s of /v1/systemone by replica, as /metrics through the proxy counts them."""
    with urllib.request.urlopen("http://%s:%d/metrics" % (LOOPBACK, port)) as r:
        text = r.read().decode()
    per_replica: Dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if (s.name == "kime_http_requests_total" and s.labels["path"] == "/v1/systemone"
                    and s.labels["status"] == "200"):
                per_replica[s.labels["replica"]] = s.value
    return per_replica


def _without_gauges(response: Tuple[int, Any, Dict[str, str]]
                    ) -> Tuple[int, Any, Dict[str, str]]:
    """A /ready response without `in_flight` and `queue_depth`, checked to be counts."""
    status, body, headers = response
    body = dict(body)
    for key in ("in_flight", "queue_depth"):
        value = body.pop(key)
        assert isinstance(value, int) and value >= 0, (key, value)
    return status, body, headers


def test_kime_serve_engine_ray_answers_as_one_kime_serve_and_sigterm_leaves_no_actor(cluster):
    local_port, ray_port = _free_port(), _free_port()
    common = ["--model", TINY, "--host", LOOPBACK, "--log-level", "warning"]
    local = subprocess.Popen([sys.executable, "-m", "kime.cli", "serve", "--threads", "1",
                              "--port", str(local_port)] + common, env=environ())
    on_ray = subprocess.Popen([sys.executable, "-m", "kime.cli", "serve", "--engine", "ray",
                               "--replicas", "2", "--threads-per-replica", "1",
                               "--ray-address", cluster, "--port", str(ray_port)] + common,
                              env=environ(), stdout=subprocess.PIPE, text=True)
    try:
        wait_for("kime serve", lambda: answers(local_port), 60)
        wait_for("kime serve --engine ray", lambda: answers(ray_port), 120)
        # one replica may answer before the other has started
        wait_for("both replicas", lambda: len(replica_processes()) == 2, 60)
        answered = 0
        for method, path, body, headers in CASES:
            want = call(local_port, method, path, body, headers)
            answered += want[0] == 200 and path == "/v1/systemone"
            got = call(ray_port, method, path, body, headers)
            if path == "/ready":  # its gauges are each server's own moment (a replica warming)
                got, want = _without_gauges(got), _without_gauges(want)
            assert got[:2] == want[:2], (method, path)
            if "x-request-id" in headers:
                assert got[2]["x-request-id"] == headers["x-request-id"]
            else:
                assert got[2]["x-request-id"]  # one the server made up, as kime serve does
        # /metrics through the proxy reaches one replica and counts the traffic of both. Ray's
        # router learns of a replica some time after its process starts (later on a loaded
        # machine), so requests go in rounds until both have answered some, or a minute passed.
        sent = 0
        per_replica: Dict[str, float] = {}
        deadline = time.monotonic() + 60
        while len(per_replica) < 2 and time.monotonic() < deadline:
            for _ in range(20):
                assert call(ray_port, "POST", "/v1/systemone", one("metrics %d" % sent))[0] == 200
                sent += 1
            time.sleep(2.0)  # a replica posts its counts every second
            per_replica = served_per_replica(ray_port)
        assert sum(per_replica.values()) == sent + answered
        assert len(per_replica) == 2, per_replica  # the proxy spread them over both
    finally:
        local.send_signal(signal.SIGTERM)
        on_ray.send_signal(signal.SIGTERM)
        assert local.wait(timeout=60) in (0, -signal.SIGTERM)  # uvicorn re-raises it
        assert on_ray.wait(timeout=120) == 0
    assert "2 replica(s) x 1 thread(s)" in on_ray.stdout.read()
    # nothing of it is left: no replica, no board, no Serve controller or proxy
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if a["namespace"] == "serve"]
    wait_for("the replica processes to exit", lambda: not replica_processes(), 30)


def test_a_size_that_does_not_fit_the_cluster_is_refused_before_deploying(cluster):
    done = subprocess.run([sys.executable, "-m", "kime.cli", "serve", "--engine", "ray",
                           "--replicas", "3", "--threads-per-replica", "1", "--ray-address",
                           cluster, "--model", TINY, "--port", str(_free_port())],
                          env=environ(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "3 replica(s) x 1 thread(s) do not fit this Ray cluster" in done.stderr
    assert "hold 2" in done.stderr
    done = subprocess.run([sys.executable, "-m", "kime.cli", "serve", "--replicas", "2",
                           "--autoscale", "1:3", "--model", TINY], env=environ(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "--replicas, --autoscale need --engine ray" in done.stderr
    assert not replica_processes()


# --- the Python API, driven from here ------------------------------------------------------


@pytest.fixture(scope="module")
def deployed(cluster):
    from ray import serve

    import kime.ray
    from kime.serve import Settings

    port = _free_port()
    serve.start(http_options={"host": LOOPBACK, "port": port})
    settings = Settings(log_level="warning", graceful_shutdown=10)

    def deploy(replicas: int) -> None:
        serve.run(kime.ray.deployment(TINY, replicas=replicas, threads_per_replica=1,
                                      settings=settings), name="kime", route_prefix="/",
                  blocking=False)

    deploy(2)
    wait_for("two replicas", lambda: len(replica_processes()) == 2 and answers(port), 120)
    yield port, deploy
    serve.shutdown()


class Load:
    """`clients` threads posting decisions back to back until stopped; every outcome kept."""

    def __init__(self, port: int, clients: int, retry: Retry):
        self.client = Client("http://%s:%d" % (LOOPBACK, port), timeout=60, retry=retry)
        self.ok = 0
        self.failures: List[str] = []
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(clients)]
        self.lock = threading.Lock()

    def run(self, i: int) -> None:
        n = 0
        while not self.stop.is_set():
            try:
                reply = self.client.answer("client %d request %d: refund me" % (i, n), QUESTIONS)
                assert set(reply["answers"]) == set(QUESTIONS)
                with self.lock:
                    self.ok += 1
            except Exception as e:  # every kind: a lost request is a failure
                with self.lock:
                    self.failures.append(repr(e))
            n += 1

    def __enter__(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)


def test_the_replicas_spread_over_both_nodes(deployed):
    parents = set(replica_processes().values())
    assert len(parents) == 2  # two raylets: one replica on each worker node


def test_a_sigkilled_replica_loses_no_request_for_retrying_clients_and_comes_back(deployed):
    port, _ = deployed
    before = replica_processes()
    retry = Retry(attempts=4, backoff_s=0.5, statuses=(500, 502, 503, 504))  # 3 retries at most
    with Load(port, clients=4, retry=retry) as load:
        time.sleep(2.0)
        victim = sorted(before)[0]
        os.kill(victim, signal.SIGKILL)
        time.sleep(4.0)
    assert not load.failures, load.failures[:5]
    assert load.ok > 20
    wait_for("Serve to run two replicas again",
             lambda: len(replica_processes()) == 2 and victim not in replica_processes(), 90)
    wait_for("the new replica to answer", lambda: answers(port), 30)


def test_scaling_two_replicas_to_one_under_load_loses_nothing_without_retries(deployed):
    port, deploy = deployed
    wait_for("two replicas", lambda: len(replica_processes()) == 2, 90)
    with Load(port, clients=4, retry=Retry()) as load:
        time.sleep(1.0)
        deploy(1)
        wait_for("one replica", lambda: len(replica_processes()) == 1, 60)
        time.sleep(2.0)
    assert not load.failures, load.failures[:5]
    assert load.ok > 20
    deploy(2)
    wait_for("two replicas again", lambda: len(replica_processes()) == 2, 90)


def test_a_router_on_ray_answers_as_one_kime_serve_router(deployed):
    """Named checkpoints (a Router, as laya serve runs one): the same answers and texts through
    Serve's proxy as from one `kime serve` with the same --model entries."""
    from ray import serve

    import kime.ray
    from kime.serve import Settings

    port, deploy = deployed
    entries = ["english=%s" % TINY, "mine=%s" % TINY]
    # one replica: a Router's LRU order is per replica, so only one sees every request as the
    # local server does
    serve.run(kime.ray.deployment(None, replicas=1, settings=Settings(
        model=entries, log_level="warning")), name="kime", route_prefix="/", blocking=False)
    local_port = _free_port()
    local = subprocess.Popen([sys.executable, "-m", "kime.cli", "serve", "--threads", "1",
                              "--host", LOOPBACK, "--port", str(local_port), "--log-level",
                              "warning"] + [a for e in entries for a in ("--model", e)],
                             env=environ())
    try:
        wait_for("kime serve", lambda: answers(local_port), 60)
        wait_for("the Router's replicas", lambda: call(port, "GET", "/v1/models")[1] ==
                 call(local_port, "GET", "/v1/models")[1], 120)
        routed = [("POST", "/v1/systemone", json.dumps({
            "state": "refund please", "questions": QUESTIONS, "model": name}).encode(), {})
            for name in ("mine", "english", "auto", "nobody")]
        for method, path, body, headers in CASES + routed:
            want = call(local_port, method, path, body, headers)
            got = call(port, method, path, body, headers)
            assert got[:2] == want[:2], (method, path, body)
    finally:
        local.send_signal(signal.SIGTERM)
        assert local.wait(timeout=60) in (0, -signal.SIGTERM)
        deploy(2)
