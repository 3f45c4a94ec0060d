"""Record Laya 0.4.15 on checkpoints in its parallel option layout (issue 26):
`tests/goldens/checkpoints/parallel-tiny/` and `tests/goldens/parallel.json`. Run ONLY with the
oracle interpreter (the real laya, torch 2.13 and transformers 5, which the layout needs):

    .oracle/bin/python tools/goldens_parallel.py [--rewrite-checkpoint]

The checkpoint (written when absent, or with `--rewrite-checkpoint`) is trained by Laya's own
trainer: the laya-init shape (`tools/goldens_laya_init.py`: hidden 64, layer 0 global, layer 1
sliding with `local_attention` 16, so a half-window of 8 position ids, shorter than most rows) is
built by `AutoModel.from_config` + `laya.common.DecisionModel`, given kime's writer's seeded
weights for that shape (`kime.synthetic.shapes.random_weights`: drawn so a random model answers
with spread; from transformers' init four epochs stayed at ln K), saved by
`laya.train.save_checkpoint`, then fine-tuned by `laya.train.finetune` with
`TrainConfig(option_layout="parallel", ...)` (`TRAIN`) on synthetic support tickets
(`training_rows`), which writes `"option_layout": "parallel"`, the fitted temperatures and the
training report into `rl_agent_config.json`.

`parallel.json` (UTF-8, indent 1): versions, `checkpoints` (how each was made, its load
warnings, laya's `parallel_options`) and:

- `cases`: `{"id", "checkpoint", "about", "call", "args", "result", "error", "warnings",
  "rows"}` as in `cases.json` (`tools/make_goldens.py`), `call` one of `predict`,
  `predict_batch` and `predict_long`; each row also keeps `position_ids` and `option_ids`, the
  layout Laya fed the encoder. `checkpoint` is `parallel-tiny` (the trained one) or one written
  by `kime.synthetic.write_checkpoint(..., option_layout="parallel")` into a temporary
  directory (`synthetic-tiny`, `synthetic-multilingual-tiny`: the `checkpoints` entry says
  how), which proves the writer's output loads in Laya as a parallel checkpoint.
- `layouts`: Laya's own rows for a request, without a forward (`Agent._encode_state`, which
  calls `build_sequence(..., return_layout=True)`): per question `ids`, `markers`,
  `position_ids`, `option_ids`; cut rows, multi-question requests, conversations, option
  orders; or the refusal.
- `stability`: `OptionStabilityHook` on `parallel-tiny`, the agent cases of
  `tests/laya/stability_cases.py` played by its `run_case`. Laya's hook reads the layout from
  `agent.config`, which laya 0.4.15's `Agent` does not have, so on the real checkpoint it probes
  as on a sequential one; the cases with a `layout` set `agent.config` and run rename-only.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import random
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers  # noqa: E402

import laya  # noqa: E402
import laya.common  # noqa: E402
import laya.hooks  # noqa: E402
import laya.train  # noqa: E402
import make_goldens as mg  # noqa: E402  (its import puts kime.synthetic on the path)

from kime.synthetic import SHAPES, _encoder_config, write_checkpoint  # noqa: E402
from kime.synthetic.shapes import random_weights  # noqa: E402
from kime.synthetic.vocab import write_json, write_tokenizer  # noqa: E402
from tests.laya import stability_cases  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
CHECKPOINT = GOLDENS / "checkpoints" / "parallel-tiny"
OUT = GOLDENS / "parallel.json"
SEED = 0

SHAPE = dataclasses.replace(
    SHAPES["tiny"], hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=96, vocab_size=640, tokenizer_vocab=600, max_len=128, head_max_len=48,
    temperature=(1.0, 1.0, 1.0), temperature_by_options={})
"""laya-init's shape: layer 0 global, layer 1 sliding (local_attention 16: 8 position ids each
way), max_len 128, head_max_len 48."""

TRAIN = dict(epochs=2, micro_batch=16, grad_accum=1, encoder_lr=5e-4, head_lr=1e-3,
             min_lr=1e-5, loss="soft-ce", option_layout="parallel", calib_max=40,
             calib_frac=0.1, seed=SEED, log_every=10_000)
"""`laya.train.TrainConfig`: two epochs of 16-item updates. From transformers' own init (std
0.02) four epochs at 2e-3 stayed at ln K (near-uniform answers), so training starts from kime's
writer's weights for the same shape, drawn to answer with spread, and moves them."""

