"""Record laya serve 0.4.15 routing across checkpoints, and `laya TEXT` (the routing command
line), into `tests/goldens/serve.json`.

This is the area of issue 11, items 4 and 5. Run it ONLY with the oracle environment (the real
laya + torch, with fastapi and httpx for its app), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_serve.py

Nothing here touches the network. laya serve's app is built from the environment, as a deployment
builds it. The three published checkpoint names are re-pointed at kime's committed test
checkpoints through `LAYA_EXTRA_MODELS`: `english` and `typed-decisions` -> `tiny`, and
`multilingual` -> `multilingual-tiny`. Its requests go through starlette's TestClient. The
routing command line only routes, so it never loads a checkpoint.

The file holds:

- `http`: {"id", "deployment", "method", "path", "body", "status", "response"}. `deployment`
  names an entry of `deployments` (its `LAYA_*` environment).
- `env`: {"id", "env", "outcome"}. `outcome` is the Router `build_router()` made from that
  environment (`max_loaded`, `default`, `auto_task_detection`, the registered names with their
  sources, `loaded` after the preload), plus the app's `root_path` and the idle-unload keys of
  `/health`. Or it is the refusal as {"error": {"type", "message"}}.
- `cli`: {"id", "argv", "code", "stdout", "stderr"} for `laya.cli.main(argv)`.

Checkpoint directories are written `<tiny>` and `<ml>` in every recorded string, so the file does
not depend on where the repository lives.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "serve.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
KEY = "golden-key"

import laya  # noqa: E402
import laya.cli  # noqa: E402
import laya.serve  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

THREE = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}
DEPLOYMENTS: Dict[str, Dict[str, str]] = {
    # Every checkpoint preloaded, laya serve's defaults otherwise.
    "three": {"LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_API_KEY": KEY},
    # A checkpoint of the deployment's own beside the three, English as the fallback, and the
    # typed-decisions workflows detected from the question ids.
    "custom": {"LAYA_EXTRA_MODELS": json.dumps(dict(THREE, custom=ML)),
               "LAYA_DEFAULT_MODEL": "en", "LAYA_AUTO_TASK": "1", "LAYA_API_KEY": KEY},
}

ENGLISH = "I was charged twice for my subscription this month, please refund the duplicate payment."
GERMAN = ("Guten Morgen! Die Lieferung ist leider beschädigt angekommen, und ich möchte das Paket "
          "zurückgeben. Könnten Sie mir bitte die Rechnung für März noch einmal schicken?")
JAPANESE = "こんにちは。注文した商品がまだ届いていません。確認していただけますか。"
RUSSIAN = "Здравствуйте, мой заказ пришёл повреждённым, верните, пожалуйста, деньги."
FRENCH = "Bonjour, je voudrais annuler ma commande passée hier soir, s'il vous plaît. Merci !"
NUMBERS = "12345 678 90"
UNDECIDED = "Quero cancelar"
DICT_STATE = {"subject": "Refund", "body": "The parcel arrived broken and I would like my money back."}
CONVERSATION = [{"role": "user", "content": "Hallo, meine Bestellung ist nicht angekommen."},
                {"role": "assistant", "content": "Das tut mir leid. Wie lautet die Nummer?"}]

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "information": "an answer",
                            "cancel": "stop an order"}},
    "urgency": {"type": "score", "instructions": "How urgent is this message?",
                "criteria": ["not urgent", "low", "medium", "high"]},
    "angry": {"type": "noul", "instructions": "The customer is angry."},
}
# The question ids of the customer_service typed-decisions workflow.
WORKFLOW = {qid: {"type": "noul", "instructions": "Is %s needed?" % qid}
            for qid in ("action", "category", "churn_risk", "needs_human", "urgency")}


def one(state: Any, **extra: Any) -> Dict[str, Any]:
    return dict({"state": state, "questions": QUESTIONS}, **extra)


def batch(states: List[Any], **extra: Any) -> Dict[str, Any]:
    return dict({"states": states, "questions": QUESTIONS}, **extra)


MODEL_FIELDS: List[Any] = [
    None, "", "   ", "english", "English", " en ", "laya", "default", "ml", "multi",
    "multilingual", "laya-multilingual", "typed", "typed_decisions", "decisions",
    "typed-decisions", "laya-typed-decisions", "convaiinnovations/laya", "Convaiinnovations/Laya",
    "convaiinnovations/laya-multilingual", "CONVAIINNOVATIONS/LAYA-TYPED-DECISIONS", "jev-1",
    "gpt-4o", "auto", "custom", "./ckpt", "~/ckpt", ".hidden", "org/other-checkpoint",
    "C:\\models\\laya", "/srv/models/laya", "hf://convaiinnovations/laya", "engilsh", 123, 0,
    True, False, ["english"], {"name": "english"},
]


def http_cases() -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []

    def add(id: str, deployment: str, path: str, body: Any = None, method: str = "POST") -> None:
        out.append({"id": id, "deployment": deployment, "method": method, "path": path,
                    "body": body})

    for i, value in enumerate(MODEL_FIELDS):
        for deployment in DEPLOYMENTS:
            add("model_%02d_%s" % (i, deployment), deployment, "/v1/systemone",
                one(GERMAN, model=value))
    add("model_batch_pinned", "three", "/v1/systemone/batch",
        batch([ENGLISH, GERMAN], model="multilingual"))
    add("model_batch_path", "three", "/v1/systemone/batch", batch([ENGLISH], model="./ckpt"))
    add("model_batch_unknown_repo", "custom", "/v1/systemone/batch",
        batch([ENGLISH], model="org/other"))
    for name, state in (("english", ENGLISH), ("german", GERMAN), ("japanese", JAPANESE),
                        ("russian", RUSSIAN), ("french", FRENCH), ("numbers", NUMBERS),
                        ("undecided", UNDECIDED), ("dict", DICT_STATE),
                        ("conversation", CONVERSATION)):
        for deployment in DEPLOYMENTS:
            add("auto_%s_%s" % (name, deployment), deployment, "/v1/systemone", one(state))
    add("batch_mixed", "three", "/v1/systemone/batch",
        batch([ENGLISH, GERMAN, JAPANESE, NUMBERS, ENGLISH, DICT_STATE]))
    add("batch_mixed_custom", "custom", "/v1/systemone/batch",
        batch([ENGLISH, GERMAN, NUMBERS, UNDECIDED], batch_size=2))
    for task in ("typed-decisions", "typed_decisions", "Typed-Decisions", "english", "ml",
                 "custom", "bogus", "", 7):
        add("task_%s" % task, "custom", "/v1/systemone", one(ENGLISH, task=task))
    add("task_batch", "three", "/v1/systemone/batch", batch([ENGLISH, GERMAN],
                                                             task="typed-decisions"))
    add("task_batch_bogus", "three", "/v1/systemone/batch", batch([ENGLISH], task="bogus"))
    add("model_beats_task", "three", "/v1/systemone",
        one(ENGLISH, model="multilingual", task="typed-decisions"))
    for lang in ("de", "en", "EN", "en-GB", "pt_BR", "xx", "", "  ", 5, True, ["de"]):
        add("lang_%r" % (lang,), "three", "/v1/systemone", one(ENGLISH, lang=lang))
    for guess in ("de", "en", "", 3):
        add("lang_guess_%r" % (guess,), "three", "/v1/systemone", one(GERMAN, lang_guess=guess))
    add("lang_beats_guess", "three", "/v1/systemone", one(GERMAN, lang="en", lang_guess="de"))
    add("task_beats_lang", "three", "/v1/systemone", one(GERMAN, task="typed-decisions",
                                                          lang="de"))
    add("lang_batch", "three", "/v1/systemone/batch", batch([ENGLISH, GERMAN], lang="de"))
    add("workflow_auto", "custom", "/v1/systemone",
        {"state": ENGLISH, "questions": WORKFLOW})
    add("workflow_not_auto", "three", "/v1/systemone",
        {"state": ENGLISH, "questions": WORKFLOW})
    add("workflow_lang_loses", "custom", "/v1/systemone",
        {"state": GERMAN, "questions": WORKFLOW, "lang": "de"})
    for mc in (0.5, 0.99, 0, 1, {"choice:3-5": 0.9, "default": 0.2}, 1.5, -0.1, "0.5", True,
               {"bogus": 0.5}, {}):
        add("min_confidence_%s" % json.dumps(mc, sort_keys=True), "three", "/v1/systemone",
            one(ENGLISH, min_confidence=mc))
    add("min_confidence_batch", "three", "/v1/systemone/batch",
        batch([ENGLISH, GERMAN], min_confidence=0.9))
    add("min_confidence_batch_bad", "three", "/v1/systemone/batch",
        batch([ENGLISH], min_confidence=2))
    add("health", "three", "/health", method="GET")
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
            app = laya.serve.create_app()
            with TestClient(app) as client:
                for case in cases:
                    if case["deployment"] != name:
                        continue
                    headers = {"authorization": "Bearer " + KEY}
                    if case["method"] == "GET":
                        r = client.get(case["path"], headers=headers)
                    else:
                        r = client.post(case["path"], json=case["body"], headers=headers)
                    case["status"] = r.status_code
                    case["response"] = _scrub(r.json())


ENV_CASES: List[Dict[str, str]] = [
    {},
    *({"LAYA_AUTO_TASK": v} for v in ("1", "true", "YES", " on ", "0", "false", "banana", " ")),
    *({"LAYA_MAX_LOADED": v} for v in ("1", "3", " 2 ", "0", "-1", "abc", "2.5", "")),
    *({"LAYA_DEFAULT_MODEL": v} for v in ("english", " EN ", "ml", "typed", "laya-multilingual",
                                          "bogus", "", "custom")),
    {"LAYA_DEFAULT_MODEL": "custom", "LAYA_EXTRA_MODELS": json.dumps({"custom": ML})},
    {"LAYA_DEFAULT_MODEL": "Custom", "LAYA_EXTRA_MODELS": json.dumps({"custom": ML})},
    *({"LAYA_EXTRA_MODELS": v} for v in (
        json.dumps({"custom": ML}), json.dumps({"English": TINY}),
        json.dumps({"pair": ["org/repo", "sub"]}), json.dumps({"solo": ["org/repo"]}),
        "not json", "[1, 2]", json.dumps({"x": 5}), json.dumps({"Bad Name": ML}),
        json.dumps({"auto": ML}), json.dumps({"a/b": ML}), json.dumps({}), "  ")),
    *({"LAYA_IDLE_UNLOAD_SECONDS": v} for v in ("5", "0", "-3", "abc", "inf", "nan", " 2.5 ",
                                                "")),
    *({"LAYA_ROOT_PATH": v} for v in ("/laya", " /padded ", "")),
    # preloading: every registered checkpoint, or LAYA_MODELS' names, with the cap raised
    {"LAYA_PRELOAD": "1", "LAYA_EXTRA_MODELS": json.dumps(THREE)},
    {"LAYA_PRELOAD": "1", "LAYA_EXTRA_MODELS": json.dumps(THREE),
     "LAYA_MODELS": "ml, english"},
    {"LAYA_PRELOAD": "1", "LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_MODELS": " , ml,,"},
    {"LAYA_PRELOAD": "1", "LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_MODELS": "ml",
     "LAYA_MAX_LOADED": "1"},
    {"LAYA_PRELOAD": "yes", "LAYA_EXTRA_MODELS": json.dumps(dict(THREE, custom=ML)),
     "LAYA_MODELS": "custom,typed"},
    {"LAYA_PRELOAD": "1", "LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_MODELS": "bogus"},
    {"LAYA_PRELOAD": "0", "LAYA_MODELS": "english"},
    {"LAYA_PRELOAD": "", "LAYA_EXTRA_MODELS": json.dumps(THREE), "LAYA_MODELS": "english"},
]


def env_outcome(env: Dict[str, str]) -> Dict[str, Any]:
    full = dict(env)
    full.setdefault("LAYA_PRELOAD", "0")  # never the Hub: only local checkpoints are preloaded
    full["LAYA_DEVICE"] = "cpu"
    with environment(full), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            router = laya.serve.build_router()
        except (SystemExit, ValueError, TypeError) as e:
            return {"error": {"type": type(e).__name__, "message": str(e)}}
        app = laya.serve.create_app(router)
        with TestClient(app) as client:
            health = client.get("/health").json()
    return _scrub({
        "max_loaded": router.max_loaded, "default": router.default,
        "auto_task_detection": router.auto_task_detection,
        "models": {name: laya.router._repo_str(spec) if spec is not None else None
                   for name, spec in router.models.items()},
        "loaded": router.loaded, "root_path": app.root_path,
        "idle": {k: health[k] for k in ("idle_unload_seconds",) if k in health},
    })


CLI_CASES: List[List[str]] = [
    [ENGLISH], [GERMAN], [JAPANESE], [NUMBERS], [UNDECIDED], [FRENCH],
    ["Where", "is", "my", "card?"],
    [ENGLISH, "--json"], [GERMAN, "--json"], [ENGLISH, "--explain"], [GERMAN, "--explain"],
    [JAPANESE, "--explain", "--json"], [NUMBERS, "--explain"],
    [ENGLISH, "--model", "ml"], [ENGLISH, "--model", "Typed"], [ENGLISH, "--model", "auto"],
    [ENGLISH, "--model", "bogus"], [ENGLISH, "--lang", "de"], [GERMAN, "--lang", "en"],
    [GERMAN, "--lang-guess", "en"], [ENGLISH, "--task", "typed-decisions"],
    [ENGLISH, "--task", "bogus"], [ENGLISH, "--model", "ml", "--json"],
    [ENGLISH, "--lang", "de", "--explain", "--json"],
]


def cli_outcome(argv: List[str]) -> Dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    with environment({}), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = laya.cli.main(list(argv))
        except SystemExit as e:
            code = e.code
    return {"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()}


def main() -> int:
    os.environ.pop("LAYA_SHA256_DIGESTS", None)
    os.environ.pop("LAYA_REVISION", None)
    cases = http_cases()
    ids = [c["id"] for c in cases]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    run_http(cases)
    envs = [{"id": "env_%02d" % i, "env": _scrub(env), "outcome": env_outcome(env)}
            for i, env in enumerate(ENV_CASES)]
    cli = [dict(cli_outcome(argv), id="cli_%02d" % i) for i, argv in enumerate(CLI_CASES)]
    data = {"laya_version": laya.__version__, "key": KEY,
            "deployments": {k: _scrub(v) for k, v in DEPLOYMENTS.items()},
            "http": [_scrub(c) for c in cases], "env": envs, "cli": cli}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    refusals = sum(1 for c in cases if c["status"] != 200)
    print("wrote %s: %d requests (%d refused), %d environments, %d command lines"
          % (OUT.relative_to(ROOT), len(cases), refusals, len(envs), len(cli)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
