"""`kime serve` under the rest of laya serve's environment: `LAYA_TOURNAMENT_GROUP`,
`LAYA_JEV_STRICT`, `LAYA_MAX_CONCURRENT`, `LAYA_MAX_BATCH_TOKENS`, a checkpoint that cannot be
loaded, and one checkpoint (`--model DIR`) taking a body's controls as a Router does.

`tests/goldens/serve_env.json` is laya serve 0.4.15 itself (`tools/goldens_serve_env.py`): each
deployment's requests go to a real `kime serve` started from the same `LAYA_*` environment, in
a subprocess on 127.0.0.1, and its answers, refusals and `/health` must be laya serve's.
"""
from __future__ import annotations

import json
import socket
import threading
import warnings
from typing import Any, Dict, List, Optional

import pytest

try:
    import fastapi  # noqa: F401
    import prometheus_client  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip("kime serve needs its extra (pip install 'kime[serve]'): %s" % e,
                allow_module_level=True)

from hypothesis import given
from hypothesis import strategies as st

import kime
from kime.serve import Settings, create_app, load_settings
from kime.serve.limits import chunk_size

from .. import paths
from ..laya_replay import assert_same
from ..paths import GOLDENS
from .test_server import Client, _deadline, _free_port
from .test_server_router import Serve, unscrub

GOLDEN = json.loads((GOLDENS / "serve_env.json").read_text(encoding="utf-8"))
TINY = str(paths.TINY)
DEPLOYMENTS = sorted(GOLDEN["deployments"])
SINGLE_MODELS = ("convaiinnovations/laya", "Convaiinnovations/Laya", "jev-1", 123)
"""`model` values that pin no checkpoint in laya serve: one checkpoint answers them itself."""
TINY_NAMES = ("english", "typed-decisions")  # the names laya's goldens point at `tiny`


def cases(deployment: str) -> List[Dict[str, Any]]:
    return [c for c in GOLDEN["http"] if c["deployment"] == deployment]


def environment(deployment: str, tmp_path) -> Dict[str, str]:
    env = dict(unscrub(GOLDEN["deployments"][deployment]))
    if deployment == "missing":  # laya's recorder ran huggingface_hub offline, cache empty
        (tmp_path / "empty-hub").mkdir()
        env.update(HF_HUB_OFFLINE="1", HF_HUB_CACHE=str(tmp_path / "empty-hub"))
    return env


def call(srv: Client, case: Dict[str, Any]) -> Any:
    if case["method"] == "GET":
        status, data, _ = srv.get(case["path"], key=None)
        return status, json.loads(data)
    status, got, _ = srv.post(case["path"], unscrub(case["body"]), key=None)
    return status, got


def compare(got: Any, status: int, case: Dict[str, Any], drop_routing: bool = False) -> None:
    want = unscrub(case["response"])
    if status != 200:  # kime adds `problems` to a validation 422; `detail` is laya's
        got = {"detail": got["detail"]}
    if drop_routing:
        got, want = _without_routing(got), _without_routing(want)
    assert_same(got, want, case["id"])


def _without_routing(value: Any) -> Any:
    if isinstance(value, dict) and "results" in value:
        return dict(value, results=[_without_routing(r) for r in value["results"]])
    if isinstance(value, dict):
        return {k: v for k, v in value.items() if k != "routing"}
    return value


# --- a Router, as laya serve runs one -----------------------------------------------------------

@pytest.mark.slow  # starts kime serve with three checkpoints
@pytest.mark.parametrize("deployment", DEPLOYMENTS)
def test_goldens_laya_serve_environment(tmp_path, deployment):
    """Every recorded request, in order, against `kime serve` started from the deployment's
    `LAYA_*` environment: the tournament's answers (`x_tournament`, every option in criteria
    order, eliminated ones at 0.0, `input_tokens` over every round), the strict projection, the
    raised cap and its refusals, and `/health` after them. Where laya serve answers a
    checkpoint it cannot load with `500 inference failed`, kime answers 503 naming it."""
    srv = Serve(tmp_path, env=environment(deployment, tmp_path), keys=False)
    try:
        for case in cases(deployment):
            status, got = call(srv, case)
            if case["status"] == 500:
                name = "custom" if case["body"].get("model") == "custom" else "typed-decisions"
                assert status == 503, (case["id"], got)
                assert got["detail"].startswith(
                    "checkpoint %r cannot be loaded on this server (ModelNotFound)" % name), got
                continue
            assert status == case["status"], (case["id"], got)
            compare(got, status, case)
    finally:
        srv.stop()


