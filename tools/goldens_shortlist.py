"""Record what Laya 0.4.15's shortlist and tournament return (`laya/shortlist.py`):
`tests/goldens/shortlist.json`. Run ONLY with the oracle environment (the real laya and torch),
like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_shortlist.py

The embedders and the stand-in agents come from `tests/shortlist_fixtures.py`, the same file
kime's test (`tests/laya/test_shortlist.py`) replays with, so a ranking depends on the texts
alone. Each case runs on an `Agent` of a committed checkpoint (`tiny`, `multilingual-tiny`), on
a Router whose `english` and `typed-decisions` are `tiny` and whose `multilingual` is
`multilingual-tiny` (preloaded, so no case holds its load warnings), on a stand-in agent, or
(`shortlist_choice`) on no agent. Recorded:

    {"id", "call": "shortlist_choice" | "predict_shortlist" | "predict_tournament",
     "on": null | "agent" | "router" | a stand-in's name, "checkpoint", "embedder",
     "args": the call's arguments (after the agent; `predict_kwargs` by name),
     "result": Laya's return value or null, "error": null | {"type", "message"},
     "warnings": [messages], "embedded": [the lists of texts the embedder was called with],
     "calls": how many predict calls the agent answered}

A dict whose keys are not all strings is written `{"__items__": [[key, value], ...]}`;
checkpoint paths are written `<tiny>` and `<ml>`.
"""
from __future__ import annotations

import copy
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List, Optional

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests import shortlist_fixtures as fx  # noqa: E402  (NumPy only)

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "shortlist.json"
TINY = str(GOLDENS / "checkpoints" / "tiny")
ML = str(GOLDENS / "checkpoints" / "multilingual-tiny")
MODELS = {"english": TINY, "multilingual": ML, "typed-decisions": TINY}

_VERBS = ("activate", "cancel", "change", "check", "dispute", "freeze", "order", "report",
          "request", "reset", "top up", "transfer")
_OBJECTS = ("card", "pin", "account", "payment", "refund", "statement", "address", "limit",
            "subscription", "exchange rate")


def intents(n: int) -> List[str]:
    """`n` distinct intent labels (`freeze card`, ...), verb-major."""
    names = ["%s %s" % (verb, obj) for verb in _VERBS for obj in _OBJECTS]
    return (names + ["other %03d" % i for i in range(max(0, n - len(names)))])[:n]


def described(n: int) -> Dict[str, Any]:
    """`n` intents with descriptions: text, empty, None and a structured one."""
    out: Dict[str, Any] = {}
    for i, label in enumerate(intents(n)):
        out[label] = (None if i % 7 == 3 else "" if i % 11 == 5
                      else {"hint": label.split()[0], "rank": i} if i % 13 == 8
                      else "the customer wants to %s" % label)
    return out


STATE = "I was charged twice for my card payment and I want a refund today."
STATE_DE = "Ich wurde zweimal belastet und möchte mein Geld heute zurück."
DICT_STATE = {"ticket": {"subject": "Card frozen", "body": "Please unfreeze my card."},
              "vip": True}
CONVERSATION = [{"role": "user", "content": "My card got stuck in the machine."},
                {"role": "assistant", "content": "Sorry! Which machine?"},
                {"role": "user", "content": "The one on Baker Street, please freeze it."}]
NEGATIVE = "zzz zzz qqq"  # few letters: its cosine with many labels comes out negative
ANAGRAMS = ["stop", "pots", "tops", "spot", "go", "og", "abc"]

SCORE = {"type": "score", "instructions": "How urgent is it?",
         "criteria": ["not urgent", "soon", "now"]}
NOUL = {"type": "noul", "instructions": "The customer is angry."}
SMALL = {"type": "choice", "instructions": "Channel?", "criteria": ["email", "phone", "chat"]}


def choice(criteria: Any, **extra: Any) -> Dict[str, Any]:
    return {"type": "choice", "instructions": "What does the customer want?",
            "criteria": criteria, **extra}