SYNTHETIC = {"synthetic-tiny": "tiny", "synthetic-multilingual-tiny": "multilingual-tiny"}
"""kime's writer, `option_layout="parallel"`, seed 0 (tiny: local_attention 16; multilingual-tiny:
8, and the transformers 5.x config spelling)."""


# ------------------------------------------------------------------------------------ training

DEPARTMENTS = {
    "sales": ["I would like to buy three more licences for my team.",
              "Do you offer a discount for a yearly purchase?"],
    "support": ["The app keeps crashing when I open the settings page.",
                "I cannot figure out how to export my files."],
    "billing": ["My invoice shows the wrong VAT number.", "I was charged twice this month."],
    "legal": ["Please delete all my personal data under GDPR.",
              "I need a copy of the signed contract."],
    "tech": ["Your API has returned HTTP 503 errors since this morning.",
             "The dashboard is down for everyone in our office."],
    "logistics": ["My parcel has been stuck in transit for a week.",
                  "The courier delivered the box to the wrong address."],
    "none": ["I just wanted to say hello.", "Nice weather today, isn't it?"],
}
INTENTS = {"refund": ["Please refund the payment.", "I want my money back."],
           "information": ["Could you tell me how this works?", "When do you open tomorrow?"],
           "cancel": ["Cancel my subscription, please.", "Close my account today."]}
URGENCY = ["whenever you have time.", "no rush at all.", "this week would be good.",
           "I need this today.", "URGENT: act now, we are losing money!"]
TONE = {True: ["This is outrageous, I am furious!", "Worst service ever, shame on you."],
        False: ["Thanks a lot for your help.", "Have a lovely day, and thank you."]}


def training_rows(n: int = 160) -> List[Dict[str, Any]]:
    """Synthetic tickets `{state, questions, expected}` whose labels follow from their words:
    strings, dicts and conversations, some longer than max_len (cut as at inference)."""
    rng = random.Random(SEED)
    questions = {"intent": mg.INTENT3, "urgency": mg.URGENCY5, "angry": mg.ANGRY,
                 "dept": mg.TOPIC7}
    filler = mg.LONG_TEXT.split(". ")
    rows = []
    for i in range(n):
        intent, dept = rng.choice(sorted(INTENTS)), rng.choice(sorted(DEPARTMENTS))
        level, angry = rng.randrange(5), rng.random() < 0.5
        parts = [rng.choice(DEPARTMENTS[dept]), rng.choice(INTENTS[intent]),
                 rng.choice(TONE[angry]), "Please handle it: " + URGENCY[level]]
        rng.shuffle(parts)
        parts += rng.sample(filler, rng.randrange(0, 4))
        text = " ".join(parts)
        kind = i % 4
        if kind == 2:
            state: Any = {"ticket": {"id": 1000 + i, "body": text}, "priority": level}
        elif kind == 3:
            state = [{"role": "user", "content": p} for p in parts]
        else:
            state = text
        rows.append({"state": state, "questions": questions,
                     "expected": {"intent": intent, "urgency": level, "angry": angry,
                                  "dept": dept}})
    return rows