# --- one checkpoint, asked as a Router is asked -------------------------------------------------

def _single(case: Dict[str, Any]) -> bool:
    """A recorded request one `tiny` checkpoint can answer as laya serve did: no task, no model
    that pins, and every answer laya gave came from a name pointing at `tiny` (under the strict
    contract, which drops `routing`: every state is ASCII, which laya routes to English)."""
    body = case["body"] or {}
    if case["method"] != "POST" or "task" in body:
        return False
    if "model" in body and body["model"] not in SINGLE_MODELS:
        return False
    response = case["response"]
    results = response.get("results") if "results" in response else [response]
    routed = [r.get("routing") for r in results if isinstance(r, dict)]
    if any(r is None for r in routed):  # the strict contract drops `routing`: English only
        states = body.get("states", [body.get("state")])
        return all(json.dumps(state, ensure_ascii=False).isascii() for state in states)
    return all(r.get("model") in TINY_NAMES for r in routed)


@pytest.mark.slow  # starts kime serve
@pytest.mark.parametrize("deployment", [d for d in DEPLOYMENTS if d != "missing"])
def test_one_checkpoint_answers_as_laya_serve_does(tmp_path, deployment):
    """`kime serve --model tiny` under the same environment: every request laya serve's Router
    answered from `tiny` (the bundle id, a Jev id, `lang`, `min_confidence` and their
    refusals, the tournament, the strict projection) gets laya's answer, less `routing`;
    `/health` carries laya's fields for the one checkpoint."""
    env = environment(deployment, tmp_path)
    env.pop("LAYA_EXTRA_MODELS")
    srv = Serve(tmp_path, "--model", TINY, env=env, keys=False)
    try:
        compared = 0
        for case in filter(_single, cases(deployment)):
            status, got = call(srv, case)
            assert status == case["status"], (case["id"], got)
            compare(got, status, case, drop_routing=True)
            compared += 1
        assert compared >= 3
        health = json.loads(srv.get("/health", key=None)[1])
        laya_health = next((c["response"] for c in cases(deployment) if c["path"] == "/health"),
                           None)
        if laya_health is not None:
            assert [k for k in health if k != "model"] == list(laya_health)
            for key in ("revisions", "checkpoint_devices", "cpu_fallbacks"):
                assert health[key] == {TINY: laya_health[key]["english"]}, key
            assert (health["loaded"], health["device"], health["device_is_preference"]) == (
                [TINY], laya_health["device"], False)
    finally:
        srv.stop()


# --- LAYA_CPU_AMP -------------------------------------------------------------------------------

@pytest.mark.slow  # starts kime serve
def test_laya_cpu_amp_reaches_the_served_model_as_it_reaches_laya_load(tmp_path, monkeypatch):
    """`LAYA_CPU_AMP=bf16` (Laya's CPU autocast) reaches what kime serve loads as it reaches
    `laya.load`: `bf16` where kime has BF16 kernels, else FP32 and the warning in the server's
    log. The answers are the Python API's under the same environment, to the bit."""
    from kime.factory import bf16_missing

    body = {"state": "The app crashes every time I open my invoices, please refund me",
            "questions": {"team": {"type": "choice", "instructions": "Which team?",
                                   "criteria": {"billing": "invoices", "tech": "crashes"}},
                          "refund": {"type": "noul", "instructions": "Asks for a refund?"}}}
    srv = Serve(tmp_path, "--model", TINY, env={"LAYA_CPU_AMP": "bf16"}, keys=False)
    try:
        status, got, _ = srv.post("/v1/systemone", body, key=None)
    finally:
        srv.stop()
    log = srv.proc.stdout.read().decode()
    assert status == 200, got
    monkeypatch.setenv("LAYA_CPU_AMP", "bf16")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agent = kime.load(TINY, device="cpu", threads=1)
    want = agent.predict(body["state"], body["questions"])["answers"]
    # laya serve's answers add their `x_*` extensions to the Python API's
    assert {q: {k: v for k, v in a.items() if not k.startswith("x_")}
            for q, a in got["answers"].items()} == want
    assert ("LAYA_CPU_AMP=bf16: kime has no BF16 kernels on this CPU" in log) == (
        bf16_missing() is not None), log[-2000:]