def case(cid: str, call: str, on: Optional[str], checkpoint: Optional[str],
         embedder: Optional[str] = None, **args: Any) -> Dict[str, Any]:
    return {"id": cid, "call": call, "on": on, "checkpoint": checkpoint, "embedder": embedder,
            "args": args}


def shortlist_choice_cases() -> List[Dict[str, Any]]:
    sc = "shortlist_choice"

    def c(cid: str, embedder: str = "chars", **args: Any) -> Dict[str, Any]:
        return case("sc_" + cid, sc, None, None, embedder, **args)

    encoder = [case("sc_%s_encoder" % ck.split("-")[0], sc, None, ck, "encoder", state=state,
                    criteria=described(40), k=8, return_scores=True)
               for ck, state in (("tiny", STATE), ("multilingual-tiny", STATE_DE))]
    return encoder + [
        c("dict_k5", state=STATE, criteria=described(30), k=5),
        c("list_k10_instructions", state=STATE, criteria=intents(40), k=10,
          instructions="Which intent fits?"),
        c("return_scores", state=STATE, criteria=intents(25), k=6, return_scores=True),
        c("default_k", state=STATE, criteria=intents(45)),
        c("passthrough_k_above_n", state=STATE, criteria=intents(8), k=20, return_scores=True),
        c("passthrough_k_equal_n", state=STATE, criteria=intents(8), k=8),
        c("k_one_below_n", state=STATE, criteria=intents(9), k=8, return_scores=True),
        c("k1", state=STATE, criteria=described(12), k=1, return_scores=True),
        c("ties_keep_earlier", state="post", criteria=ANAGRAMS, k=3, return_scores=True),
        c("negative_scores", state=NEGATIVE, criteria=intents(30), k=30 - 1,
          return_scores=True),
        c("zero_query", "zero_query", state=STATE, criteria=intents(10), k=4,
          return_scores=True),
        c("nan_rows_as_zero", "nan", state=STATE, criteria=["box", "yes", "card", "pin", "sky"],
          k=4, return_scores=True),
        c("plain_lists", "lists", state=STATE, criteria=intents(12), k=3, return_scores=True),
        c("dict_state", state=DICT_STATE, criteria=intents(20), k=5, return_scores=True),
        c("conversation_state", state=CONVERSATION, criteria=intents(20), k=5),
        c("structured_instructions", state=STATE, criteria=intents(15), k=4,
          instructions={"task": "intent", "lang": "en"}),
        c("empty_instructions", state=STATE, criteria=intents(15), k=4, instructions=""),
        c("int_labels", state=STATE, criteria={1: "one", 2: "", 3: None, 40: ["x", 1]}, k=2,
          return_scores=True),
        c("none_state", state=None, criteria=intents(6), k=2),
        c("error_k0", state=STATE, criteria=intents(5), k=0),
        c("error_k_negative", state=STATE, criteria=intents(5), k=-3),
        c("error_k_bool", state=STATE, criteria=intents(5), k=True),
        c("error_k_float", state=STATE, criteria=intents(5), k=2.0),
        c("error_k_str", state=STATE, criteria=intents(5), k="3"),
        c("error_criteria_str", state=STATE, criteria="refund, cancel", k=1),
        c("error_criteria_none", state=STATE, criteria=None, k=1),
        c("error_criteria_empty", state=STATE, criteria=[], k=1),
        c("error_criteria_empty_dict", state=STATE, criteria={}, k=1),
        c("error_label_duplicated", state=STATE, criteria=["a", "b", "a"], k=1),
        c("error_label_int_float", state=STATE, criteria=[1, 1.0, 2], k=1),
        c("error_label_unhashable", state=STATE, criteria=["a", ["b"]], k=1),
        c("error_not_callable", "not_callable", state=STATE, criteria=intents(5), k=2),
        c("error_wrong_rows", "wrong_rows", state=STATE, criteria=intents(5), k=2),
        c("error_flat", "flat", state=STATE, criteria=intents(5), k=2),
        c("error_no_dim", "no_dim", state=STATE, criteria=intents(5), k=2),
        c("passthrough_not_callable", "not_callable", state=STATE, criteria=intents(3), k=3),
    ]


