"""Record what laya 0.4.15's MCP tools return (`laya/mcp/tools.py`): `tests/goldens/mcp.json`.
Run ONLY with the oracle environment (the real laya and torch), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_mcp.py

Every case calls one of laya-mcp-server's tool functions in process, over a laya `Router` whose
`english` and `typed-decisions` are the committed `tiny` checkpoint and whose `multilingual` is
`multilingual-tiny` (english and multilingual preloaded, as the MCP server preloads them), and
records what the server would send: the tool's dict, or its error as the server's `_wrap`
shapes it (`{"error": code, "message": ...}`, a non-ToolError as `internal_error` with
`Type: message`). `latency_ms` values are written null (they are timings).

    {"id", "tool", "args", "result": the dict or null, "error": null or {"error", "message"}}

A state too long to store is written `{"__repeat__": [text, n]}` (`text * n`). Checkpoint
directories are written `<tiny>` and `<ml>`.
"""
from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "mcp.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}

import laya  # noqa: E402
from laya.mcp import tools as T  # noqa: E402

EN = "I was charged twice for my subscription this month and I want a refund right now."
DE = "Ich wurde diesen Monat zweimal belastet und möchte sofort mein Geld zurück."
Q = {"intent": {"type": "choice", "instructions": "What does the customer want?",
                "criteria": {"refund": "money back", "cancel": "end the plan",
                             "question": "just asking"}},
     "urgency": {"type": "score", "instructions": "How urgent is it?",
                 "criteria": ["not urgent", "soon", "right now"]},
     "angry": {"type": "noul", "instructions": "The customer is angry."}}
NOUL_LABELS = {"ok": {"type": "noul", "instructions": "The payment went through.",
                      "labels": {"false": "failed", "true": "succeeded"}}}
ORDERED = {"intent": dict(Q["intent"], option_order=[2, 0, 1])}


def intents(n: int) -> Dict[str, str]:
    verbs = ("activate", "cancel", "change", "check", "dispute", "freeze", "order", "report",
             "request", "reset", "top up", "transfer")
    objects = ("card", "pin", "account", "payment", "refund", "statement", "address", "limit",
               "subscription", "exchange rate")
    names = ["%s %s" % (v, o) for v in verbs for o in objects]
    names += ["other %03d" % i for i in range(max(0, n - len(names)))]
    return {label: "the customer wants to %s" % label for label in names[:n]}


WIDE30 = {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": intents(30)},
          "angry": Q["angry"]}
WIDE40 = {"intent": {"type": "choice", "instructions": "Which intent?", "criteria": intents(40)}}
WIDE300 = {"intent": {"type": "choice", "instructions": "Which intent?",
                      "criteria": intents(300)}}
SCHEMA = {"type": "object", "properties": {
    "team": {"type": "string", "enum": ["billing", "tech", "sales"],
             "description": "Which team should handle this?"},
    "refund": {"type": "boolean", "description": "The customer asks for a refund."},
    "priority": {"type": "integer", "minimum": 1, "maximum": 4,
                 "description": "How urgent is it?"}}}
LONG = {"__repeat__": ["The order arrived late and the box was damaged. ", 120]}
OVER = {"__repeat__": ["word ", 10001]}


def s(text: Any) -> Dict[str, Any]:
    return {"text": text}


