"""`kime decide --model laya` loads as `kime.load` does: a checkpoint missing from the Hugging
Face cache is downloaded with huggingface_hub's progress bars, and used from the cache after
(offline too); with HF_HUB_OFFLINE=1 a miss is the clear error naming the cache and the fix.

The Hub is `tests.hub_mirror`, a real HTTP server on loopback that huggingface_hub is pointed
at with HF_ENDPOINT: the download is huggingface_hub's own, into a fresh cache.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Tuple

import pytest

from ..hub_mirror import COMMIT, HubMirror
from ..paths import ROOT

pytestmark = pytest.mark.slow  # kime processes that load a checkpoint

QUESTIONS = {"refund": {"type": "noul", "instructions": "A refund is asked for."}}


@pytest.fixture
def mirror():
    hub = HubMirror()
    yield hub
    hub.stop()


def decide(tmp_path: Path, mirror: HubMirror, offline: bool, *model: str
           ) -> Tuple[int, str, str]:
    questions = tmp_path / "questions.json"
    questions.write_text(json.dumps(QUESTIONS))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIME_", "LAYA_", "HF_"))}
    env.update(HF_ENDPOINT=mirror.endpoint, HF_HUB_CACHE=str(tmp_path / "cache"),
               HF_HUB_OFFLINE="1" if offline else "0")
    done = subprocess.run([sys.executable, "-m", "kime.cli", "decide", "--device", "cpu",
                           "--threads", "1", "-q", str(questions), "-s", "please refund me",
                           "--compact", *model], cwd=str(ROOT), env=env, capture_output=True,
                          text=True, timeout=300)
    return done.returncode, done.stdout, done.stderr


def test_decide_downloads_then_answers_from_the_cache(tmp_path, mirror):
    code, out, err = decide(tmp_path, mirror, False, "--model", "laya")
    assert code == 0, err
    first = json.loads(out)
    assert 0.0 <= first["answers"]["refund"]["noul"] <= 1.0
    assert "Fetching 6 files:   0%" in err and "100%" in err, err
    assert "model.safetensors" in mirror.downloaded()
    snapshot = tmp_path / "cache" / "models--convaiinnovations--laya" / "snapshots" / COMMIT
    assert (snapshot / "model.safetensors").is_file()
    asked = len(mirror.requests)
    code, out, err = decide(tmp_path, mirror, True, "--model", "laya")
    assert code == 0, err
    assert json.loads(out) == first and len(mirror.requests) == asked  # the cache, no Hub
    assert "Fetching" not in err


def test_decide_auto_downloads_the_checkpoint_it_routes_to(tmp_path, mirror):
    code, out, err = decide(tmp_path, mirror, False, "--model", "auto", "--lang", "de")
    assert code == 0, err
    assert json.loads(out)["routing"]["model"] == "multilingual"
    assert "multilingual/model.safetensors" in mirror.downloaded()
    assert "Fetching 6 files:   0%" in err


def test_decide_offline_names_the_cache_and_the_fix(tmp_path, mirror):
    code, out, err = decide(tmp_path, mirror, True, "--model", "laya")
    assert (code, out) == (3, "")
    assert "is not in the Hugging Face cache at %s: no snapshot of it there" % (
        tmp_path / "cache") in err
    assert "HF_HUB_OFFLINE is set, so nothing is downloaded: unset it, or run `kime pull" in err
    assert mirror.requests == []