def shortlist_cases(ck: str) -> List[Dict[str, Any]]:
    ps = "predict_shortlist"
    p = "ps_%s_" % ck.split("-")[0]

    def c(cid: str, embedder: str = "chars", on: str = "agent", **args: Any) -> Dict[str, Any]:
        return case(p + cid, ps, on, ck, embedder, **args)

    wide = choice(described(40))
    ordered = choice(intents(30), option_order=list(range(30))[::-1])
    return [
        c("mixed", state=STATE, questions={"intent": wide, "urgency": SCORE, "angry": NOUL,
                                           "channel": SMALL}, k=8),
        c("default_k", state=STATE, questions={"intent": choice(intents(60))}),
        c("option_order_dropped", state=STATE, k=5, questions={
            "intent": ordered, "channel": dict(SMALL, option_order=[2, 0, 1]),
            "urgency": dict(SCORE, option_order=[1, 2, 0])}),
        c("two_orders_two_warnings", state=STATE, k=4, questions={
            "a": ordered, "b": choice(intents(12), option_order=5)}),
        c("k_negative_scores", state=NEGATIVE, k=29, questions={"intent": choice(intents(30))}),
        c("ties", state="post", k=2, questions={"w": choice(ANAGRAMS)}),
        c("non_choice_only", state=STATE, k=2, questions={"urgency": SCORE, "angry": NOUL}),
        c("empty_questions", state=STATE, questions={}),
        c("dict_state", state=DICT_STATE, k=6, questions={"intent": choice(intents(24))}),
        c("kwargs_forwarded", state=STATE, k=6, questions={"intent": wide, "angry": NOUL},
          max_len=96, head_max_len=48, min_confidence=0.9),
        c("system_one_only", on="system_one_only", state=STATE, k=5,
          questions={"intent": wide}),
        c("router_model", on="router", state=STATE, k=5, questions={"intent": wide,
                                                                    "angry": NOUL},
          model="english" if ck == "tiny" else "multilingual"),
        c("encoder_embedder", "encoder", state=DICT_STATE, k=6,
          questions={"intent": choice(described(40)), "angry": NOUL}),
        c("error_questions_list", state=STATE, questions=[wide]),
        c("error_k_zero", state=STATE, questions={"intent": wide}, k=0),
        c("error_k_bool", state=STATE, questions={"intent": wide}, k=False),
        c("error_choice_without_criteria", state=STATE, k=3,
          questions={"angry": NOUL, "intent": {"type": "choice", "instructions": "?"}}),
        c("error_criteria_str", state=STATE, k=3, questions={"intent": choice("a, b")}),
        c("error_non_dict_question", state=STATE, k=3, questions={"intent": wide, "bad": 3}),
        c("error_not_callable", "not_callable", state=STATE, k=3, questions={"intent": wide}),
        c("error_no_predict", on="no_predict", state=STATE, k=3, questions={"intent": wide}),
        c("error_list_reply", on="list_reply", state=STATE, k=3, questions={"intent": wide}),
        c("error_bad_state", state=None, k=3, questions={"intent": wide}),
    ]


