"""Record Laya 0.4.15's routing on kime's test checkpoints: `tests/goldens/lang.json` and
`tests/goldens/router.json` (issue 11). Run ONLY with the oracle environment (the real laya and
torch), like `tools/make_goldens.py`, which runs it after the core cases:

    .oracle/bin/python tools/goldens_router.py

`lang.json`: for every state below, `laya.lang`'s `analyse` (plain and `explain=True`), and on
its `state_text` `detect_script`, `script_profile`, `latin_profile`, `guess_latin_language`,
plus `is_english(state)`.

`router.json`:
- `routes`: `laya.Router().route(state)` for every state (the decision: model, repo, reason,
  detection, workflow), the `explain=True` diagnostic, the model `Router(default="english")`
  picks, and the precedence cases (explicit model, task, lang, lang_guess, workflows).
- `calls`: `Router.predict` / `predict_batch` / `predict_long` / `decide_batch` results with
  `routing`, on a Router whose `english`, `multilingual` and `typed-decisions` are the committed
  `tiny`, `multilingual-tiny` and `tiny` checkpoints (local directories: nothing is downloaded),
  with the events a recording hook saw.
- `refusals`: what Laya raises (type and message) for bad names, arguments and requests.

Checkpoint directories are written `<tiny>` and `<ml>`, so the file does not depend on where the
repository lives. Non-string dict keys use make_goldens' `{"__items__": ...}` encoding.
"""
from __future__ import annotations

import importlib.util
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]