# --- LAYA_MAX_CONCURRENT ------------------------------------------------------------------------

@pytest.mark.slow  # starts kime serve
def test_max_concurrent_is_the_admission_cap(tmp_path):
    """`LAYA_MAX_CONCURRENT=1`: while one request's body is still arriving, the next is laya
    serve's 503 with `Retry-After: 1`; once that client is gone, it is answered."""
    busy = GOLDEN["busy"]
    srv = Serve(tmp_path, env=unscrub(busy["env"]), keys=False)
    try:
        ready = json.loads(srv.get("/ready", key=None)[1])
        assert ready["max_queue"] == 1
        body = json.dumps({"state": busy_state(), "questions": busy_questions()}).encode()
        stalled = socket.create_connection(("127.0.0.1", srv.port))
        stalled.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: "
                        b"application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                        + body[:10])
        _deadline("the stalled request to be admitted",
                  lambda: json.loads(srv.get("/ready", key=None)[1])["in_flight"] == 1)
        status, got, headers = srv.post("/v1/systemone", raw=body, key=None)
        want = busy["while_busy"]
        assert (status, got, headers["retry-after"]) == (want["status"], want["response"],
                                                        want["retry_after"])
        stalled.close()
        _deadline("the stalled request to go",
                  lambda: json.loads(srv.get("/ready", key=None)[1])["in_flight"] == 0)
        status, got, _ = srv.post("/v1/systemone", raw=body, key=None)
        assert status == busy["after"]["status"]
        assert_same(got, unscrub(busy["after"]["response"]), "after")
    finally:
        srv.stop()


def busy_state() -> str:
    return "I was charged twice for my subscription this month, please refund the duplicate " \
           "payment."


def busy_questions() -> Dict[str, Any]:
    return {
        "intent": {"type": "choice", "instructions": "What does the customer want?",
                   "criteria": {"refund": "money back", "information": "an answer",
                                "cancel": "stop an order"}},
        "urgency": {"type": "score", "instructions": "How urgent is this message?",
                    "criteria": ["not urgent", "low", "medium", "high"]},
        "angry": {"type": "noul", "instructions": "The customer is angry."},
    }


# --- the variables' readings and the batch chunks -----------------------------------------------

KIME_DEFAULTS = {"LAYA_MAX_CONCURRENT": ("max_queue", 256),
                 "LAYA_MAX_BATCH_TOKENS": ("max_batch_tokens", None)}
FIELDS = {"LAYA_TOURNAMENT_GROUP": "tournament_group", "LAYA_MAX_CONCURRENT": "max_queue",
          "LAYA_MAX_BATCH_TOKENS": "max_batch_tokens", "LAYA_JEV_STRICT": "jev_strict"}


def test_readings_are_laya_serves():
    """Each value of the four variables means what it means to laya serve. The exceptions are
    a blank `LAYA_MAX_CONCURRENT` or `LAYA_MAX_BATCH_TOKENS`: kime reads every blank variable
    as unset, which leaves kime's own defaults (`--max-queue` 256; batches not chunked)."""
    compared = 0
    for case in GOLDEN["readings"]:
        if case["variable"] in KIME_DEFAULTS and not case["value"].strip():
            settings = load_settings({}, environ={case["variable"]: case["value"]})
            field, default = KIME_DEFAULTS[case["variable"]]
            assert getattr(settings, field) == default
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            settings = load_settings({}, environ={case["variable"]: case["value"]})
        assert getattr(settings, FIELDS[case["variable"]]) == case["reading"], case
        compared += 1
    assert compared >= 34


def test_kime_variables_and_flags_come_first():
    """`KIME_MAX_QUEUE` (or the flag) is the cap; `LAYA_MAX_CONCURRENT` sets it only when
    neither is given. The other three read the same through their KIME_ names and flags."""
    env = {"LAYA_MAX_CONCURRENT": "3", "KIME_MAX_QUEUE": "9"}
    assert load_settings({}, environ=env).max_queue == 9
    assert load_settings({"max_queue": "5"}, environ={"LAYA_MAX_CONCURRENT": "3"}).max_queue == 5
    assert load_settings({}, environ={"LAYA_MAX_CONCURRENT": "3"}).max_queue == 3
    s = load_settings({"tournament_group": "12", "jev_strict": "1", "max_batch_tokens": "4096"},
                      environ={"LAYA_TOURNAMENT_GROUP": "4"})
    assert (s.tournament_group, s.jev_strict, s.max_batch_tokens) == (12, True, 4096)