def write_trained_checkpoint(path: Path) -> Dict[str, Any]:
    """Initialise as Laya does, fine-tune with `laya.train.finetune` in the parallel layout, and
    keep the final checkpoint's four parts (weights, encoder config, tokenizer, agent config)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    shutil.rmtree(path, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        src, base, out = Path(tmp) / "src", Path(tmp) / "base", Path(tmp) / "out"
        n_tokens = write_tokenizer(SHAPE, src / "tokenizer")
        assert n_tokens <= SHAPE.vocab_size, n_tokens
        (src / "encoder").mkdir(parents=True)
        write_json(src / "encoder" / "config.json", _encoder_config(SHAPE))
        cfg: Dict[str, Any] = {"encoder": SHAPE.encoder, "head_layers": SHAPE.head_layers,
                               "act_costs": dict(SHAPE.act_costs), "max_len": SHAPE.max_len,
                               "head_max_len": SHAPE.head_max_len,
                               "temperature": list(SHAPE.temperature), "amp_dtype": "bf16"}
        torch.manual_seed(SEED)
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(str(src / "encoder")),
                                        attn_implementation="sdpa")
        model = laya.common.DecisionModel(encoder, cfg["head_layers"], len(cfg["act_costs"]) + 1)
        # The starting weights: kime's seeded draws (spread answers), every tensor of the model.
        start = {k: torch.from_numpy(v.astype("float32"))
                 for k, v in random_weights(SHAPE, SEED).items()}
        model.load_state_dict(start, strict=True)
        tok = AutoTokenizer.from_pretrained(str(src / "tokenizer"))
        laya.train.save_checkpoint(model, tok, cfg, str(base))
        data = Path(tmp) / "train.jsonl"
        with open(data, "w", encoding="utf-8") as f:
            for row in training_rows():
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            summary = laya.train.finetune(str(data), str(base), str(out),
                                          laya.train.TrainConfig(**TRAIN), device="cpu")
        path.mkdir(parents=True)
        for part in ("encoder", "tokenizer"):
            shutil.copytree(out / part, path / part)
        for part in ("model.safetensors", "rl_agent_config.json"):
            shutil.copy2(out / part, path / part)
    # safetensors creates the file 0600; give it the mode the JSON files got.
    shutil.copymode(path / "rl_agent_config.json", path / "model.safetensors")
    return {"epoch_loss": summary["epoch_loss"], "train_items": summary["train_items"],
            "calibration_items": summary["calibration_items"],
            "train_warnings": [str(w.message) for w in caught]}


# ------------------------------------------------------------------------------------ cases

TICKET = {"ticket": {"id": 4417, "subject": "Charged twice for the annual plan",
                     "priority": "high", "tags": ["billing", "refund"], "amount": 129.0},
          "customer": {"name": "Ana Souza", "verified": True, "tier": None}}
FOUR = {"intent": mg.INTENT3, "urgency": mg.URGENCY5, "angry": mg.ANGRY, "dept": mg.TOPIC7}
LONG_DOC = " ".join([mg.LONG_TEXT] * 3)
LONG_CONVERSATION = mg.CONVERSATION * 3
TEAMS12 = {"type": "choice", "instructions": "Which team should take it?",
           "criteria": ["team %s" % c for c in "ABCDEFGHIJKL"]}
MANY30 = {"type": "choice", "instructions": "Pick one.", "criteria": mg.many_labels(30)}
MANY40 = {"type": "choice", "instructions": "Pick one.", "criteria": mg.many_labels(40)}
"""At the checkpoint's budgets (128, 48) every option is cut to 4 tokens: 30 markers still fit
(the last at 126, the head's closing [SEP] past max_len), 40 do not."""
WIDE = {"max_len": 256, "head_max_len": 160}
"""Room for 30 options: each cut to max(4, (160 - 16) // 30) = 4 tokens."""


def _orders(q: Dict[str, Any], orders: List[List[int]]) -> Dict[str, Any]:
    return {"o" + "".join(str(i) for i in order): dict(q, option_order=order)
            for order in orders}


def case(id: str, about: str, call: str, checkpoint: str = "parallel-tiny",
         **args: Any) -> Dict[str, Any]:
    return {"id": id, "checkpoint": checkpoint, "about": about, "call": call, "args": args}


def good_cases() -> List[Dict[str, Any]]:
    P, B, L = "predict", "predict_batch", "predict_long"
    perm = list(mg.INTENT3["criteria"].items())
    return [
        case("ticket_four", "a dict state; choice 3, score 5, noul, choice 7 in one request", P,
             state=TICKET, questions=FOUR),
        case("single_choice", "one choice question", P, state=mg.EMAIL,
             questions={"intent": mg.INTENT3}),
        case("single_score", "one score question", P, state=mg.EMAIL,
             questions={"urgency": mg.URGENCY5}),
        case("single_noul", "one noul question with criteria", P, state=mg.EMAIL,
             questions={"formal": mg.FORMAL}),
        case("single_option", "a one-option choice", P, state=mg.EMAIL,
             questions={"only": {"type": "choice", "instructions": "Pick it.",
                                 "criteria": {"solo": "the only option"}}}),
        case("every_bucket", "choice and score of 2, 4, 7, 12 and 2, 5, 7, 11 options, noul",
             P, state=mg.EMAIL,
             questions={"c2": mg.LANG2, "c4": {"type": "choice", "instructions": "Channel?",
                                                "criteria": ["email", "phone", "chat", "letter"]},
                        "c7": mg.TOPIC7, "c12": mg.TOPIC12, "s2": mg.SENTIMENT2,
                        "s5": mg.URGENCY5, "s7": mg.SATISFACTION7, "s11": mg.SCALE11,
                        "n": mg.FORMAL}),
        case("many_12", "12 options", P, state=mg.EMAIL, questions={"team": TEAMS12}),
        case("many_30_wide", "30 options, each cut to 4 tokens, in max_len 256", P,
             state=mg.EMAIL, questions={"pick": MANY30}, **WIDE),
        case("many_30_head_cut", "30 options cut to 4 tokens at the checkpoint's budgets: every "
             "marker fits, the head's closing [SEP] does not", P, state=mg.EMAIL,
             questions={"pick": MANY30}),
        case("crowded", "long shared-prefix options cut to the head budget, some to the same "
             "tokens", P, state=mg.EMAIL,
             questions={"labels": mg.CROWDED_LABELS, "which": mg.CROWDED_CHOICE,
                        "score": mg.CROWDED_SCORE}),
        case("option_order_choice", "one choice in four option orders in one request: Laya's "
             "probabilities permute with the options", P, state=TICKET,
             questions=_orders(mg.INTENT3, [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]])),
        case("option_order_score_noul", "option_order on a score and a noul", P, state=TICKET,
             questions={"urgency": dict(mg.URGENCY5, option_order=[4, 3, 2, 1, 0]),
                        "urgency_plain": mg.URGENCY5,
                        "angry": dict(mg.ANGRY, option_order=[1, 0]), "angry_plain": mg.ANGRY}),
        case("option_order_many", "12 options in order and reversed", P, state=mg.EMAIL,
             questions={"fwd": mg.TOPIC12,
                        "rev": dict(mg.TOPIC12, option_order=list(range(11, -1, -1)))}),
        case("permuted_criteria", "the same criteria listed in other orders (dicts and lists)",
             P, state=TICKET,
             questions={"a": mg.INTENT3,
                        "b": dict(mg.INTENT3, criteria=dict([perm[2], perm[0], perm[1]])),
                        "c": dict(mg.INTENT3, criteria=dict(perm[::-1])),
                        "l1": mg.LANG2, "l2": dict(mg.LANG2, criteria=["other", "English"])}),
        case("string_long_cut", "a long string cut to max_len", P, state=mg.LONG_TEXT,
             questions={"severity": mg.SCALE11, "sentiment": mg.SENTIMENT2}),
        case("string_empty", "the empty string", P, state="",
             questions={"intent": mg.INTENT3, "formal": mg.FORMAL}),
        case("conversation_cut", "a conversation longer than the room, cut from the left", P,
             state=mg.CONVERSATION, questions={"topic": mg.TOPIC12, "angry": mg.ANGRY}),
        case("conversation_short", "three turns", P, state=mg.CONVERSATION[:3],
             questions={"intent": mg.INTENT3, "urgency": mg.URGENCY5}),
        case("overrides", "max_len 72 and head_max_len 40", P, state=TICKET,
             questions={"intent": mg.INTENT3, "topic": mg.TOPIC12}, max_len=72,
             head_max_len=40),
        case("head_cut", "a head longer than head_max_len's room: options cut per option", P,
             state=mg.EMAIL, questions={"which": mg.CROWDED_CHOICE}, max_len=80,
             head_max_len=40),
        case("batch_mixed", "dict, string, empty, conversation, long and tiny states in one "
             "forward", B, states=[TICKET, mg.EMAIL, "", mg.CONVERSATION, mg.LONG_TEXT, "ok"],
             questions=mg.BASIC),
        case("batch_size_2", "batch_size=2 over five states", B,
             states=[mg.LONG_TEXT, "ok", mg.CONVERSATION[:3], TICKET, mg.EMAIL],
             questions={"intent": mg.INTENT3, "angry": mg.ANGRY}, batch_size=2),
        case("batch_overrides", "predict_batch with max_len and head_max_len overrides", B,
             states=[TICKET, mg.LONG_TEXT], questions={"which": mg.CROWDED_CHOICE,
                                                        "angry": mg.ANGRY},
             max_len=80, head_max_len=40),
        case("batch_orders", "option orders over a batch", B, states=[TICKET, mg.EMAIL],
             questions=_orders(mg.INTENT3, [[0, 1, 2], [1, 2, 0]])),
        case("long_doc", "predict_long over a state three times max_len", L, state=LONG_DOC,
             questions=mg.BASIC),
        case("long_window", "predict_long with window 48 and stride 24", L, state=LONG_DOC,
             questions={"intent": mg.INTENT3, "angry": mg.ANGRY}, window=48, stride=24),
        case("long_conversation", "predict_long over a long conversation", L,
             state=LONG_CONVERSATION, questions={"topic": mg.TOPIC12, "urgency": mg.URGENCY5}),
        case("long_fits", "predict_long on a state that fits (system_one's answer)", L,
             state=mg.EMAIL, questions=mg.BASIC),
    ] + [
        case("%s_%s" % (name, c["id"]), c["about"], c["call"], name, **c["args"])
        for name in SYNTHETIC for c in [
            case("ticket", "kime's writer, parallel: a dict state, four questions", P,
                 state=TICKET, questions=FOUR),
            case("orders", "kime's writer, parallel: option orders", P, state=mg.EMAIL,
                 questions=_orders(mg.INTENT3, [[0, 1, 2], [2, 0, 1]])),
            case("many_12", "kime's writer, parallel: 12 options", P, state=mg.LONG_TEXT,
                 questions={"topic": mg.TOPIC12, "team": TEAMS12}),
            case("batch", "kime's writer, parallel: a mixed batch", B,
                 states=[TICKET, mg.EMAIL, "", mg.CONVERSATION, mg.LONG_TEXT],
                 questions=mg.BASIC),
        ]
    ]