def cases() -> List[Dict[str, Any]]:
    out: List[Dict[str, Any]] = []

    def case(id: str, tool: str, **args: Any) -> None:
        out.append({"id": id, "tool": tool, "args": args})

    case("status_after_preload", "laya_status")
    case("predict_english", "laya_predict", state=s(EN), questions=Q)
    case("predict_german", "laya_predict", state=s(DE), questions=Q)
    case("predict_pinned_alias", "laya_predict", state=s(EN), questions=Q, model="ML")
    case("predict_pinned_auto_word", "laya_predict", state=s(EN), questions=Q, model="AUTO")
    case("predict_lang", "laya_predict", state=s(EN), questions=Q, lang="de")
    case("predict_lang_guess", "laya_predict", state=s(EN), questions=Q, lang_guess="fr")
    case("predict_task", "laya_predict", state=s(EN), questions=Q, task="typed_decisions")
    case("predict_budgets", "laya_predict", state=s(EN), questions=Q, max_len=64,
         head_max_len=48)
    case("predict_min_confidence", "laya_predict", state=s(EN), questions=Q, min_confidence=0.9)
    case("predict_noul_labels", "laya_predict", state=s(EN), questions=NOUL_LABELS)
    case("predict_option_order", "laya_predict", state=s(EN), questions=ORDERED)
    case("predict_nested_state", "laya_predict",
         state={"ticket": {"subject": "Refund", "body": EN}, "vip": True, "n": 3}, questions=Q)
    case("bad_questions_empty", "laya_predict", state=s(EN), questions={})
    case("bad_question_type", "laya_predict", state=s(EN),
         questions={"q": {"type": "rank", "instructions": "x"}})
    case("bad_instructions", "laya_predict", state=s(EN),
         questions={"q": {"type": "noul", "instructions": "  "}})
    case("bad_choice_criteria", "laya_predict", state=s(EN),
         questions={"q": {"type": "choice", "instructions": "x", "criteria": ["a", "b"]}})
    case("bad_score_null_level", "laya_predict", state=s(EN),
         questions={"q": {"type": "score", "instructions": "x", "criteria": ["a", None]}})
    case("bad_noul_criteria", "laya_predict", state=s(EN),
         questions={"q": {"type": "noul", "instructions": "x", "criteria": {"yes": "y"}}})
    case("labels_on_choice", "laya_predict", state=s(EN),
         questions={"q": dict(Q["intent"], labels={"false": "a", "true": "b"})})
    case("bad_labels", "laya_predict", state=s(EN),
         questions={"q": dict(Q["angry"], labels={"false": "same", "true": "same"})})
    case("bad_option_order", "laya_predict", state=s(EN),
         questions={"q": dict(Q["intent"], option_order=[0, 0, 1])})
    case("bad_state_empty", "laya_predict", state={}, questions=Q)
    case("bad_model", "laya_predict", state=s(EN), questions=Q, model="gpt-4")
    case("bad_task", "laya_predict", state=s(EN), questions=Q, task="poetry")
    case("task_with_pinned_model", "laya_predict", state=s(EN), questions=Q, model="english",
         task="typed_decisions")
    case("lang_guess_with_pinned_model", "laya_predict", state=s(EN), questions=Q,
         model="english", lang_guess="de")
    case("bad_lang", "laya_predict", state=s(EN), questions=Q, lang=5)
    case("bad_lang_guess", "laya_predict", state=s(EN), questions=Q, lang_guess=["de"])
    case("bad_max_len", "laya_predict", state=s(EN), questions=Q, max_len=0)
    case("bad_head_max_len_bool", "laya_predict", state=s(EN), questions=Q, head_max_len=True)
    case("bad_min_confidence", "laya_predict", state=s(EN), questions=Q, min_confidence=1.5)
    case("lone_surrogate", "laya_predict", state=s("refund \ud800 please"), questions=Q)
    case("choice_300_options", "laya_predict", state=s(EN), questions=WIDE300)
    case("state_over_limit", "laya_predict", state=s(OVER), questions=Q)
    case("route_english", "laya_route", state=s(EN), questions=Q)
    case("route_german", "laya_route", state=s(DE), questions=Q)
    case("route_pinned", "laya_route", state=s(DE), questions=Q, model="en")
    case("route_task", "laya_route", state=s(EN), questions=Q, task="typed-decisions")
    case("route_task_pinned", "laya_route", state=s(EN), questions=Q, model="ml", task="english")
    batch = [{"state": s(EN), "questions": Q}, {"state": s(DE), "questions": Q},
             {"state": s(EN), "questions": Q, "model": "multilingual", "max_len": 96},
             {"state": s(EN), "questions": NOUL_LABELS, "lang": "en"}]
    case("predict_batch", "laya_predict_batch", requests=batch)
    case("predict_batch_options", "laya_predict_batch", requests=batch[:2], batch_size=1,
         min_confidence=0.5, sort_by_length=True)
    case("predict_batch_empty", "laya_predict_batch", requests=[])
    case("predict_batch_bad_item", "laya_predict_batch",
         requests=[batch[0], {"state": s(EN), "questions": {"q": {"type": "x"}}}])
    case("predict_batch_bad_model", "laya_predict_batch",
         requests=[dict(batch[0], model="nope")])
    case("predict_batch_bad_task", "laya_predict_batch", requests=[dict(batch[0], task="")])
    case("predict_batch_bad_budget", "laya_predict_batch",
         requests=[dict(batch[0], head_max_len=-1)])
    case("predict_batch_bad_size", "laya_predict_batch", requests=batch[:1], batch_size=0)
    case("predict_batch_bad_timeout", "laya_predict_batch", requests=batch[:1],
         hooks_timeout=True)
    case("route_batch", "laya_route_batch", requests=batch)
    case("route_batch_not_a_list", "laya_route_batch", requests={"state": s(EN)})
    case("decide_schema", "laya_decide", state=s(EN), schema=SCHEMA)
    case("decide_pinned_gated", "laya_decide", state=s(DE), schema=SCHEMA, model="english",
         min_confidence=0.95)
    case("decide_free_string", "laya_decide", state=s(EN),
         schema={"type": "object", "properties": {"x": {"type": "string"}}})
    case("decide_nested_object", "laya_decide", state=s(EN),
         schema={"type": "object", "properties": {"x": {"type": "object", "properties": {}}}})
    case("decide_bad_min_confidence", "laya_decide", state=s(EN), schema=SCHEMA,
         min_confidence=-1)
    case("preset_triage_moved", "laya_preset", preset="triage", state=s(EN))
    case("preset_router_alias", "laya_preset", preset="router", state={"prompt": EN})
    case("preset_guard_lang", "laya_preset", preset="guard", state={"prompt": DE}, lang="de")
    case("preset_unknown", "laya_preset", preset="spam", state=s(EN))
    case("shortlist_30", "laya_shortlist", state=s(EN), questions=WIDE30, k=5)
    case("shortlist_passthrough", "laya_shortlist", state=s(EN), questions=Q, k=5)
    case("shortlist_pinned_ordered", "laya_shortlist", state=s(EN), model="english", k=4,
         questions={"intent": dict(WIDE30["intent"], option_order=list(range(29, -1, -1)))})
    case("shortlist_bad_k", "laya_shortlist", state=s(EN), questions=WIDE30, k=0)
    case("tournament_40", "laya_tournament", state=s(EN), questions=WIDE40, group_size=8)
    case("tournament_300", "laya_tournament", state=s(EN), questions=WIDE300)
    case("tournament_german_ordered", "laya_tournament", state=s(DE), group_size=10,
         questions={"intent": dict(WIDE40["intent"], option_order=list(range(40))),
                    "angry": Q["angry"]})
    case("tournament_small", "laya_tournament", state=s(EN), questions=Q, model="english")
    case("tournament_bad_group", "laya_tournament", state=s(EN), questions=WIDE40,
         group_size=1)
    case("predict_long", "laya_predict_long", state=s(LONG), questions=Q, window=64)
    case("predict_long_pinned", "laya_predict_long", state=s(LONG), questions=Q, model="ml",
         window=80, stride=40)
    case("predict_long_task_pinned", "laya_predict_long", state=s(LONG), questions=Q,
         model="english", task="typed_decisions")
    case("predict_long_bad_window", "laya_predict_long", state=s(LONG), questions=Q, window=-5)
    return out


