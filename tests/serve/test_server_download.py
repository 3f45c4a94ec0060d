"""`kime serve` loads as `kime.load` does: a checkpoint missing from the Hugging Face cache is
downloaded at start, with huggingface_hub's progress bars, as `laya serve` does; with
HF_HUB_OFFLINE=1 a miss is the clear error it always was.

The Hub is `tests.hub_mirror`, a real HTTP server on loopback that huggingface_hub is pointed
at with HF_ENDPOINT: the download is huggingface_hub's own, into a fresh cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import pytest

try:
    import fastapi  # noqa: F401
    import uvicorn  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    pytest.skip("kime serve needs its extra (pip install 'kime[serve]'): %s" % e,
                allow_module_level=True)

from ..hub_mirror import COMMIT, HubMirror
from .test_server import ROOT
from .test_server_router import Serve

pytestmark = pytest.mark.slow  # starts kime serve processes


@pytest.fixture
def mirror():
    hub = HubMirror()
    yield hub
    hub.stop()


def hub_env(tmp_path: Path, mirror: HubMirror, **extra: str) -> Dict[str, str]:
    return dict({"HF_ENDPOINT": mirror.endpoint, "HF_HUB_CACHE": str(tmp_path / "cache"),
                 "HF_HUB_OFFLINE": "0"}, **extra)


def _output(srv: Serve) -> str:
    srv.stop()
    return srv.proc.stdout.read().decode("utf-8", "replace") if srv.proc.stdout else ""


def test_one_checkpoint_is_downloaded_with_progress_bars(tmp_path, mirror):
    srv = Serve(tmp_path, "--model", "laya", env=hub_env(tmp_path, mirror), keys=False)
    try:
        health = json.loads(srv.get("/health", key=None)[1])
        assert health["loaded"] == ["laya"] and health["revisions"] == {"laya": COMMIT}
        status, body, _ = srv.post("/v1/systemone", {"state": "refund me", "questions": {
            "refund": {"type": "noul", "instructions": "A refund is asked for."}}}, key=None)
        assert status == 200 and 0.0 <= body["answers"]["refund"]["noul"] <= 1.0
    finally:
        log = _output(srv)
    assert sorted(mirror.downloaded()) == [
        "encoder/config.json", "model.safetensors", "rl_agent_config.json",
        "tokenizer/special_tokens_map.json", "tokenizer/tokenizer.json",
        "tokenizer/tokenizer_config.json"]  # the root checkpoint's files, no sibling's
    assert "Fetching 6 files" in log and "100%" in log, log
    snapshot = tmp_path / "cache" / "models--convaiinnovations--laya" / "snapshots" / COMMIT
    assert (snapshot / "rl_agent_config.json").is_file()


def test_the_router_downloads_laya_s_three(tmp_path, mirror):
    srv = Serve(tmp_path, env=hub_env(tmp_path, mirror), keys=False)
    try:
        health = json.loads(srv.get("/health", key=None)[1])
        assert sorted(health["loaded"]) == ["english", "multilingual", "typed-decisions"]
        assert set(health["revisions"].values()) == {COMMIT}
    finally:
        log = _output(srv)
    # a file whose blob the cache already holds (typed-decisions is the tiny checkpoint, as the
    # root is) is only asked about, not fetched again
    asked = [path for method, path in mirror.requests if method == "HEAD"]
    snapshot = tmp_path / "cache" / "models--convaiinnovations--laya" / "snapshots" / COMMIT
    for prefix in ("", "multilingual/", "typed-decisions/"):
        assert any(path.endswith("/" + prefix + "model.safetensors") for path in asked), prefix
        assert (snapshot / prefix / "model.safetensors").is_file()
    assert "multilingual/model.safetensors" in mirror.downloaded()
    assert log.count("Fetching 6 files:   0%") == 3, log  # one bar per checkpoint


def test_offline_a_missing_checkpoint_is_the_clear_error(tmp_path, mirror):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIME_", "LAYA_"))}
    env.update(hub_env(tmp_path, mirror, HF_HUB_OFFLINE="1"))
    done = subprocess.run([sys.executable, "-m", "kime.cli", "serve", "--model", "laya",
                           "--device", "cpu", "--port", "0"], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done
    assert "model 'convaiinnovations/laya' (root of Hugging Face repo convaiinnovations/laya) " \
           "is not in the Hugging Face cache at %s" % (tmp_path / "cache") in done.stderr
    assert "HF_HUB_OFFLINE is set, so nothing is downloaded" in done.stderr
    assert mirror.requests == []