def error_cases() -> List[Dict[str, Any]]:
    P, B, L = "predict", "predict_batch", "predict_long"
    return [
        case("error_options_do_not_fit", "60 options cannot fit in max_len=128", P,
             state=mg.EMAIL, questions={"huge": {"type": "choice", "instructions": "Pick.",
                                                 "criteria": mg.many_labels(60)}}),
        case("error_40_do_not_fit", "40 options at the checkpoint's budgets", P,
             state=mg.EMAIL, questions={"pick": MANY40}),
        case("error_batch_do_not_fit", "too many options in a batch", B,
             states=[mg.EMAIL, TICKET], questions={"pick": MANY40}),
        case("error_long_do_not_fit", "too many options in predict_long", L, state=LONG_DOC,
             questions={"pick": MANY40}),
        case("error_unknown_type", "an unknown question type", P, state=TICKET,
             questions={"bad": {"type": "multi", "instructions": "x", "criteria": ["a"]}}),
        case("error_option_order", "option_order that is not a permutation", P, state=TICKET,
             questions={"intent": dict(mg.INTENT3, option_order=[0, 0, 1])}),
        case("error_none_state", "predict(None, ...)", P, state=None, questions=mg.BASIC),
        case("error_states_is_dict", "predict_batch given a dict", B, states=TICKET,
             questions=mg.BASIC),
    ]