def expand(value: Any) -> Any:
    """`{"__repeat__": [text, n]}` as `text * n`, everywhere in a case's arguments."""
    if isinstance(value, dict):
        if set(value) == {"__repeat__"}:
            text, n = value["__repeat__"]
            return text * n
        return {k: expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [expand(v) for v in value]
    return value


def scrub(obj: Any) -> Any:
    """JSON-safe, checkpoint paths as placeholders, timings null."""
    if isinstance(obj, dict):
        return {k: (None if k in ("latency_ms", "total_latency_ms", "per_request_latency_ms")
                    else scrub(v)) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v) for v in obj]
    if isinstance(obj, str):
        return obj.replace(TINY, "<tiny>").replace(ML, "<ml>")
    if hasattr(obj, "item"):
        return obj.item()
    return obj


def run(router: Any, spec: Dict[str, Any]) -> Dict[str, Any]:
    fn = getattr(T, spec["tool"])
    args = expand(spec["args"])
    extra: Dict[str, Any] = {"router": router}
    if spec["tool"] == "laya_status":
        extra["preload"] = True
    if spec["tool"] == "laya_preset":
        extra["preset_builder"] = lambda name: getattr(laya, name)()
    result = error = None
    try:
        result = fn(**args, **extra)
    except T.ToolError as exc:
        error = {"error": exc.code, "message": exc.message}
    except Exception as exc:  # what the server's _wrap sends for anything else
        error = {"error": "internal_error", "message": "%s: %s" % (type(exc).__name__, exc)}
    return dict(spec, result=scrub(result), error=scrub(error))


def main() -> int:
    warnings.simplefilter("ignore")
    router = laya.Router(models=MODELS, device="cpu")
    router.preload(["english", "multilingual"])
    records = [run(router, spec) for spec in cases()]
    payload = {"laya": laya.__version__, "models": {"english": "<tiny>", "multilingual": "<ml>",
                                                    "typed-decisions": "<tiny>"},
               "presets": T.get_available_presets(), "cases": records}
    text = json.dumps(payload, indent=1)  # ASCII: the surrogate case survives
    OUT.write_text(text + "\n", encoding="utf-8")
    n_err = sum(1 for r in records if r["error"])
    print("wrote %s: %d cases, %d errors" % (OUT, len(records), n_err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