def _by_path(name: str, path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


mg = _by_path("make_goldens", ROOT / "tools" / "make_goldens.py")
sys.path.insert(0, str(ROOT / "tools"))

import laya  # noqa: E402
import laya.lang  # noqa: E402

CKPT = {"<tiny>": mg.GOLDENS / "checkpoints" / "tiny",
        "<ml>": mg.GOLDENS / "checkpoints" / "multilingual-tiny"}

State = Tuple[str, str, Any]
from router_states import (CONVERSATIONS, DICTS, LATIN, MIXED_TEXT, MORE, NON_LATIN,  # noqa: E402
                           OVERRIDES, SHORT_AND_ODD)


def all_states() -> List[State]:
    return NON_LATIN + LATIN + SHORT_AND_ODD + DICTS + CONVERSATIONS + MIXED_TEXT + MORE


# ------------------------------------------------------------------------------------ questions

Q = {"intent": mg.INTENT3, "urgency": mg.URGENCY5, "angry": mg.ANGRY}
Q_TOPIC = {"topic": mg.TOPIC12, "formal": mg.FORMAL}
CUSTOMER_SERVICE = {
    "action": {"type": "choice", "instructions": "What should the agent do next?",
               "criteria": ["reply", "refund", "escalate"]},
    "category": {"type": "choice", "instructions": "Which category?",
                 "criteria": ["billing", "shipping", "account", "other"]},
    "churn_risk": {"type": "noul", "instructions": "The customer may leave."},
    "needs_human": {"type": "noul", "instructions": "A human must handle this."},
    "urgency": mg.URGENCY5,
}
SECURITY = {"credential_compromise": mg.ANGRY, "disposition": mg.INTENT3, "severity": mg.URGENCY5,
            "true_positive": mg.ANGRY, "urgency": mg.URGENCY5}

# ------------------------------------------------------------------------------------ recording


def clean(obj: Any) -> Any:
    """JSON-safe, with the checkpoint directories written as placeholders."""
    text = json.dumps(mg.to_json(obj), ensure_ascii=False)
    for mark, path in CKPT.items():
        text = text.replace(json.dumps(str(path))[1:-1], mark)
    return json.loads(text)


def record_lang() -> List[Dict[str, Any]]:
    out = []
    for sid, about, state in all_states():
        text = laya.lang.state_text(state)
        out.append({"id": sid, "about": about, "state": state,
                    "analyse": laya.lang.analyse(state),
                    "explain": laya.lang.analyse(state, explain=True)["diagnostic"],
                    "state_text": text, "detect_script": laya.lang.detect_script(text),
                    "script_profile": laya.lang.script_profile(text),
                    "latin_profile": laya.lang.latin_profile(text),
                    "guess_latin_language": laya.lang.guess_latin_language(text),
                    "is_english": laya.lang.is_english(state)})
    return out


def record_routes() -> List[Dict[str, Any]]:
    router, english_default = laya.Router(), laya.Router(default="english")
    out = []
    for sid, about, state in all_states():
        out.append({"id": sid, "about": about, "state": state, "kwargs": {}, "router": {},
                    "decision": router.route(state),
                    "explain": router.route(state, explain=True)["detection"]["diagnostic"],
                    "default_english_model": english_default.route(state)["model"]})
    cases = [(sid, about, state, {}, kwargs) for sid, about, state, kwargs in OVERRIDES] + [
        ("workflow_auto", "customer_service ids with auto_task_detection", mg.GERMAN,
         {"auto_task_detection": True}, {"questions": CUSTOMER_SERVICE}),
        ("workflow_not_enabled", "customer_service ids, detection off: the workflow is reported",
         mg.GERMAN, {}, {"questions": CUSTOMER_SERVICE}),
        ("workflow_security_auto", "security_incidents ids", mg.EMAIL,
         {"auto_task_detection": True}, {"questions": SECURITY}),
        ("workflow_superset", "a superset of a workflow's ids is no workflow", mg.EMAIL,
         {"auto_task_detection": True}, {"questions": dict(CUSTOMER_SERVICE, extra=mg.ANGRY)}),
        ("workflow_lang_beats", "an explicit lang below a detected workflow", mg.EMAIL,
         {"auto_task_detection": True}, {"questions": CUSTOMER_SERVICE, "lang": "de"}),
        ("workflow_task_beats", "an explicit task above a detected workflow", mg.EMAIL,
         {"auto_task_detection": True}, {"questions": CUSTOMER_SERVICE, "task": "english"}),
        ("installed_guess", "Router(lang_guess='de')", mg.EMAIL, {"lang_guess": "de"}, {}),
        ("installed_guess_call_beats", "a per-call lang_guess beats the installed one", mg.EMAIL,
         {"lang_guess": "de"}, {"lang_guess": "en"}),
        ("standalone_repos", "standalone repos name the repo", mg.GERMAN,
         {"standalone_repos": True}, {}),
        ("registered_name", "a registered checkpoint by name", mg.EMAIL,
         {"models": {"papers": "org/papers-model"}}, {"model": "Papers"}),
        ("repointed_builtin", "a built-in re-pointed at a (repo, subfolder) pair", mg.EMAIL,
         {"models": {"english": ["org/bundle", "en-v2"]}}, {}),
    ]
    for sid, about, state, ctor, kwargs in cases:
        out.append({"id": sid, "about": about, "state": state, "kwargs": kwargs, "router": ctor,
                    "decision": laya.Router(**ctor).route(state, **kwargs)})
    return out


class EventLog:
    """Router-level hook: one line per event with the checkpoint it names. The same class is in
    tests/laya/test_laya_router.py, so the two runs are compared line for line."""

    def __init__(self) -> None:
        self.lines: List[str] = []

    def on_route(self, ctx: Any) -> None:
        self.lines.append("route %s" % ctx.decision["model"])

    def on_load(self, ctx: Any) -> None:
        self.lines.append("load %s" % ctx.model)

    def on_evict(self, ctx: Any) -> None:
        self.lines.append("evict %s" % ctx.model)

    def on_predict_start(self, ctx: Any) -> None:
        self.lines.append("start %s %d" % (ctx.model, len(ctx.states)))

    def on_predict_end(self, ctx: Any) -> None:
        self.lines.append("end %s %s" % (ctx.model, ctx.usage))

    def on_error(self, ctx: Any) -> None:
        self.lines.append("error %s %s" % (ctx.model, type(ctx.error).__name__))


MODELS = {"english": "<tiny>", "multilingual": "<ml>", "typed-decisions": "<tiny>"}


def models(spec: Dict[str, str]) -> Dict[str, str]:
    return {name: str(CKPT[mark]) if mark in CKPT else mark for name, mark in spec.items()}


def call_cases() -> List[Dict[str, Any]]:
    def case(id: str, about: str, call: str, router: Any = None, **args: Any) -> Dict[str, Any]:
        return {"id": id, "about": about, "router": dict({"models": MODELS}, **(router or {})),
                "call": call, "args": args}

    long_text = mg.LONG_TEXT * 3
    batch = [{"state": mg.EMAIL, "questions": Q}, {"state": mg.GERMAN, "questions": Q},
             {"state": mg.JAPANESE, "questions": Q}, {"state": mg.SPANISH, "questions": Q,
                                                      "model": "english"},
             {"state": mg.FRENCH, "questions": Q_TOPIC}, {"state": mg.EMAIL, "questions": Q,
                                                          "lang": "de"},
             {"state": "Cancel it.", "questions": Q, "task": "typed-decisions"},
             {"state": mg.CONVERSATION, "questions": Q}, {"state": "", "questions": Q}]
    return [
        case("predict_english", "English text to the English checkpoint", "predict",
             state=mg.EMAIL, questions=Q),
        case("predict_german", "German to multilingual; the detected language reaches the agent",
             "predict", state=mg.GERMAN, questions=Q),
        case("predict_japanese", "non-Latin script", "predict", state=mg.JAPANESE, questions=Q_TOPIC),
        case("predict_dict_mixed", "a dict with a Portuguese field", "predict",
             state={"notes": "Customer since 2019, no open invoices, nothing to escalate today.",
                    "message": "Não consigo acessar minha conta desde ontem, o que faço?"},
             questions=Q),
        case("predict_conversation", "a conversation", "predict", state=mg.CONVERSATION,
             questions=Q),
        case("predict_empty", "the empty state takes the default", "predict", state="",
             questions=Q),
        case("predict_model", "explicit model beats detection", "predict", state=mg.GERMAN,
             questions=Q, model="english"),
        case("predict_task", "task typed-decisions", "predict", state=mg.EMAIL, questions=Q,
             task="typed-decisions"),
        case("predict_workflow_auto", "customer_service ids with auto_task_detection", "predict",
             {"auto_task_detection": True}, state=mg.EMAIL, questions=CUSTOMER_SERVICE),
        case("predict_workflow_off", "the same ids without auto detection", "predict",
             state=mg.EMAIL, questions=CUSTOMER_SERVICE),
        case("predict_lang", "lang='fr' on English text", "predict", state=mg.EMAIL,
             questions=Q, lang="fr"),
        case("predict_lang_guess", "a per-call lang_guess", "predict", state=mg.EMAIL,
             questions=Q, lang_guess="es"),
        case("predict_installed_guess", "Router(lang_guess='en')", "predict",
             {"lang_guess": "en"}, state=mg.GERMAN, questions=Q),
        case("predict_default_english", "Router(default='english') on undecided text",
             "predict", {"default": "english"}, state="Quero cancelar", questions=Q),
        case("predict_min_confidence", "the gate", "predict", state=mg.EMAIL, questions=Q,
             min_confidence=0.6),
        case("predict_budget", "max_len and head_max_len", "predict", state=mg.LONG_TEXT,
             questions=Q, max_len=96, head_max_len=48),
        case("predict_lang_temperatures", "agent_kwargs lang_temperatures and a detected 'de'",
             "predict", {"agent_kwargs": {"lang_temperatures": {"de": {"temperature": [2.0, 0.7, 3.0]}}}},
             state=mg.GERMAN, questions=Q),
        case("predict_long", "predict_long routes, then scans windows", "predict_long",
             state=long_text, questions=Q),
        case("predict_long_german", "predict_long on German", "predict_long",
             state=mg.GERMAN * 6, questions=Q, window=48),
        case("batch_mixed", "mixed languages, overrides and schemas: grouped per checkpoint, "
             "answered in order", "predict_batch", requests=batch),
        case("batch_max_loaded_1", "the same with max_loaded=1: every checkpoint loads once",
             "predict_batch", {"max_loaded": 1}, requests=batch),
        case("batch_sorted", "batch_size and sort_by_length, with diagnostics", "predict_batch",
             requests=batch, batch_size=2, sort_by_length=True),
        case("batch_budget", "per-request max_len splits a group", "predict_batch",
             requests=[{"state": mg.LONG_TEXT, "questions": Q, "max_len": 96},
                       {"state": mg.LONG_TEXT, "questions": Q},
                       {"state": mg.EMAIL, "questions": Q, "max_len": 96}]),
        case("batch_min_confidence", "the gate on a batch", "predict_batch",
             requests=batch[:3], min_confidence={"choice:3-5": 0.7, "default": 0.4}),
        case("batch_empty", "no requests", "predict_batch", requests=[]),
        case("batch_lang_temperatures", "an agent with language temperatures groups by language",
             "predict_batch",
             {"agent_kwargs": {"lang_temperatures": {"de": {"temperature": [2.0, 0.7, 3.0]}}}},
             requests=[{"state": mg.GERMAN, "questions": Q}, {"state": mg.FRENCH, "questions": Q},
                       {"state": mg.GERMAN, "questions": Q, "lang": "fr"}]),
        case("decide_batch", "decide_batch through the Router", "decide_batch",
             states=[mg.EMAIL, mg.GERMAN, mg.JAPANESE], questions=Q),
        case("route_batch_explain", "route_batch with explain", "route_batch",
             requests=batch, explain=True),
    ]


def run_call(spec: Dict[str, Any]) -> Dict[str, Any]:
    log = EventLog()
    ctor = dict(spec["router"])
    ctor["models"] = models(ctor["models"])
    args = json.loads(json.dumps(spec["args"]))
    result = error = None
    diagnostics: Dict[str, Any] = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            router = laya.Router(device="cpu", hooks=[log], **ctor)
            call = spec["call"]
            if call == "predict":
                result = router.predict(args.pop("state"), args.pop("questions"), **args)
            elif call == "predict_long":
                result = router.predict_long(args.pop("state"), args.pop("questions"), **args)
            elif call == "predict_batch":
                if args.get("sort_by_length"):
                    args["diagnostics"] = diagnostics
                result = router.predict_batch(args.pop("requests"), **args)
            elif call == "route_batch":
                result = router.route_batch(args.pop("requests"), **args)
            else:
                result = router.decide_batch(args.pop("states"), **args)
            loaded = router.loaded
        except Exception as exc:  # recorded: kime must raise the same
            error = {"type": type(exc).__name__, "message": str(exc)}
            loaded = None
    out = dict(spec)
    out.update(result=clean(result), error=error, events=log.lines, loaded=loaded,
               diagnostics=diagnostics or None,
               warnings=clean([str(w.message) for w in caught]))
    return out


class NoScan:
    """An agent attached by hand that cannot scan (no predict_long)."""

    def system_one(self, state: Any, questions: Any, lang: Any = None) -> Dict[str, Any]:
        return {"model": "stub", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}


def refusal_cases() -> List[Tuple[str, str, Callable[[Any], Any]]]:
    """(id, about, thunk): `thunk(R)` calls Laya's Router class `R` (or kime's) and must raise."""
    s, q = mg.EMAIL, Q
    tiny = str(CKPT["<tiny>"])
    return [
        ("ctor_bad_name", "a name with a space", lambda R: R(models={"Bad Name": tiny})),
        ("ctor_slash_name", "a name with a slash", lambda R: R(models={"org/model": tiny})),
        ("ctor_auto_name", "'auto' is reserved", lambda R: R(models={"auto": tiny})),
        ("ctor_non_str_name", "a name that is not a string", lambda R: R(models={7: tiny})),
        ("ctor_source_type", "a source that is a number", lambda R: R(models={"papers": 5})),
        ("ctor_unknown_default", "an unknown default", lambda R: R(default="klingon")),
        ("ctor_revision_key", "revisions for an unknown model", lambda R: R(revisions={"papers": "abc"})),
        ("ctor_digest_key", "sha256_digests for an unknown model",
         lambda R: R(sha256_digests={"papers": {}})),
        ("ctor_reserved_agent_kwargs", "agent_kwargs the Router sets",
         lambda R: R(agent_kwargs={"device": "cpu", "hooks": []})),
        ("ctor_unknown_agent_kwargs", "agent_kwargs Agent does not take",
         lambda R: R(agent_kwargs={"turbo": True})),
        ("ctor_hooks_timeout", "hooks_timeout=0", lambda R: R(hooks_timeout=0)),
        ("ctor_hook_class", "a hook class, not an instance", lambda R: R(hooks=[EventLog])),
        ("ctor_hook_object", "a hook with no event", lambda R: R(hooks=[object()])),
        ("ctor_max_loaded_text", "max_loaded='two'", lambda R: R(max_loaded="two")),
        ("ctor_max_loaded_none", "max_loaded=None", lambda R: R(max_loaded=None)),
        ("route_unknown_model", "an unknown model", lambda R: R().route(s, model="klingon")),
        ("route_model_path", "a path is not a name", lambda R: R().route(s, model="./models/en")),
        ("route_model_repo", "a repo id is not a name", lambda R: R().route(s, model="convaiinnovations/laya")),
        ("route_model_empty", "an empty model", lambda R: R().route(s, model="")),
        ("route_unknown_task", "an unknown task", lambda R: R().route(s, task="summarise")),
        ("route_questions_list", "questions as a list", lambda R: R().route(s, questions=["a"])),
        ("route_hooks_timeout", "hooks_timeout=-1", lambda R: R().route(s, hooks_timeout=-1)),
        ("predict_state_none", "state None", lambda R: R().predict(None, q)),
        ("predict_questions_str", "questions as a string", lambda R: R().predict(s, "intent")),
        ("predict_min_confidence", "min_confidence=1.5", lambda R: R().predict(s, q, min_confidence=1.5)),
        ("predict_unknown_model", "an unknown model", lambda R: R().predict(s, q, model="klingon")),
        ("predict_missing_path", "a registered directory that does not exist",
         lambda R: R(models={"papers": "./no/such/checkpoint"}).predict(s, q, model="papers")),
        ("predict_bad_question", "a question the agent refuses",
         lambda R: R(models={"english": tiny}, device="cpu").predict(
             s, {"q": {"type": "nope", "instructions": "x"}}, model="english")),
        ("predict_long_no_scan", "an attached agent without predict_long",
         lambda R: _attached(R).predict_long(s, q, model="english")),
        ("route_batch_string", "requests as a string", lambda R: R().route_batch("abc")),
        ("route_batch_item", "a request that is not a dict", lambda R: R().route_batch([1])),
        ("route_batch_no_state", "a request without state", lambda R: R().route_batch([{"questions": q}])),
        ("route_batch_state_none", "a request with state None",
         lambda R: R().route_batch([{"state": None, "questions": q}])),
        ("route_batch_no_questions", "a request without questions",
         lambda R: R().route_batch([{"state": s}])),
        ("route_batch_questions_list", "a request with questions as a list",
         lambda R: R().route_batch([{"state": s, "questions": []}])),
        ("route_batch_second", "the second request is the bad one",
         lambda R: R().route_batch([{"state": s, "questions": q}, {"state": s}])),
        ("batch_min_confidence", "predict_batch with min_confidence=-1",
         lambda R: R().predict_batch([{"state": s, "questions": q}], min_confidence=-1)),
        ("register_bad_name", "register a bad name", lambda R: R().register("no way", tiny)),
        ("register_auto", "register 'auto'", lambda R: R().register("AUTO", tiny)),
        ("register_source_type", "register a dict source", lambda R: R().register("papers", {"a": 1})),
        ("unregister_builtin", "unregister a built-in", lambda R: R().unregister("ml")),
        ("unregister_default", "unregister the default",
         lambda R: R(models={"papers": tiny}, default="papers").unregister("papers")),
        ("unregister_unknown", "unregister an unknown name", lambda R: R().unregister("papers")),
        ("resolve_unknown", "resolve an unknown name", lambda R: R().resolve("englishh")),
        ("load_unknown", "load an unknown name", lambda R: R().load("papers")),
        ("unload_unknown", "unload an unknown name", lambda R: R().unload("papers")),
        ("preload_unknown", "preload an unknown name", lambda R: R().preload(["papers"])),
    ]


def _attached(R: Any) -> Any:
    router = R()
    router.attach("english", NoScan())
    return router


def warning_cases() -> List[Tuple[str, str, Callable[[Any], Any]]]:
    """Calls that succeed with a warning: (id, about, thunk returning something to record)."""
    tiny = str(CKPT["<tiny>"])
    return [
        ("register_near_builtin", "a name one edit from a built-in",
         lambda R: (R().register("englsh", tiny))),
        ("register_swap", "an adjacent swap is one edit", lambda R: R().register("mulitlingual", tiny)),
        ("register_far", "two edits: no warning", lambda R: R().register("engl", tiny)),
        ("registered_table", "register with a description, then list",
         lambda R: _registered(R)),
        ("attributes", "a fresh Router", lambda R: _attributes(R())),
        ("attributes_standalone", "standalone_repos", lambda R: _attributes(R(standalone_repos=True))),
        ("attributes_models", "models, revisions and max_loaded",
         lambda R: _attributes(R(models={"papers": tiny, "EN": tiny}, revisions={"ml": "abc"},
                                 max_loaded=0, default="en"))),
        ("predict_long_no_lang", "an attached scanner without lang",
         lambda R: _scanner(R).predict_long(mg.GERMAN, Q, model="english", lang="de")),
    ]


class ScanNoLang(NoScan):
    def predict_long(self, state: Any, questions: Any, window: Any = None, stride: Any = None,
                     aggregate: str = "auto", batch_size: Any = None) -> Dict[str, Any]:
        return {"model": "stub", "answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0,
                                                          "windows": 1}}