def test_chunk_sizes_are_laya_serves():
    for case in GOLDEN["chunks"]:
        got = chunk_size(case["states"], case["questions"], case["max_len"],
                         case["max_batch_tokens"])
        assert got == case["batch_size"], case


@given(st.integers(0, 64), st.integers(0, 64), st.one_of(st.none(), st.integers(-2, 9000)),
       st.integers(1, 300000))
def test_a_chunk_never_holds_more_than_the_budget_unless_one_state_does(states, questions,
                                                                        max_len, budget):
    size = chunk_size(states, questions, max_len, budget)
    width = max_len if max_len and max_len > 0 else 512
    if size is None:
        assert states * questions * width <= budget or not states or not questions
    else:
        assert 1 <= size <= states
        assert size == 1 or size * questions * width <= budget


def test_a_batch_is_answered_in_chunks_of_max_batch_tokens():
    """With `max_batch_tokens` set, a batch over it runs one forward pass per chunk of states
    (here one state each); unset, the batch is one call. The answers are the same."""
    import uvicorn

    states = ["state number %d about a refund" % i for i in range(5)]
    questions = busy_questions()
    answers: Dict[Optional[int], Any] = {}
    for budget in (None, 131072, 1000):
        engine = kime.Kime(TINY, device="cpu", threads=1, answer_cache=0)
        port = _free_port()
        app = create_app(engine, Settings(model=TINY, max_batch_tokens=budget))
        server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port,
                                               log_level="warning"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        _deadline("the in-process server", lambda: server.started)
        client = Client()
        client.port = port
        try:
            runs = engine.scheduler.runs
            status, body, _ = client.post("/v1/systemone/batch",
                                          {"states": states, "questions": questions}, key=None)
            assert status == 200, body
            answers[budget] = body
            assert engine.scheduler.runs - runs == (len(states) if budget == 1000 else 1)
        finally:
            server.should_exit = True
            thread.join(30)
    assert answers[1000] == answers[131072] == answers[None]


# --- a checkpoint that cannot be loaded ---------------------------------------------------------

@pytest.mark.slow  # starts kime serve
def test_a_checkpoint_that_cannot_load_is_named_and_the_rest_answer(tmp_path):
    """A request routed to a checkpoint missing from an offline cache is a 503 naming it, the
    log has the cause, the loaded checkpoints keep answering, and `/health` is unchanged."""
    env = environment("missing", tmp_path)
    srv = Serve(tmp_path, env=env, keys=False)
    try:
        body = {"state": busy_state(), "questions": busy_questions()}
        before = json.loads(srv.get("/health", key=None)[1])
        for extra in ({"task": "typed-decisions"}, {"model": "typed"}, {"model": "custom"}):
            status, got, _ = srv.post("/v1/systemone", dict(body, **extra), key=None)
            assert status == 503 and "cannot be loaded on this server" in got["detail"], got
        status, got, _ = srv.post("/v1/systemone/batch",
                                  {"states": [busy_state()], "questions": busy_questions(),
                                   "task": "typed-decisions"}, key=None)
        assert status == 503 and got["detail"].startswith("checkpoint 'typed-decisions'")
        status, got, _ = srv.post("/v1/systemone", body, key=None)
        assert status == 200 and got["routing"]["model"] == "english"
        after = json.loads(srv.get("/health", key=None)[1])
        assert sorted(after["loaded"]) == sorted(before["loaded"]) == ["english",
                                                                       "multilingual"]
    finally:
        log = _drain(srv)
    assert "checkpoint 'typed-decisions' could not be loaded: ModelNotFound" in log
    assert "HF_HUB_OFFLINE" in log


def _drain(srv: Serve) -> str:
    srv.stop()
    out: Optional[bytes] = srv.proc.stdout.read() if srv.proc.stdout else b""
    return (out or b"").decode("utf-8", "replace")