def layout_requests() -> List[Dict[str, Any]]:
    """Requests whose rows Laya lays out (no forward): every shape of head and state."""
    return [
        {"id": "short_multi", "state": mg.EMAIL, "questions": FOUR},
        {"id": "dict_state", "state": TICKET, "questions": mg.BASIC},
        {"id": "long_cut", "state": mg.LONG_TEXT, "questions": {"topic": mg.TOPIC12}},
        {"id": "conversation_keep_end", "state": mg.CONVERSATION, "questions": mg.BASIC},
        {"id": "empty_state", "state": "", "questions": {"one": mg.ANGRY}},
        {"id": "orders", "state": mg.EMAIL,
         "questions": _orders(mg.TOPIC7, [[0, 1, 2, 3, 4, 5, 6], [6, 5, 4, 3, 2, 1, 0]])},
        {"id": "crowded", "state": mg.EMAIL,
         "questions": {"labels": mg.CROWDED_LABELS, "score": mg.CROWDED_SCORE}},
        {"id": "single_option", "state": mg.EMAIL,
         "questions": {"only": {"type": "choice", "instructions": "Pick it.",
                                "criteria": ["yes"]}}},
        {"id": "head_fills_row", "state": mg.LONG_TEXT, "questions": {"which": mg.CROWDED_CHOICE},
         "max_len": 40, "head_max_len": 40},
        {"id": "head_exceeds_max_len", "state": mg.EMAIL, "questions": {"pick": MANY30},
         "max_len": 96, "head_max_len": 160},
        {"id": "head_cut_markers_fit", "state": mg.EMAIL, "questions": {"pick": MANY30,
                                                                       "intent": mg.INTENT3}},
        {"id": "head_exceeds_max_len_one_slot", "state": mg.EMAIL,
         "questions": {"topic": mg.TOPIC12}, "max_len": 20, "head_max_len": 48},
        {"id": "many_30_wide", "state": mg.LONG_TEXT, "questions": {"pick": MANY30}, **WIDE},
        {"id": "tiny_budgets", "state": mg.CONVERSATION, "questions": mg.BASIC,
         "max_len": 24, "head_max_len": 16},
    ]


