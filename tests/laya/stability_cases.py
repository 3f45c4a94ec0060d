"""`OptionStabilityHook`'s golden cases and the one runner that plays them, for Laya 0.4.15 in the
oracle (`tools/goldens_stability.py` records `tests/goldens/stability.json`) and for kime
(`tests/laya/test_stability.py` replays it). Imports neither library: the runner is handed the
`hooks` module (`laya.hooks`, or `kime.laya.hooks`, whose names come from `kime.laya.stability`)
and the agents, so both sides run the same calls.

A case is `{"id", "call", "args", optional "checkpoint", "hook" (the hook's keywords),
"install" ("call": `hooks=` on the call, "agent": `add_hook`, "router": the Router's own),
"layout" (an `option_layout` set as `agent.config` for the call)}`. JSON has no sets, tuples or
NumPy scalars: `{"__set__": [...]}`, and `"numpy": true` on a `calibrate_reliability` case (its
scores as float32, its labels as `np.bool_`), stand for them.
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, List

INTENT = {"type": "choice", "instructions": "What does the customer want?",
          "criteria": {"refund": "money back", "info": None, "complaint": "",
                       "cancel": "   "}}
TONE = {"type": "choice", "instructions": "What is the tone?",
        "criteria": ["positive", "negative", "neutral", "mixed", "angry"]}
QUESTIONS = {
    "intent": INTENT,
    "tone": TONE,
    "only": {"type": "choice", "instructions": "Pick the only one.", "criteria": ["yes"]},
    "urgency": {"type": "score", "instructions": "How urgent is it?",
                "criteria": ["not urgent", "soon", "now"]},
    "human": {"type": "noul", "instructions": "Does this need a person?"},
}
SMALL = {"intent": INTENT, "human": QUESTIONS["human"]}
WIDE = {"route": {"type": "choice", "instructions": "Which team?",
                  "criteria": ["team%02d" % i for i in range(30)]}}
"""More than 26 options: no letters exist for them."""
MID = {"route": {"type": "choice", "instructions": "Which team?",
                 "criteria": {"t%d" % i: "team %d" % i for i in range(22)}}}
"""Over the default `rename_max_options` (20), under 26."""
WIDE_BUDGET = {"max_len": 480, "head_max_len": 320}
CROWDED = {"queue": {"type": "choice", "instructions": "Which queue?",
                     "criteria": ["customer support escalation queue number %d" % i
                                  for i in range(16)]}}
"""Options cut to the same tokens: `usage["options"]` reports them, for the originals only."""

EN = "I was charged twice for my order and I want my money back today."
STATES = [EN, "Where is my parcel? It has been a week.",
          "Cancel my subscription, this is the worst service I have used."]
DICT_STATE = {"ticket": 812, "subject": "double charge", "body": EN}
LIST_STATE = [{"role": "user", "content": "hi"}, {"role": "user", "content": EN}]
LONG_STATE = " ".join([EN] * 12)
HOOK = {"accept": 0.9, "escalate": 0.3}


def _predict(cid: str, hook: Dict[str, Any], questions: Any = None, state: Any = EN,
             **kwargs: Any) -> Dict[str, Any]:
    args = dict(kwargs, state=state, questions=SMALL if questions is None else questions)
    return {"id": cid, "call": "predict", "hook": hook, "args": args}


def _agent_cases() -> List[Dict[str, Any]]:
    """Calls through an agent (recorded on each checkpoint)."""
    cases = [
        _predict("defaults", HOOK, QUESTIONS),
        _predict("thresholds_none", {"accept": None, "escalate": None}, QUESTIONS),
        _predict("accept_only", {"accept": 0.2, "escalate": None}),
        _predict("accept_low", {"accept": 0.05, "escalate": 0.01}),
        _predict("probes_reorder", dict(HOOK, probes="reorder"), QUESTIONS),
        _predict("probes_rename", dict(HOOK, probes="rename"), QUESTIONS),
        _predict("probes_all", dict(HOOK, probes="all")),
        _predict("probes_auto", dict(HOOK, probes="auto")),
        _predict("probes_list", dict(HOOK, probes=["rename", "reorder", "rename"])),
        _predict("n_shuffles_0", dict(HOOK, n_shuffles=0), QUESTIONS),
        _predict("n_shuffles_1", dict(HOOK, n_shuffles=1)),
        _predict("n_shuffles_2", dict(HOOK, n_shuffles=2)),
        _predict("relabel_false", dict(HOOK, relabel=False), QUESTIONS),
        _predict("rename_max_4", dict(HOOK, rename_max_options=4), QUESTIONS),
        _predict("variants_fast", dict(HOOK, variants="fast"), QUESTIONS),
        _predict("variants_none", dict(HOOK, variants=None)),
        _predict("variants_list", dict(HOOK, variants=["shuffle2", "letters"]), QUESTIONS),
        _predict("variants_tuple", dict(HOOK, variants=("letters_shuffle", "reversed"))),
        _predict("variants_unrun", dict(HOOK, variants=["shuffle3"], n_shuffles=1)),
        _predict("seed_text", dict(HOOK, seed="fixed")),
        _predict("seed_int", dict(HOOK, seed=42), QUESTIONS),
        _predict("dict_state", HOOK, state=DICT_STATE),
        _predict("list_state", HOOK, state=LIST_STATE),
        _predict("truncated", HOOK, state=LONG_STATE, max_len=72),
        _predict("wide_no_letters", dict(HOOK, rename_max_options=40), WIDE, **WIDE_BUDGET),
        _predict("wide_rename_only", dict(HOOK, probes="rename", rename_max_options=40), WIDE,
                 **WIDE_BUDGET),
        _predict("mid_over_rename_max", HOOK, MID, **WIDE_BUDGET),
        _predict("mid_rename_max_22", dict(HOOK, rename_max_options=22, variants="fast"), MID,
                 **WIDE_BUDGET),
        _predict("collapsed", dict(HOOK, variants="fast"), CROWDED, max_len=300),
        _predict("min_confidence", HOOK, min_confidence=0.5),
        _predict("no_choice", HOOK, {"human": QUESTIONS["human"]}),
        _predict("no_questions", HOOK, {}),
        _predict("sep_in_id", HOOK, {"intent::rel1": INTENT}),
        _predict("parallel", HOOK, QUESTIONS, layout="parallel"),
        _predict("parallel_spelled", dict(HOOK, variants="fast"), layout=" Parallel "),
        _predict("parallel_no_relabel", dict(HOOK, relabel=False), layout="parallel"),
        _predict("parallel_reorder", dict(HOOK, probes="reorder"), layout="parallel"),
        _predict("sequential_spelled", dict(HOOK, variants="fast"), layout="SEQUENTIAL"),
        _predict("layout_unknown", dict(HOOK, variants="fast"), layout="diagonal"),
        _predict("layout_not_text", dict(HOOK, variants="fast"), layout=5),
        dict(_predict("installed", HOOK, QUESTIONS), install="agent"),
        {"id": "batch", "call": "predict_batch", "hook": HOOK,
         "args": {"states": STATES, "questions": QUESTIONS}},
        {"id": "batch_seeded", "call": "predict_batch", "hook": dict(HOOK, seed="s"),
         "args": {"states": STATES, "questions": SMALL}},
        {"id": "batch_size_2", "call": "predict_batch", "hook": dict(HOOK, variants="fast"),
         "args": {"states": STATES, "questions": SMALL, "batch_size": 2}},
        {"id": "batch_one", "call": "predict_batch", "hook": HOOK,
         "args": {"states": [STATES[1]], "questions": SMALL}},
    ]
    for case in cases:
        if "layout" in case["args"]:
            case["layout"] = case["args"].pop("layout")
    return cases


def _router_cases() -> List[Dict[str, Any]]:
    """Calls through a Router over the committed checkpoints (recorded once)."""
    requests = [{"state": EN, "questions": SMALL},
                {"state": STATES[1], "questions": SMALL, "model": "multilingual"},
                {"state": STATES[2], "questions": QUESTIONS, "model": "english"}]
    return [
        {"id": "router_predict", "call": "router.predict", "hook": HOOK, "install": "router",
         "args": {"state": EN, "questions": QUESTIONS}},
        {"id": "router_predict_call_hook", "call": "router.predict",
         "hook": dict(HOOK, n_shuffles=1),
         "args": {"state": STATES[2], "questions": SMALL, "model": "multilingual"}},
        {"id": "router_batch", "call": "router.predict_batch", "hook": HOOK, "install": "router",
         "args": {"requests": requests}},
        {"id": "router_batch_call_hook", "call": "router.predict_batch",
         "hook": dict(HOOK, variants="fast"), "args": {"requests": requests}},
    ]


def _function_cases() -> List[Dict[str, Any]]:
    """`make_variants`, `decide_reliability`, `calibrate_reliability` on fixed inputs."""
    abc = ["a", "b", "c"]
    out: List[Dict[str, Any]] = []
    for i, args in enumerate([
            {"labels": abc, "seed_key": "x"},
            {"labels": abc, "seed_key": "batch|intent", "n_shuffles": 0},
            {"labels": ["p", "q", "r", "s", "t"], "seed_key": "state|q", "n_shuffles": 2},
            {"labels": abc, "seed_key": "x", "relabel": False},
            {"labels": abc, "seed_key": "x", "reorder": False},
            {"labels": abc, "seed_key": "x", "include": ["letters", "shuffle1"]},
            {"labels": abc, "seed_key": "x", "include": []},
            {"labels": ["a", "b"], "seed_key": "two"},
            {"labels": ["only"], "seed_key": "one"},
            {"labels": ["x%d" % j for j in range(27)], "seed_key": "wide", "n_shuffles": 1},
            {"labels": ["x%d" % j for j in range(26)], "seed_key": "edge", "n_shuffles": 1},
            {"labels": [3, 1, 2], "seed_key": "ints"},
            {"labels": ["é", "ü", "ß"], "seed_key": "ünï|côdé"}]):
        out.append({"id": "make_variants_%d" % i, "call": "make_variants", "args": args})
    for i, args in enumerate([
            {"soft_stability": 0.95, "accept": 0.9, "escalate": 0.3},
            {"soft_stability": 0.9, "accept": 0.9, "escalate": 0.3},
            {"soft_stability": 0.5, "accept": 0.9, "escalate": 0.3},
            {"soft_stability": 0.3, "accept": 0.9, "escalate": 0.3},
            {"soft_stability": 0.1, "accept": 0.9, "escalate": 0.3},
            {"soft_stability": 0.1, "accept": 0.9},
            {"soft_stability": 0.99, "accept": None, "escalate": 0.3}]):
        out.append({"id": "decide_%d" % i, "call": "decide_reliability", "args": args})
    scores = [0.95, 0.9, 0.9, 0.8, 0.7, 0.55, 0.4, 0.35, 0.2, 0.1]
    correct = [True, True, True, True, False, True, False, False, False, True]
    for i, args in enumerate([
            {"soft_scores": scores, "correct": correct},
            {"soft_scores": scores, "correct": correct, "target_accuracy": 0.75},
            {"soft_scores": scores, "correct": correct, "target_accuracy": 1.0,
             "max_escalate_accuracy": 0.0},
            {"soft_scores": scores, "correct": [False] * 10},
            {"soft_scores": [0.5, 0.5, 0.5], "correct": [True, False, True],
             "target_accuracy": 0.6},
            {"soft_scores": [1, 0], "correct": [True, False]},
            {"soft_scores": scores, "correct": correct, "numpy": True},
            {"soft_scores": [0.5], "correct": [True, False]},
            {"soft_scores": [], "correct": []},
            {"soft_scores": [0.5], "correct": [True], "target_accuracy": 1.5},
            {"soft_scores": [0.5], "correct": [True], "target_accuracy": True},
            {"soft_scores": [0.5], "correct": [True], "max_escalate_accuracy": float("nan")},
            {"soft_scores": [0.5, float("inf")], "correct": [True, True]},
            {"soft_scores": [0.5, True], "correct": [True, True]},
            {"soft_scores": [0.5, "0.5"], "correct": [True, True]},
            {"soft_scores": [0.5, -0.01], "correct": [True, True]},
            {"soft_scores": [0.5, 0.6], "correct": [True, 1]}]):
        out.append({"id": "calibrate_%d" % i, "call": "calibrate_reliability", "args": args})
    return out


def _construct_cases() -> List[Dict[str, Any]]:
    """The constructor: what it keeps, and every refusal."""
    kwargs_list: List[Dict[str, Any]] = [
        HOOK, {"accept": None, "escalate": None}, {"accept": 1, "escalate": 0},
        {"accept": 1.01, "escalate": 1.0}, dict(HOOK, probes="all", seed=7, variants="fast"),
        dict(HOOK, probes=["reorder"], n_shuffles=0, relabel=False, rename_max_options=2),
        dict(HOOK, variants=("letters", "reversed"), probes={"__set__": ["rename"]}),
        {},
        {"accept": 0.9},
        dict(HOOK, probes="flip"), dict(HOOK, probes=[]), dict(HOOK, probes=["reorder", "flip"]),
        dict(HOOK, probes=5), dict(HOOK, probes={"reorder": 1}),
        dict(HOOK, n_shuffles=-1), dict(HOOK, n_shuffles=2.0), dict(HOOK, n_shuffles=True),
        dict(HOOK, relabel=1), dict(HOOK, relabel=None),
        dict(HOOK, rename_max_options=1), dict(HOOK, rename_max_options=True),
        dict(HOOK, rename_max_options="20"),
        dict(HOOK, variants="medium"), dict(HOOK, variants=[]),
        dict(HOOK, variants=["bogus", "reversed", "shuffle4"]), dict(HOOK, variants=5),
        {"accept": True, "escalate": None}, {"accept": "0.9", "escalate": None},
        {"accept": 1.5, "escalate": None}, {"accept": -0.1, "escalate": None},
        {"accept": float("nan"), "escalate": None}, {"accept": None, "escalate": 1.01},
        {"accept": None, "escalate": float("inf")}, {"accept": 0.5, "escalate": 0.75},
        {"accept": 1, "escalate": 1.0}, {"accept": 0.9, "escalate": False},
        dict(HOOK, relabel="yes", n_shuffles=-2),
    ]
    cases = [{"id": "construct_%d" % i, "call": "construct", "args": {"kwargs": kw}}
             for i, kw in enumerate(kwargs_list)]
    cases.append({"id": "construct_positional", "call": "construct",
                  "args": {"positional": [0.9, 0.3], "kwargs": {}}})
    return cases


def cases(checkpoints: List[str]) -> List[Dict[str, Any]]:
    """Every case: the agent calls once per checkpoint, then the rest."""
    out = []
    for name in checkpoints:
        for case in _agent_cases():
            out.append(dict(case, id="%s_%s" % (name, case["id"]), checkpoint=name))
    return out + _router_cases() + _function_cases() + _construct_cases()


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if set(value) == {"__set__"}:
            return set(value["__set__"])
        return {k: _decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def hook_attributes(hook: Any) -> Dict[str, Any]:
    """What a constructed hook keeps (a set's order is the hash's, so probes come sorted)."""
    probes = None if hook.probes is None else sorted(hook.probes)
    variants = hook.variants
    return {"probes": probes, "n_shuffles": hook.n_shuffles, "relabel": hook.relabel,
            "rename_max_options": hook.rename_max_options,
            "variants": list(variants) if isinstance(variants, (tuple, set)) else variants,
            "accept": hook.accept, "escalate": hook.escalate, "seed": hook.seed}


def run_case(hooks: Any, case: Dict[str, Any], agents: Dict[str, Any],
             make_router: Callable[[List[Any]], Any]) -> Any:
    """Play one case with `hooks` (the module holding `OptionStabilityHook` and its helpers).
    `make_router(hooks)` builds a Router over the committed checkpoints with those hooks."""
    import numpy as np

    args = _decode(copy.deepcopy(case["args"]))
    kind = case["call"]
    if kind == "construct":
        return hook_attributes(hooks.OptionStabilityHook(*args.get("positional", []),
                                                         **args["kwargs"]))
    if kind == "make_variants":
        return [list(v) for v in hooks.make_variants(**args)]
    if kind == "decide_reliability":
        return hooks.decide_reliability(**args)
    if kind == "calibrate_reliability":
        if args.pop("numpy", False):
            args["soft_scores"] = [np.float32(s) for s in args["soft_scores"]]
            args["correct"] = [np.bool_(c) for c in args["correct"]]
        return list(hooks.calibrate_reliability(**args))
    hook = hooks.OptionStabilityHook(**_decode(case["hook"]))
    install = case.get("install", "call")
    if kind.startswith("router."):
        router = make_router([hook] if install == "router" else [])
        method = getattr(router, kind.split(".", 1)[1])
        extra = {} if install == "router" else {"hooks": [hook]}
        if kind == "router.predict":
            return method(args.pop("state"), args.pop("questions"), **args, **extra)
        return method(args.pop("requests"), **args, **extra)
    agent = agents[case["checkpoint"]]
    extra = {}
    if install == "agent":
        agent.add_hook(hook)
    else:
        extra["hooks"] = [hook]
    if "layout" in case:
        agent.config = {"option_layout": case["layout"]}
    try:
        if kind == "predict":
            return agent.predict(args.pop("state"), args.pop("questions"), **args, **extra)
        return agent.predict_batch(args.pop("states"), args.pop("questions"), **args, **extra)
    finally:
        if install == "agent":
            agent.remove_hook(hook)
        if "layout" in case:
            del agent.config
