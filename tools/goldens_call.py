"""Record what Laya 0.4.15 decides where kime's three copies of the routed-batch logic used to
disagree (issue 22): `tests/goldens/call.json`. Run ONLY with the oracle environment (the real
laya and torch, with fastapi and httpx for laya serve's app), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_call.py

Two questions, each recorded on a Router whose `english` and `typed-decisions` are the committed
`tiny` checkpoint and whose `multilingual` is `multilingual-tiny` (nothing is downloaded):

- `batch_groups`: whether `Router.predict_batch` splits a checkpoint's requests by language.
  The same requests (pinned and routed, with and without `lang`) are answered by a Router whose
  agents have `lang_temperatures` and by one whose agents have none. Recorded: the results,
  `diagnostics["sort_by_length"]` (how many shared group calls ran, and their sizes) and the
  events a Router hook saw.
- `serve_hooks`: whether a Router's own hooks fire on a request laya serve answers. laya serve's
  app (`laya.serve.create_app(router=...)`) over a Router with a recording hook, driven with
  starlette's TestClient: `POST /v1/systemone` and `POST /v1/systemone/batch`. Recorded: each
  status and response, and the events the hook saw.

A hook event is `[event, ctx.model, len(ctx.states), routed model, number of results]`, in the
order the hooks ran. Checkpoint directories are written `<tiny>` and `<ml>`.
"""
from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "call.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "info": "a question",
                            "complaint": "unhappy"}},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "soon", "now"]},
    "human": {"type": "noul", "instructions": "Does this need a person?"},
}
EN = "I was charged twice for my order and I want my money back today."
DE = "Ich wurde zweimal belastet und möchte mein Geld heute zurück."
FR = "J'ai été débité deux fois et je veux être remboursé aujourd'hui."

LANG_TEMPERATURES = {"de": {"temperature": [1.3, 0.9, 2.2]},
                     "fr": {"temperature": [0.7, 1.6, 1.1]}}

BATCH_REQUESTS: List[Dict[str, Any]] = [
    {"state": EN, "questions": QUESTIONS, "model": "english", "lang": "de"},
    {"state": EN, "questions": QUESTIONS, "model": "english", "lang": "fr"},
    {"state": EN, "questions": QUESTIONS, "model": "english"},
    {"state": DE, "questions": QUESTIONS, "model": "english", "lang": "de"},
    {"state": FR, "questions": QUESTIONS, "model": "english", "max_len": 96},
    {"state": DE, "questions": QUESTIONS},
    {"state": FR, "questions": QUESTIONS},
    {"state": EN, "questions": QUESTIONS, "lang": "fr"},
]
"""Pinned and routed requests, with and without a language: the grouping rule decides how many
shared calls they take."""

SERVE_CALLS: List[Dict[str, Any]] = [
    {"path": "/v1/systemone", "body": {"state": EN, "questions": QUESTIONS}},
    {"path": "/v1/systemone", "body": {"state": DE, "questions": QUESTIONS, "lang": "de"}},
    {"path": "/v1/systemone/batch", "body": {"states": [EN, DE, FR, EN],
                                             "questions": QUESTIONS}},
    {"path": "/v1/systemone/batch", "body": {"states": [DE, EN], "questions": QUESTIONS,
                                             "model": "english", "min_confidence": 0.9}},
]


class Recorder:
    """A Router hook that writes down every call event it sees (the same class in the oracle
    and in kime's test: hooks are found by method name)."""

    def __init__(self) -> None:
        self.events: List[List[Any]] = []

    def _note(self, event: str, ctx: Any) -> None:
        self.events.append([event, ctx.model, len(ctx.states or []),
                            (ctx.decision or {}).get("model"), len(ctx.results or [])])

    def on_predict_start(self, ctx: Any) -> None:
        self._note("start", ctx)

    def on_predict_end(self, ctx: Any) -> None:
        self._note("end", ctx)

    def on_error(self, ctx: Any) -> None:
        self._note("error", ctx)


def scrub(value: Any) -> Any:
    """Checkpoint paths as `<tiny>` / `<ml>`, so the file does not depend on the checkout."""
    text = json.dumps(value, ensure_ascii=False).replace(ML, "<ml>").replace(TINY, "<tiny>")
    return json.loads(text)


def record_batch_groups(laya: Any) -> List[Dict[str, Any]]:
    out = []
    for name, agent_kwargs in (("plain", None), ("lang_temperatures",
                                                 {"lang_temperatures": LANG_TEMPERATURES})):
        recorder = Recorder()
        router = laya.Router(models=MODELS, device="cpu", agent_kwargs=agent_kwargs,
                             hooks=[recorder])
        diagnostics: Dict[str, Any] = {}
        results = router.predict_batch(BATCH_REQUESTS, sort_by_length=True,
                                       diagnostics=diagnostics)
        out.append({"id": "batch_groups_" + name, "agent_kwargs": agent_kwargs,
                    "requests": BATCH_REQUESTS, "results": scrub(results),
                    "diagnostics": diagnostics, "events": recorder.events})
    return out


def record_serve_hooks(laya_serve: Any, laya: Any) -> Dict[str, Any]:
    from fastapi.testclient import TestClient

    recorder = Recorder()
    router = laya.Router(models=MODELS, device="cpu", hooks=[recorder])
    calls = []
    with TestClient(laya_serve.create_app(router=router)) as client:
        for call in SERVE_CALLS:
            before = len(recorder.events)
            response = client.post(call["path"], json=call["body"])
            calls.append({**call, "status": response.status_code,
                          "response": scrub(response.json()),
                          "events": recorder.events[before:]})
    return {"id": "serve_hooks", "calls": calls}


def main() -> int:
    for key in [k for k in os.environ if k.startswith("LAYA_")]:
        del os.environ[key]  # laya serve reads its deployment from the environment
    import laya
    import laya.serve

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data = {"laya_version": laya.__version__, "batch_groups": record_batch_groups(laya),
                "serve_hooks": record_serve_hooks(laya.serve, laya)}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote", OUT.relative_to(ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())
