"""`laya.serve` on kime (`kime.serve.laya`): `create_app(router)` takes any object with a
Router's methods, as laya serve's does, and answers through them (`kime.serve.foreign`);
`build_router()` reads laya's environment."""
from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from kime.laya.router import Router
from kime.serve import laya as laya_serve
from kime.serve.foreign import is_foreign

from ..paths import MULTILINGUAL_TINY, TINY
from ..serve.test_server import Client, _deadline, _free_port

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:kime. this checkpoint")]

QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the customer want?",
                        "criteria": {"refund": "money back", "cancel": "stop an order"}}}


class Audited:
    """A caller's wrapper around a Router: it logs and passes on, and has no add_hook, no
    acquire, no resident."""

    def __init__(self, router):
        self._router = router
        self.calls = []

    def predict(self, state, questions, **kwargs):
        self.calls.append(("predict", sorted(kwargs)))
        return self._router.predict(state, questions, **kwargs)

    def predict_batch(self, requests, **kwargs):
        self.calls.append(("predict_batch", sorted(kwargs)))
        return self._router.predict_batch(requests, **kwargs)

    def resolve(self, name):
        return self._router.resolve(name)

    @property
    def loaded(self):
        return self._router.loaded


class Served(Client):
    def __init__(self, app):
        import uvicorn

        self.port = _free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        _deadline("the server to start", lambda: self.server.started)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(30)


@pytest.fixture(scope="module")
def router():
    r = Router(models={"english": str(TINY), "multilingual": str(MULTILINGUAL_TINY),
                       "typed-decisions": str(TINY)}, device="cpu")
    yield r
    r.unload()


def test_create_app_answers_through_the_callers_router(router, monkeypatch):
    for var in ("LAYA_API_KEY", "KIME_API_KEY", "LAYA_TOURNAMENT_GROUP"):
        monkeypatch.delenv(var, raising=False)
    wrapper = Audited(router)
    assert is_foreign(wrapper) and not is_foreign(router)
    server = Served(laya_serve.create_app(wrapper))
    try:
        status, body, _ = server.post("/v1/systemone", {"state": "Please refund me",
                                                        "questions": QUESTIONS,
                                                        "model": "english", "max_len": 256},
                                      key=None)
        assert status == 200, body
        want = router.predict("Please refund me", QUESTIONS, model="english", max_len=256)
        assert body["answers"]["intent"]["probabilities"] == \
            want["answers"]["intent"]["probabilities"]
        status, batch, _ = server.post("/v1/systemone/batch", {
            "states": ["Please refund me", "Stop my order"], "questions": QUESTIONS},
            key=None)
        assert status == 200 and len(batch["results"]) == 2
        status, refused, _ = server.post("/v1/systemone", {"state": "x", "questions": QUESTIONS,
                                                           "task": "bogus"}, key=None)
        assert status == 422 and "bogus" in json.dumps(refused)
        status, health, _ = server.get("/health", key=None)
        assert status == 200 and json.loads(health)["status"] == "ok"
    finally:
        server.stop()
    assert wrapper.calls[0] == ("predict", ["max_len", "model"])
    assert wrapper.calls[1][0] == "predict_batch"


def test_settings_from_env_use_layas_host_default(monkeypatch):
    for var in ("LAYA_HOST", "KIME_HOST"):
        monkeypatch.delenv(var, raising=False)
    assert laya_serve.settings_from_env().host == "0.0.0.0"
    assert laya_serve.settings_from_env({"LAYA_HOST": "127.0.0.2"}).host == "127.0.0.2"
    with pytest.raises(SystemExit) as e:
        laya_serve.settings_from_env({"LAYA_PORT": "not-a-port"})
    assert "LAYA_PORT" in str(e.value)
