"""A Laya user's script runs unchanged on kime.

`SCRIPT` is what a support team writes against laya 0.4.15: it cleans an inbound email and builds
its state, reads the email and triage presets (through `laya.presets` and `laya.email` too),
answers a 30-intent choice by shortlist and by tournament, embeds with the agent's encoder, and
asks the intent again under `OptionStabilityHook`. It runs in a fresh interpreter where `laya`
is a two-line shim for `import kime as laya` (the package and Laya's seven submodule paths), so
`import laya`, `from laya import ...` and `from laya.hooks import ...` all reach kime. Where this
checkout has the oracle environment (`.oracle`, laya with torch), the same text runs under the
real laya too and both print the same summary.
"""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict

import pytest

from ..paths import ORACLE, ROOT, TINY

SCRIPT = r'''
"""Triage a support inbox with Laya: clean the email, ask the presets, narrow 30 intents."""
import json
import sys
import zlib

import numpy as np

import laya
from laya import OptionStabilityHook, predict_shortlist, predict_tournament
from laya.email import clean_email_body, email_state
from laya.hooks import OptionStabilityHook as HookAtItsPath
from laya.presets import email_questions, state_field, triage_questions

RAW = """Hi team,

I was charged twice for order 1234, please refund the duplicate charge.
It is urgent: my card is at its limit.

Thanks,
Ana

On Mon, Jan 8, 2024 at 9:12 AM Support <support@example.com> wrote:
> Your order has shipped.
> Kind regards

This e-mail is confidential and intended solely for the addressee.
"""

INTENTS = {
    "refund": "money back for an order", "duplicate_charge": "charged twice for one purchase",
    "card_declined": "a payment card was refused", "lost_card": "a card was lost or stolen",
    "change_pin": "set a new PIN", "top_up_failed": "adding money did not work",
    "exchange_rate": "the rate of a currency conversion", "transfer_pending": "a transfer waits",
    "transfer_failed": "a transfer did not arrive", "cancel_transfer": "stop a transfer",
    "order_status": "where an order is", "delivery_late": "an order arrives late",
    "wrong_item": "received the wrong item", "damaged_item": "the item arrived broken",
    "return_item": "send an item back", "invoice_copy": "a copy of an invoice",
    "update_address": "change the delivery address", "close_account": "close the account",
    "open_account": "open a new account", "verify_identity": "prove who I am",
    "password_reset": "cannot log in", "two_factor": "problems with the login code",
    "fees": "why a fee was charged", "interest_rate": "the rate on savings",
    "loan_request": "borrow money", "statement": "an account statement",
    "fraud_report": "a payment I did not make", "contact_human": "talk to a person",
    "feedback": "praise or complaints about the service", "other": "anything else",
}
WIDE = {"intent": {"type": "choice", "instructions": "What does the customer want in `body`?",
                   "criteria": INTENTS}}


def words_embedder(texts):
    """A deterministic bag-of-words embedder: each word hashed into 64 buckets."""
    out = np.zeros((len(texts), 64), dtype=np.float32)
    for row, text in enumerate(texts):
        for word in (text or "").lower().replace(":", " ").replace("_", " ").split():
            out[row, zlib.crc32(word.encode("utf-8")) % 64] += 1.0
    return out


def main(checkpoint):
    agent = laya.load(checkpoint, device="cpu")
    out = {}

    state = email_state("Double charge on order 1234", RAW, sender="ana@example.com",
                        thread_id=None)
    assert state["body"] == clean_email_body(RAW)
    out["state"] = state
    questions = email_questions()
    out["reads"] = state_field(questions)
    answered = agent.predict(state, questions)
    out["email_answers"] = sorted(answered["answers"])
    out["is_spam"] = round(answered["answers"]["is_spam"]["noul"], 3)

    short = predict_shortlist(agent, state, WIDE, embed_fn=words_embedder, k=6)
    out["shortlist"] = short["shortlist"]["intent"]["labels"]
    out["shortlist_choice"] = short["answers"]["intent"]["choice"]
    by_name = laya.shortlist_choice(state, INTENTS, words_embedder, k=3,
                                    instructions=WIDE["intent"]["instructions"])
    out["top3"] = list(by_name)

    tour = predict_tournament(agent, state, WIDE, group_size=8)
    out["tournament_rounds"] = tour["tournament"]["intent"]["rounds"]
    out["tournament_choice"] = tour["answers"]["intent"]["choice"]

    embed = laya.cached_embed_fn(laya.embed_fn_from_agent(agent, max_length=128, batch_size=8))
    vectors = np.asarray(embed(["refund please", "where is my order", "refund please"]))
    out["embedding_shape"] = list(vectors.shape)
    assert np.allclose(vectors[0], vectors[2])

    assert HookAtItsPath is OptionStabilityHook and laya.hooks.OptionStabilityHook is HookAtItsPath
    hook = OptionStabilityHook(accept=0.8, escalate=0.4, n_shuffles=2, seed="inbox")
    intent = {"intent": triage_questions()["intent"]}
    stable = agent.predict(state, intent, hooks=[hook])
    reliability = stable["answers"]["intent"]["reliability"]
    out["reliability"] = {key: reliability[key] for key in ("probes", "n_variants", "decision")}
    out["soft_stability"] = round(reliability["soft_stability"], 3)
    out["qtypes"] = laya.QTYPE_NAMES[laya.QTYPES["noul"]]
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    main(sys.argv[1])
'''