def _scanner(R: Any) -> Any:
    router = R()
    router.attach("english", ScanNoLang())
    return router


def _registered(R: Any) -> Any:
    router = R()
    name = router.register("  Papers ", str(CKPT["<tiny>"]), description="fine-tuned on papers")
    router.register("pair", ("org/bundle", "sub"))
    return {"name": name, "registered": router.registered}


def _attributes(router: Any) -> Dict[str, Any]:
    return {"repr": repr(router), "models": router.models, "registered": router.registered,
            "default": router.default, "max_loaded": router.max_loaded, "loaded": router.loaded,
            "revisions": router.revisions, "auto_task_detection": router.auto_task_detection,
            "lang_guess": router.lang_guess, "loaded_revisions": router.loaded_revisions}


def record_refusals() -> List[Dict[str, Any]]:
    out = []
    for sid, about, thunk in refusal_cases() + warning_cases():
        result = error = None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                result = thunk(laya.Router)
            except Exception as exc:
                error = {"type": type(exc).__name__, "message": str(exc)}
        expect_error = any(sid == r[0] for r in refusal_cases())
        if expect_error != (error is not None):
            raise AssertionError("%s: expected %s, got %r" % (sid, "an error" if expect_error
                                                               else "success", error))
        out.append(clean({"id": sid, "about": about, "result": result, "error": error,
                          "warnings": [str(w.message) for w in caught]}))
    return out


def main() -> int:
    for name in ("LAYA_SHA256_DIGESTS", "LAYA_REVISION", "HF_TOKEN"):
        os.environ.pop(name, None)
    lang = record_lang()
    data = {"laya_version": laya.__version__, "routes": record_routes(),
            "calls": [run_call(spec) for spec in call_cases()],
            "refusals": record_refusals()}
    for name, payload in (("lang.json", {"laya_version": laya.__version__, "states": lang}),
                          ("router.json", data)):
        text = json.dumps(clean(payload), indent=1, ensure_ascii=False)
        (mg.GOLDENS / name).write_text(text + "\n", encoding="utf-8")
    languages = {sid.split("_")[0] for sid, _, _ in all_states()}
    print("wrote lang.json (%d states, %d language/script prefixes) and router.json (%d routes, "
          "%d calls, %d refusals)" % (len(lang), len(languages), len(data["routes"]),
                                      len(data["calls"]), len(data["refusals"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
