"""Record laya serve 0.4.15's answers under the rest of its environment into
`tests/goldens/serve_env.json`: `LAYA_TOURNAMENT_GROUP`, `LAYA_JEV_STRICT`,
`LAYA_MAX_CONCURRENT`, `LAYA_MAX_BATCH_TOKENS`, and a checkpoint that cannot be loaded (issue 23,
item 6). Run it ONLY with the oracle environment, like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_serve_env.py

Nothing here touches the network: huggingface_hub runs offline over an empty cache, and the
published checkpoint names are re-pointed at the committed test checkpoints through
`LAYA_EXTRA_MODELS` (`english` and `typed-decisions` -> `tiny`, `multilingual` ->
`multilingual-tiny`), as `tools/goldens_serve.py` does. Each deployment's app is built from its
environment, as laya serve builds it.

The file holds:

- `deployments`: name -> its `LAYA_*` environment (paths written `<tiny>`, `<ml>`).
- `http`: {"id", "deployment", "method", "path", "body", "status", "response"}, through
  starlette's TestClient, in order.
- `busy`: laya serve under uvicorn on loopback with `LAYA_MAX_CONCURRENT=1`: a request while
  another one's body is still arriving, then one after it is gone ({"status", "response",
  "retry_after"} each).
- `readings`: {"variable", "value", "reading"}: what laya serve makes of each value of the four
  variables (`_resolve_tournament_group`, `_resolve_max_concurrent`,
  `_resolve_max_batch_tokens`, `_env_bool`).
- `chunks`: {"max_batch_tokens", "states", "questions", "max_len", "batch_size"}: the states
  per forward pass `_batch_chunk_size` gives a batch (None: one pass).
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "serve_env.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MISSING = "/nonexistent/laya-checkpoint"

# Before huggingface_hub is imported: it reads both once.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_HUB_CACHE"] = tempfile.mkdtemp(prefix="laya-empty-hub-")

import httpx  # noqa: E402
import laya  # noqa: E402
import laya.serve  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

THREE = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
DEPLOYMENTS: Dict[str, Dict[str, str]] = {
    "three": {"LAYA_EXTRA_MODELS": json.dumps(THREE)},
    "tournament": {"LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_TOURNAMENT_GROUP": "8"},
    "tournament_strict": {"LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_TOURNAMENT_GROUP": "16",
                          "LAYA_JEV_STRICT": "1", "LAYA_MAX_BATCH_TOKENS": "1000"},
    "strict": {"LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_JEV_STRICT": "yes"},
    "off": {"LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_TOURNAMENT_GROUP": "101"},
    # typed-decisions left at its Hub source, which the empty offline cache does not hold, and a
    # checkpoint of the deployment's own at a directory that does not exist
    "missing": {"LAYA_EXTRA_MODELS": json.dumps({"english": TINY, "multilingual": ML,
                                                  "custom": MISSING}),
                "LAYA_MODELS": "english,multilingual"},
}

ENGLISH = "I was charged twice for my subscription this month, please refund the duplicate payment."
GERMAN = ("Guten Morgen! Die Lieferung ist leider beschädigt angekommen, und ich möchte das Paket "
          "zurückgeben. Könnten Sie mir bitte die Rechnung für März noch einmal schicken?")
JAPANESE = "こんにちは。注文した商品がまだ届いていません。確認していただけますか。"
LONG = " ".join(["The invoice for order %d was charged twice and the refund never came." % i
                 for i in range(40)])

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "information": "an answer",
                            "cancel": "stop an order"}},
    "urgency": {"type": "score", "instructions": "How urgent is this message?",
                "criteria": ["not urgent", "low", "medium", "high"]},
    "angry": {"type": "noul", "instructions": "The customer is angry."},
}


def wide(n: int, described: bool = True, **extra: Any) -> Dict[str, Any]:
    """A choice over `n` intent labels (a routing table's width)."""
    labels = ["intent_%03d" % i for i in range(n)]
    criteria: Any = ({label: "requests about topic %d" % i for i, label in enumerate(labels)}
                     if described else labels)
    return dict({"type": "choice", "instructions": "Which intent is this?",
                 "criteria": criteria}, **extra)


def with_wide(n: int = 120, **extra: Any) -> Dict[str, Any]:
    return dict(QUESTIONS, pick=wide(n, **extra))


def one(state: Any, questions: Any = None, **extra: Any) -> Dict[str, Any]:
    return dict({"state": state, "questions": QUESTIONS if questions is None else questions},
                **extra)


def batch(states: List[Any], questions: Any = None, **extra: Any) -> Dict[str, Any]:
    return dict({"states": states, "questions": QUESTIONS if questions is None else questions},
                **extra)


def http_cases() -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []

    def add(id: str, deployment: str, body: Any = None, path: str = "/v1/systemone",
            method: str = "POST") -> None:
        out.append({"id": id, "deployment": deployment, "method": method, "path": path,
                    "body": body})

    B = "/v1/systemone/batch"
    # --- LAYA_TOURNAMENT_GROUP=8 -------------------------------------------------------------
    T = "tournament"
    add("t_120", T, one(ENGLISH, with_wide(120)))
    add("t_255_list", T, one(ENGLISH, {"pick": wide(255, described=False)}))
    add("t_256", T, one(ENGLISH, {"pick": wide(256, described=False)}))
    add("t_two_wide", T, one(ENGLISH, dict(with_wide(120), other=wide(60))))
    add("t_total_over", T, one(ENGLISH, {"a": wide(200), "b": wide(200), "c": wide(200)}))
    add("t_unmappable", T, one(ENGLISH, {"pick": {"type": "choice", "instructions": "Which?",
                                                   "criteria": list(range(120))}}))
    add("t_unmappable_small", T, one(ENGLISH, {"pick": {"type": "choice", "instructions": "?",
                                                         "criteria": list(range(20))}}))
    add("t_order_small", T, one(ENGLISH, {"pick": wide(12, option_order=list(range(12))[::-1])}))
    add("t_order_wide", T, one(ENGLISH, with_wide(120, option_order=list(range(120))[::-1])))
    add("t_duplicate_wide", T, one(ENGLISH, {"pick": {
        "type": "choice", "instructions": "?",
        "criteria": ["label %d" % i for i in range(119)] + ["label 7"]}}))
    add("t_no_criteria_wide", T, one(ENGLISH, {"pick": {"type": "choice", "instructions": "?"},
                                               "other": wide(120)}))
    add("t_small", T, one(ENGLISH, dict(QUESTIONS, pick=wide(6))))
    add("t_40", T, one(ENGLISH, with_wide(40)))
    add("t_100", T, one(ENGLISH, {"pick": wide(100, described=False)}))
    add("t_min_confidence", T, one(ENGLISH, with_wide(120), min_confidence=0.5))
    add("t_min_confidence_map", T, one(ENGLISH, with_wide(120),
                                       min_confidence={"choice:6-10": 0.9, "default": 0.1}))
    add("t_model_ml", T, one(ENGLISH, with_wide(120), model="ml"))
    add("t_lang_de", T, one(ENGLISH, with_wide(120), lang="de"))
    add("t_task", T, one(ENGLISH, with_wide(120), task="typed-decisions"))
    add("t_task_bogus", T, one(ENGLISH, with_wide(120), task="bogus"))
    add("t_german", T, one(GERMAN, with_wide(120)))
    add("t_budgets", T, one(ENGLISH, with_wide(120), max_len=128, head_max_len=48))
    add("t_dict_state", T, one({"subject": "Refund", "body": ENGLISH}, with_wide(50)))
    add("t_batch", T, batch([ENGLISH, GERMAN, JAPANESE], with_wide(120)), B)
    add("t_batch_min_confidence", T, batch([ENGLISH, ENGLISH], with_wide(120),
                                           min_confidence=0.4, batch_size=1), B)
    add("t_batch_plain", T, batch([ENGLISH, GERMAN], dict(QUESTIONS, pick=wide(8))), B)
    add("t_batch_unmappable", T, batch([ENGLISH], {"pick": {
        "type": "choice", "instructions": "?", "criteria": list(range(120))}}), B)
    add("t_batch_true_and_one", T, batch([ENGLISH], {"pick": {
        "type": "choice", "instructions": "?", "criteria": [True] + list(range(119))}}), B)
    add("t_batch_256", T, batch([ENGLISH], {"pick": wide(256)}), B)
    add("t_health", T, path="/health", method="GET")
    # --- LAYA_TOURNAMENT_GROUP=101: off ------------------------------------------------------
    add("off_120", "off", one(ENGLISH, with_wide(120)))
    add("off_101_batch", "off", batch([ENGLISH], {"pick": wide(101)}), B)
    add("off_plain", "off", one(ENGLISH))
    # --- LAYA_TOURNAMENT_GROUP=16, LAYA_JEV_STRICT=1, LAYA_MAX_BATCH_TOKENS=1000 ---------------
    S = "tournament_strict"
    add("ts_120", S, one(ENGLISH, with_wide(120)))
    add("ts_order_wide", S, one(ENGLISH, with_wide(150, option_order=list(range(150)))))
    add("ts_batch", S, batch([ENGLISH, GERMAN, ENGLISH], with_wide(120)), B)
    add("ts_batch_chunked", S, batch([ENGLISH, GERMAN, JAPANESE, ENGLISH, GERMAN]), B)
    add("ts_batch_chunked_size", S, batch([ENGLISH] * 4, batch_size=3, max_len=96), B)
    add("ts_min_confidence", S, one(ENGLISH, with_wide(120), min_confidence=0.99))
    add("ts_256", S, one(ENGLISH, {"pick": wide(256)}))
    # --- LAYA_JEV_STRICT ---------------------------------------------------------------------
    add("s_one", "strict", one(ENGLISH))
    add("s_german", "strict", one(GERMAN))
    add("s_batch", "strict", batch([ENGLISH, GERMAN, {"text": ENGLISH}]), B)
    add("s_min_confidence", "strict", one(ENGLISH, min_confidence=0.99))
    add("s_truncated", "strict", one(LONG, max_len=64))
    add("s_noul_labels", "strict", one(ENGLISH, {"ok": {
        "type": "noul", "instructions": "Is it fine?",
        "labels": {"false": "no", "true": "yes"}}}))
    add("s_invalid", "strict", one(ENGLISH, {"q": {"type": "bogus", "instructions": "?"}}))
    add("s_too_many", "strict", one(ENGLISH, {"pick": wide(101)}))
    # --- a checkpoint that cannot be loaded ---------------------------------------------------
    add("m_task", "missing", one(ENGLISH, task="typed-decisions"))
    add("m_custom", "missing", one(ENGLISH, model="custom"))
    add("m_batch_task", "missing", batch([ENGLISH, GERMAN], task="typed-decisions"), B)
    add("m_english", "missing", one(ENGLISH))
    add("m_health", "missing", path="/health", method="GET")
    # --- what one checkpoint is asked as a Router is asked -----------------------------------
    for i, extra in enumerate([
            {}, {"model": "convaiinnovations/laya"}, {"model": "Convaiinnovations/Laya"},
            {"model": "jev-1"}, {"model": 123}, {"lang": "en"}, {"lang": "en-GB"},
            {"lang_guess": "en"}, {"min_confidence": 0.5}, {"min_confidence": 0.99},
            {"min_confidence": {"choice:3-5": 0.9, "default": 0.2}},
            {"model": "convaiinnovations/laya", "lang": "en", "min_confidence": 0.6},
            {"min_confidence": 1.5}, {"min_confidence": {"bogus": 0.5}}, {"lang": 5}]):
        add("single_%02d" % i, "three", one(ENGLISH, **extra))
    add("single_batch", "three", batch([ENGLISH, {"text": ENGLISH}], min_confidence=0.7,
                                       lang="en"), B)
    add("single_health", "three", path="/health", method="GET")
    return out


def _scrub(value: Any) -> Any:
    if isinstance(value, str):
        return value.replace(TINY, "<tiny>").replace(ML, "<ml>")
    if isinstance(value, dict):
        return {_scrub(k): _scrub(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


@contextlib.contextmanager
def environment(env: Dict[str, str]):
    saved = {k: v for k, v in os.environ.items() if k.startswith("LAYA_")}
    for k in saved:
        del os.environ[k]
    os.environ.update(env)
    try:
        yield
    finally:
        for k in [k for k in os.environ if k.startswith("LAYA_")]:
            del os.environ[k]
        os.environ.update(saved)


def run_http(cases: List[Dict[str, Any]]) -> None:
    for name, env in DEPLOYMENTS.items():
        with environment(dict(env, LAYA_DEVICE="cpu")), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with TestClient(laya.serve.create_app()) as client:
                for case in (c for c in cases if c["deployment"] == name):
                    if case["method"] == "GET":
                        r = client.get(case["path"])
                    else:
                        r = client.post(case["path"], json=case["body"])
                    case["status"] = r.status_code
                    case["response"] = _scrub(r.json())


def run_busy() -> Dict[str, Any]:
    """laya serve under uvicorn with one admission slot: a request arrives while another's body
    is still on its way (503), then again once that client has given up (200)."""
    import uvicorn

    env = dict(DEPLOYMENTS["three"], LAYA_DEVICE="cpu", LAYA_MAX_CONCURRENT="1",
               LAYA_BODY_READ_TIMEOUT="30")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with environment(env), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        server = uvicorn.Server(uvicorn.Config(laya.serve.create_app(), host="127.0.0.1",
                                               port=port, log_level="error"))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        url = "http://127.0.0.1:%d/v1/systemone" % port
        body = json.dumps(one(ENGLISH)).encode()
        stalled = socket.create_connection(("127.0.0.1", port))
        stalled.sendall(b"POST /v1/systemone HTTP/1.1\r\nhost: x\r\ncontent-type: "
                        b"application/json\r\ncontent-length: %d\r\n\r\n" % len(body)
                        + body[:10])
        time.sleep(0.5)
        out: Dict[str, Any] = {"env": _scrub(env)}
        r = httpx.post(url, content=body, headers={"content-type": "application/json"})
        out["while_busy"] = {"status": r.status_code, "response": r.json(),
                             "retry_after": r.headers.get("retry-after")}
        stalled.close()
        time.sleep(0.5)
        r = httpx.post(url, content=body, headers={"content-type": "application/json"})
        out["after"] = {"status": r.status_code, "response": _scrub(r.json()),
                        "retry_after": r.headers.get("retry-after")}
        server.should_exit = True
        thread.join(30)
    return out


READINGS = {
    "LAYA_TOURNAMENT_GROUP": ["8", "2", "1", "0", "100", "101", "-4", "abc", " 16 ", "2.5",
                              "16.0", "1e2", ""],
    "LAYA_MAX_CONCURRENT": ["1", "16", "200", "0", "-2", "abc", " 4 ", "3.0", ""],
    "LAYA_MAX_BATCH_TOKENS": ["1000", "131072", "1", "0", "-5", "abc", " 512 ", "9.5", ""],
    "LAYA_JEV_STRICT": ["1", "true", "YES", " on ", "0", "false", "banana", "", " "],
}
READERS = {
    "LAYA_TOURNAMENT_GROUP": lambda: laya.serve._resolve_tournament_group(),
    "LAYA_MAX_CONCURRENT": lambda: laya.serve._resolve_max_concurrent(),
    "LAYA_MAX_BATCH_TOKENS": lambda: laya.serve._resolve_max_batch_tokens(),
    "LAYA_JEV_STRICT": lambda: laya.serve._env_bool("LAYA_JEV_STRICT", False),
}


def readings() -> List[Dict[str, Any]]:
    out = []
    for variable, values in READINGS.items():
        for value in values:
            with environment({variable: value}):
                out.append({"variable": variable, "value": value,
                            "reading": READERS[variable]()})
    return out


def chunks() -> List[Dict[str, Any]]:
    out = []
    for budget in (131072, 1000, 100, 4096):
        for states, questions, max_len in ((1, 1, None), (64, 64, None), (64, 4, None),
                                           (3, 4, None), (10, 3, 96), (64, 64, 8192),
                                           (5, 2, 1), (0, 3, None), (4, 0, None),
                                           (7, 3, True), (9, 5, 0), (2, 2, 40)):
            with environment({"LAYA_MAX_BATCH_TOKENS": str(budget)}):
                size = laya.serve._batch_chunk_size(states, questions, max_len)
            out.append({"max_batch_tokens": budget, "states": states, "questions": questions,
                        "max_len": max_len, "batch_size": size})
    return out


def main() -> int:
    os.environ.pop("LAYA_SHA256_DIGESTS", None)
    os.environ.pop("LAYA_REVISION", None)
    cases = http_cases()
    ids = [c["id"] for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    run_http(cases)
    data = {"laya_version": laya.__version__, "missing_source": MISSING,
            "deployments": {k: _scrub(v) for k, v in DEPLOYMENTS.items()},
            "http": [_scrub(c) for c in cases], "busy": run_busy(), "readings": readings(),
            "chunks": chunks()}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    refusals = sum(1 for c in cases if c["status"] != 200)
    print("wrote %s: %d requests (%d refused), %d readings, %d chunk sizes"
          % (OUT.relative_to(ROOT), len(cases), refusals, len(data["readings"]),
             len(data["chunks"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