SHIM = '''"""`import laya` is `import kime as laya`: the package and Laya's submodule paths."""
import importlib
import sys

import kime

for _name in ("presets", "email", "router", "hooks", "confidence", "structured", "lang"):
    sys.modules["laya." + _name] = importlib.import_module("kime." + _name)
sys.modules["laya"] = kime
'''


def run_script(python: str, tmp_path: Path, shim: bool) -> Dict[str, Any]:
    script = tmp_path / "inbox.py"
    script.write_text(SCRIPT, encoding="utf-8")
    path = [str(ROOT)]
    if shim:
        (tmp_path / "shim").mkdir(exist_ok=True)
        (tmp_path / "shim" / "laya.py").write_text(SHIM, encoding="utf-8")
        path.insert(0, str(tmp_path / "shim"))
    env = {"PYTHONPATH": ":".join(path), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "USE_TF": "0"}
    done = subprocess.run([python, str(script), str(TINY)], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(tmp_path))
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # more than a second and a half (CONTRIBUTING.md's fast tier)
def test_a_laya_script_runs_unchanged_as_import_kime_as_laya(tmp_path):
    out = run_script(sys.executable, tmp_path, shim=True)
    assert out["state"]["body"].startswith("Hi team,") and "wrote:" not in out["state"]["body"]
    assert "confidential" not in out["state"]["body"] and "thread_id" not in out["state"]
    assert out["reads"] == "body"
    assert out["email_answers"] == ["category", "is_phishing", "is_spam", "needs_reply",
                                    "urgency"]
    assert len(out["shortlist"]) == 6 and out["shortlist_choice"] in out["shortlist"]
    assert out["tournament_rounds"] >= 1
    assert out["embedding_shape"][0] == 3
    assert out["reliability"]["n_variants"] > 1
    assert out["qtypes"] == "noul"


def _close(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, float):
        return isinstance(ours, float) and math.isclose(ours, theirs, abs_tol=2e-3)
    if isinstance(theirs, dict):
        return isinstance(ours, dict) and list(ours) == list(theirs) and all(
            _close(ours[k], theirs[k]) for k in theirs)
    if isinstance(theirs, list):
        return isinstance(ours, list) and len(ours) == len(theirs) and all(
            _close(a, b) for a, b in zip(ours, theirs))
    return bool(ours == theirs)


@pytest.mark.slow
@pytest.mark.skipif(not ORACLE.exists(), reason="no oracle environment (.oracle with laya) here")
def test_the_same_script_under_the_real_laya_prints_the_same(tmp_path):
    ours = run_script(sys.executable, tmp_path, shim=True)
    theirs = run_script(str(ORACLE), tmp_path, shim=False)
    assert _close(ours, theirs), (ours, theirs)