# ------------------------------------------------------------------------------------ running

class Recorder:
    """Wraps `agent._forward` to keep every unpadded row with the layout Laya fed the encoder."""

    def __init__(self, agent: Any):
        self.rows: List[Dict[str, Any]] = []
        self._forward = agent._forward
        agent._forward = self

    def __call__(self, b: Dict[str, Any]):
        logits, act = self._forward(b)
        ids, att = b["input_ids"].numpy(), b["attention_mask"].numpy()
        mpos, mmask, qtype = b["marker_pos"].numpy(), b["marker_mask"].numpy(), b["qtype"].numpy()
        pos, opt = b["position_ids"].numpy(), b["option_ids"].numpy()
        for i in range(ids.shape[0]):
            n, k = int(att[i].sum()), int(mmask[i].sum())
            assert att[i, :n].all() and mmask[i, :k].all(), "masks must be prefixes"
            self.rows.append({
                "ids": ids[i, :n].tolist(), "markers": mpos[i, :k].tolist(),
                "qtype": int(qtype[i]), "position_ids": pos[i, :n].tolist(),
                "option_ids": opt[i, :n].tolist(),
                "logits": [float(x) for x in logits[i, :k]],
                "act": [float(x) for x in act[i]],
            })
        return logits, act


def run_case(agent: Any, spec: Dict[str, Any]) -> Dict[str, Any]:
    args = copy.deepcopy(spec["args"])
    recorder = Recorder(agent)
    result, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            call = getattr(agent, spec["call"])
            if spec["call"] == "predict_batch":
                result = call(args.pop("states"), args.pop("questions"), **args)
            else:
                result = call(args.pop("state"), args.pop("questions"), **args)
        except (ValueError, TypeError) as exc:
            error = {"type": type(exc).__name__, "message": str(exc)}
        finally:
            agent._forward = recorder._forward
    out = dict(spec)
    out.update({"result": result, "error": error, "warnings": [str(w.message) for w in caught],
                "rows": recorder.rows})
    return out


def run_layout(agent: Any, spec: Dict[str, Any]) -> Dict[str, Any]:
    """Laya's rows for one request, as `_encode_state` builds them, or its refusal."""
    out = dict(spec, rows=None, error=None)
    ids = list(spec["questions"])
    try:
        for qid in ids:
            agent._check_question(qid, spec["questions"][qid])
        internal = {qid: agent._to_internal(spec["questions"][qid]) for qid in ids}
        items = agent._encode_state(spec["state"], ids, internal, spec.get("max_len"),
                                    spec.get("head_max_len"))
    except (ValueError, TypeError) as exc:
        out["error"] = {"type": type(exc).__name__, "message": str(exc)}
        return out
    out["rows"] = [{"qid": qid, "ids": it["ids"], "markers": it["markers"],
                    "position_ids": it["layout"]["position_ids"],
                    "option_ids": it["layout"]["option_ids"]} for qid, it in zip(ids, items)]
    return out