def tournament_cases(ck: str) -> List[Dict[str, Any]]:
    pt = "predict_tournament"
    p = "pt_%s_" % ck.split("-")[0]

    def c(cid: str, on: str = "agent", **args: Any) -> Dict[str, Any]:
        return case(p + cid, pt, on, ck, None, **args)

    return [
        c("40_default", state=STATE, questions={"intent": choice(intents(40))}),
        c("120_g16", state=STATE, questions={"intent": choice(described(120)), "angry": NOUL},
          group_size=16),
        c("120_g4_three_rounds", state=STATE, questions={"intent": choice(intents(120))},
          group_size=4),
        c("77_g8_described", state=STATE_DE, questions={"intent": choice(described(77))},
          group_size=8),
        c("60_g2", state=STATE, questions={"intent": choice(intents(60))}, group_size=2),
        c("100_g10_order", state=STATE, group_size=10, questions={
            "intent": choice(intents(100), option_order=list(range(100))),
            "channel": dict(SMALL, option_order=[2, 1, 0])}),
        c("two_wide_and_others", state=DICT_STATE, group_size=6, questions={
            "a": choice(intents(45)), "urgency": SCORE, "b": choice(described(13)),
            "channel": SMALL, "angry": NOUL}),
        c("no_round_needed", state=STATE, questions={"channel": SMALL, "urgency": SCORE},
          group_size=3),
        c("exactly_group", state=STATE, questions={"intent": choice(intents(16))}),
        c("group_plus_one", state=STATE, questions={"intent": choice(intents(17))}),
        c("int_labels", state=STATE, group_size=5,
          questions={"intent": choice({i: "option %d" % i for i in range(1, 23)})}),
        c("kwargs_forwarded", state=CONVERSATION, group_size=12, max_len=128,
          min_confidence=0.5, questions={"intent": choice(intents(50)), "angry": NOUL}),
        c("empty_questions", state=STATE, questions={}),
        c("system_one_only", on="system_one_only", state=STATE, group_size=8,
          questions={"intent": choice(intents(40))}),
        c("router_model", on="router", state=STATE, group_size=8,
          questions={"intent": choice(intents(70)), "angry": NOUL},
          model="english" if ck == "tiny" else "multilingual"),
        c("router_routed", on="router", state=STATE if ck == "tiny" else STATE_DE,
          group_size=16, questions={"intent": choice(described(90))}),
        c("error_group_1", state=STATE, questions={"intent": choice(intents(40))}, group_size=1),
        c("error_group_0", state=STATE, questions={"intent": choice(intents(40))}, group_size=0),
        c("error_group_bool", state=STATE, questions={"intent": choice(intents(40))},
          group_size=True),
        c("error_group_float", state=STATE, questions={"intent": choice(intents(40))},
          group_size=16.0),
        c("error_group_str", state=STATE, questions={"intent": choice(intents(40))},
          group_size="16"),
        c("error_questions_list", state=STATE, questions=[choice(intents(40))]),
        c("error_questions_none", state=STATE, questions=None),
        c("error_choice_without_criteria", state=STATE,
          questions={"intent": {"type": "choice", "instructions": "?"}}),
        c("error_criteria_str", state=STATE, questions={"intent": choice("a b c")}),
        c("error_criteria_empty", state=STATE, questions={"intent": choice([])}),
        c("error_label_duplicated", state=STATE, questions={"intent": choice(["a", "b", "a"])}),
        c("error_non_dict_question", state=STATE, group_size=8,
          questions={"intent": choice(intents(40)), "bad": "x"}),
        c("error_no_predict", on="no_predict", state=STATE,
          questions={"intent": choice(intents(40))}),
        c("error_list_reply", on="list_reply", state=STATE,
          questions={"intent": choice(intents(40))}),
        c("error_list_reply_no_round", on="list_reply", state=STATE, questions={"q": NOUL}),
        c("error_answers_list", on="answers_list", state=STATE,
          questions={"intent": choice(intents(40))}),
        c("error_missing_group", on="missing_group", state=STATE,
          questions={"intent": choice(intents(40))}),
        c("error_no_choice", on="no_choice", state=STATE,
          questions={"intent": choice(intents(40))}),
        c("error_bad_state", state=None, questions={"intent": choice(intents(40))}),
    ]


# ------------------------------------------------------------------------------------ running

def to_json(obj: Any) -> Any:
    """Plain JSON, except a dict with a non-str key becomes {"__items__": [[key, value], ...]}
    (the encoding `tests/laya_replay.py` reads)."""
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: to_json(v) for k, v in obj.items()}
        return {"__items__": [[to_json(k), to_json(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    return obj


def scrub(value: Any) -> Any:
    """Checkpoint paths as `<tiny>` / `<ml>`, so the file does not depend on the checkout."""
    text = json.dumps(value, ensure_ascii=False).replace(ML, "<ml>").replace(TINY, "<tiny>")
    return json.loads(text)


def embedder_of(spec: Dict[str, Any], agents: Dict[str, Any], shortlist: Any) -> Any:
    """The case's embedder: a fixture's, or (`encoder`) laya's own over the checkpoint."""
    if spec["embedder"] == "encoder":
        return fx.Recording(shortlist.embed_fn_from_agent(agents[spec["checkpoint"]]))
    return fx.embed_fn(spec["embedder"]) if spec["embedder"] else None


def check_margins(spec: Dict[str, Any], agents: Dict[str, Any], shortlist: Any) -> None:
    """An `encoder` case must not hang on embedding noise: neighbouring cosines, the cut
    included, at least 1e-4 apart (torch's and kime's vectors agree far closer)."""
    args = spec["args"]
    questions = args.get("questions", {"": {"criteria": args.get("criteria"), "type": "choice"}})
    for question in questions.values():
        if question.get("type") != "choice":
            continue
        criteria = question["criteria"]
        _labels, scores = shortlist.shortlist_choice(
            args["state"], criteria, shortlist.embed_fn_from_agent(agents[spec["checkpoint"]]),
            len(criteria) - 1, instructions=question.get("instructions"), return_scores=True)
        gaps = [a - b for a, b in zip(scores, scores[1:])][:args["k"] + 1]
        assert min(gaps) > 1e-4, "case %s: cosines %r too close" % (spec["id"], gaps)


def run_case(spec: Dict[str, Any], agents: Dict[str, Any], router: Any,
             shortlist: Any) -> Dict[str, Any]:
    args = copy.deepcopy(spec["args"])
    embedder = embedder_of(spec, agents, shortlist)
    target: Optional[fx.Counted] = None
    if spec["on"] == "agent":
        target = fx.Counted(agents[spec["checkpoint"]])
    elif spec["on"] == "router":
        target = fx.Counted(router)
    elif spec["on"] is not None:
        target = fx.Counted(fx.FAKE_AGENTS[spec["on"]](agents[spec["checkpoint"]]))
    result, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if spec["call"] == "shortlist_choice":
                result = shortlist.shortlist_choice(args.pop("state"), args.pop("criteria"),
                                                    embedder, **args)
            elif spec["call"] == "predict_shortlist":
                result = shortlist.predict_shortlist(target, args.pop("state"),
                                                     args.pop("questions"), embedder, **args)
            else:
                result = shortlist.predict_tournament(target, args.pop("state"),
                                                      args.pop("questions"), **args)
        except (ValueError, TypeError, KeyError) as exc:
            error = {"type": type(exc).__name__, "message": str(exc)}
    if ("error_" in spec["id"]) != (error is not None):
        raise AssertionError("case %s: error=%r" % (spec["id"], error))
    return dict(spec, result=scrub(to_json(result)), error=error,
                warnings=[str(w.message) for w in caught],
                embedded=getattr(embedder, "calls", []),
                calls=target.calls if target is not None else 0)


def main() -> int:
    for key in [k for k in os.environ if k.startswith("LAYA_")]:
        del os.environ[key]
    import laya
    import laya.shortlist

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {name: laya.Agent(str(GOLDENS / "checkpoints" / name), device="cpu")
                  for name in ("tiny", "multilingual-tiny")}
        router = laya.Router(models=MODELS, device="cpu")
        router.preload()  # its load warnings are no case's
    specs = shortlist_choice_cases()
    for ck in agents:
        specs += shortlist_cases(ck) + tournament_cases(ck)
    ids = [s["id"] for s in specs]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    for spec in specs:
        if spec["embedder"] == "encoder":
            check_margins(spec, agents, laya.shortlist)
    cases = [run_case(spec, agents, router, laya.shortlist) for spec in specs]
    for c in cases:
        c["args"] = to_json(c["args"])
    negative = [c for c in cases if c["id"] == "sc_negative_scores"][0]["result"][1]
    assert min(negative) < 0 < max(negative), "the negative case must mix signs"
    rounds = [meta["rounds"] for c in cases if c["call"] == "predict_tournament" and c["result"]
              for meta in c["result"]["tournament"].values()]
    assert max(rounds) >= 3, "a case must play several rounds"
    data = {"laya_version": laya.__version__, "cases": cases}
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    print("wrote %s: %d cases (%d refusals), tournament rounds up to %d"
          % (OUT.relative_to(ROOT), len(cases), sum(c["error"] is not None for c in cases),
             max(rounds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