def run_stability(agent: Any) -> List[Dict[str, Any]]:
    """The agent cases of `stability_cases`, on the parallel checkpoint."""
    out = []
    for spec in stability_cases._agent_cases():
        spec = dict(spec, id="parallel-tiny_" + spec["id"], checkpoint="parallel-tiny")
        done = dict(spec, result=None, error=None)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                done["result"] = stability_cases.run_case(
                    laya.hooks, spec, {"parallel-tiny": agent}, lambda hooks: None)
            except (TypeError, ValueError) as exc:
                done["error"] = {"type": type(exc).__name__, "message": str(exc)}
        done["warnings"] = [str(w.message) for w in caught
                            if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
        out.append(done)
    return out


def load_agent(path: Path) -> Any:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = laya.Agent(str(path), device="cpu")
    assert agent.parallel_options is True, path
    agent.load_warnings = [str(w.message) for w in caught]
    return agent


def main() -> int:
    training = None
    if "--rewrite-checkpoint" in sys.argv or not (CHECKPOINT / "model.safetensors").exists():
        training = write_trained_checkpoint(CHECKPOINT)
        print("trained:", json.dumps(training)[:400])
    cfg = json.loads((CHECKPOINT / "rl_agent_config.json").read_text(encoding="utf-8"))
    assert cfg["option_layout"] == "parallel", cfg.get("option_layout")
    agents = {"parallel-tiny": load_agent(CHECKPOINT)}
    checkpoints: Dict[str, Any] = {"parallel-tiny": {
        "path": "checkpoints/parallel-tiny", "seed": SEED, "train_config": TRAIN,
        "made": "laya.common.DecisionModel(AutoModel.from_config(...)) holding "
                "kime.synthetic.shapes.random_weights(SHAPE, %d), saved by "
                "laya.train.save_checkpoint, fine-tuned by laya.train.finetune "
                "(option_layout='parallel') on tools/goldens_parallel.py's training_rows" % SEED,
        "shape": {k: v for k, v in dataclasses.asdict(SHAPE).items()
                  if k not in ("act_costs", "temperature_by_options")}}}
    if training is not None:
        checkpoints["parallel-tiny"]["training"] = training
    with tempfile.TemporaryDirectory() as tmp:
        for name, shape in SYNTHETIC.items():
            write_checkpoint(Path(tmp) / name, shape, seed=SEED, odd_temperatures=True,
                             option_layout="parallel")
            agents[name] = load_agent(Path(tmp) / name)
            checkpoints[name] = {"writer": "kime.synthetic.write_checkpoint", "shape": shape,
                                 "seed": SEED, "odd_temperatures": True,
                                 "option_layout": "parallel"}
        for name, agent in agents.items():
            checkpoints[name].update(load_warnings=agent.load_warnings,
                                     parallel_options=agent.parallel_options)
        specs = good_cases() + error_cases()
        assert len({s["id"] for s in specs}) == len(specs), "case ids must be unique"
        cases = []
        for spec in specs:
            done = run_case(agents[spec["checkpoint"]], spec)
            if spec["id"].startswith("error_") != (done["error"] is not None):
                raise AssertionError("case %s: error=%r" % (spec["id"], done["error"]))
            cases.append(done)
    main_agent = agents["parallel-tiny"]
    layouts = [run_layout(main_agent, spec) for spec in layout_requests()]
    stability = run_stability(main_agent)
    payload = mg.to_json({
        "laya_version": laya.__version__, "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "laya_agent_has_config": hasattr(main_agent, "config"),
        "checkpoints": checkpoints, "cases": cases, "layouts": layouts, "stability": stability,
    })
    for c, spec in zip(payload["cases"], specs):
        if mg.from_json(c["args"]) != spec["args"]:
            raise AssertionError("case %s: args do not round-trip" % spec["id"])
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")
    rows = [r for c in cases for r in c["rows"]]
    spread = [max(r["logits"]) - min(r["logits"]) for r in rows if len(r["logits"]) > 1]
    print("%d cases (%d refusals), %d rows, mean logit spread %.3f; %d layouts (%d refusals); "
          "%d stability cases (%d refusals); wrote %s"
          % (len(cases), sum(c["error"] is not None for c in cases), len(rows),
             sum(spread) / len(spread), len(layouts), sum(x["error"] is not None for x in layouts),
             len(stability), sum(x["error"] is not None for x in stability),
             OUT.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
