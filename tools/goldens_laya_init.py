"""Record Laya 0.4.15's answers on a checkpoint with Laya's own initialisation (issue 23, item 8):
`tests/goldens/checkpoints/laya-init/` and `tests/goldens/laya_init.json`. Run ONLY with the
oracle interpreter (the real laya + torch; kime never imports them):

    .oracle/bin/python tools/goldens_laya_init.py [--rewrite-checkpoint]

Why a second kind of checkpoint. kime's writer (`kime.synthetic`) draws every tensor from its own
seeded generator, with norm weights near 1 and small biases, scaled so a random model answers with
spread. A model Laya builds itself is initialised otherwise: transformers' ModernBERT init for the
encoder (truncated normal, std 0.02, norms exactly 1), torch's defaults for the decision head
(Xavier for the attention, Kaiming-uniform weights and biases for the linears, N(0, 1) for the
type embedding). Its answers are near-uniform and its act head sees other inputs, which is where
issue 23 reported `act_probability` 1.6e-4 away from Laya's.

The checkpoint (written when absent, or with `--rewrite-checkpoint`): a `tiny`-like shape shrunk
to a few hundred KB (hidden 64, 2 encoder layers, 2 decision-head layers, a 600-token byte-level
BPE from kime's corpus), `torch.manual_seed(SEED)`, `AutoModel.from_config` and
`laya.common.DecisionModel` exactly as Laya builds a model to train, saved by
`laya.train.save_checkpoint` (FP16 weights, the encoder config, the tokenizer, the agent config).

`laya_init.json` (UTF-8, indent 1): versions, `checkpoint` (path, shape, seed, how it was
initialised, load warnings) and `cases`, each `{"id", "about", "call", "args", "result", "error",
"warnings", "rows"}` as in `cases.json` (`tools/make_goldens.py`), `call` one of `predict`,
`predict_batch` and `system_one`. Every row also keeps the act head's stages as Laya computed
them: `pooled` (the first token's hidden state after the decision head, float32), `features`
(top1, top1 - top2, normalised entropy, k / 255) and `act_logits` (before the softmax), so a test
can hold kime's act head to Laya's on Laya's own inputs, stage by stage.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import torch  # noqa: E402
import transformers  # noqa: E402

import laya  # noqa: E402
import laya.common  # noqa: E402
import laya.train  # noqa: E402
import make_goldens as mg  # noqa: E402  (its import puts kime.synthetic on the path)

from kime.synthetic import SHAPES  # noqa: E402
from kime.synthetic import _encoder_config  # noqa: E402
from kime.synthetic.vocab import write_json, write_tokenizer  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
CHECKPOINT = GOLDENS / "checkpoints" / "laya-init"
OUT = GOLDENS / "laya_init.json"
SEED = 0

SHAPE = dataclasses.replace(
    SHAPES["tiny"], hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
    intermediate_size=96, vocab_size=640, tokenizer_vocab=600, max_len=128, head_max_len=48,
    temperature=(1.2, 0.8, 1.1), temperature_by_options={"choice:3-5": 0.9})
"""Hidden 64 (one decision-head attention head of 64, as Laya's `max(1, d // 64)` gives), layer
0 global and layer 1 sliding (window 16, shorter than most rows)."""

INIT = ("laya.common.DecisionModel(AutoModel.from_config(encoder config), head_layers, n_act) "
        "after torch.manual_seed(%d): transformers' ModernBERT init and torch's default init of "
        "the decision head, saved by laya.train.save_checkpoint (FP16)" % SEED)


def write_laya_checkpoint(path: Path) -> None:
    """Build the model as Laya does before training and save it in Laya's checkpoint layout."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    shutil.rmtree(path, ignore_errors=True)
    src = path.parent / (path.name + ".src")
    shutil.rmtree(src, ignore_errors=True)
    try:
        n_tokens = write_tokenizer(SHAPE, src / "tokenizer")
        assert n_tokens <= SHAPE.vocab_size, n_tokens
        (src / "encoder").mkdir(parents=True)
        write_json(src / "encoder" / "config.json", _encoder_config(SHAPE))
        cfg: Dict[str, Any] = {"encoder": SHAPE.encoder, "head_layers": SHAPE.head_layers,
               "act_costs": dict(SHAPE.act_costs), "max_len": SHAPE.max_len,
               "head_max_len": SHAPE.head_max_len, "temperature": list(SHAPE.temperature),
               "temperature_by_options": dict(SHAPE.temperature_by_options), "amp_dtype": "bf16"}
        torch.manual_seed(SEED)
        encoder = AutoModel.from_config(AutoConfig.from_pretrained(str(src / "encoder")),
                                        attn_implementation="sdpa")
        model = laya.common.DecisionModel(encoder, cfg["head_layers"], len(cfg["act_costs"]) + 1)
        model.eval()
        tok = AutoTokenizer.from_pretrained(str(src / "tokenizer"))
        laya.train.save_checkpoint(model, tok, cfg, str(path))
    finally:
        shutil.rmtree(src, ignore_errors=True)
    # safetensors creates the file 0600; give it the mode the JSON files got.
    shutil.copymode(path / "rl_agent_config.json", path / "model.safetensors")


# ------------------------------------------------------------------------------------ cases

TICKET = {"ticket": {"id": 4417, "subject": "Charged twice for the annual plan",
                     "priority": "high", "tags": ["billing", "refund"], "amount": 129.0},
          "customer": {"name": "Ana Souza", "verified": True, "tier": None},
          "history": [{"event": "payment", "ok": True}, {"event": "payment", "ok": True}]}
NESTED = {"order": {"id": "A-7781", "items": [{"sku": "KET-01", "qty": 1, "price": 49.99}],
                    "shipping": {"carrier": "DHL", "eta_days": 3, "late": False}},
          "notes": "¡Muy urgente! Paket beschädigt 🙏", "counts": {1: 3, 2: 5}, "empty": {},
          "deep": {"a": {"b": {"c": [[], [1, [2, [3]]]]}}}}
SHORT_CONVERSATION = mg.CONVERSATION[:3]

INTENT3, URGENCY5, ANGRY, LANG2 = mg.INTENT3, mg.URGENCY5, mg.ANGRY, mg.LANG2
BASIC = mg.BASIC


def case(id: str, about: str, call: str, **args: Any) -> Dict[str, Any]:
    return {"id": id, "about": about, "call": call, "args": args}


def good_cases() -> List[Dict[str, Any]]:
    P, B, S = "predict", "predict_batch", "system_one"
    return [
        case("dict_ticket", "a dict state (the issue's case); choice 3, score 5, noul", P,
             state=TICKET, questions={"intent": INTENT3, "urgency": URGENCY5, "angry": ANGRY}),
        case("dict_nested", "a nested dict with unicode, an int key, null and lists; choice 7, "
             "score 7, noul with criteria", P, state=NESTED,
             questions={"dept": mg.TOPIC7, "satisfaction": mg.SATISFACTION7,
                        "formal": mg.FORMAL}),
        case("dict_system_one_overrides", "system_one on a dict state with max_len and "
             "head_max_len overrides", S, state=TICKET,
             questions={"intent": INTENT3, "topic": mg.TOPIC12}, max_len=72, head_max_len=40),
        case("string_email", "an email string; choice 3, score 5, noul, choice 2", P,
             state=mg.EMAIL, questions=BASIC),
        case("string_long_truncated", "a long string cut to max_len; score 11, score 2", P,
             state=mg.LONG_TEXT, questions={"severity": mg.SCALE11, "sentiment": mg.SENTIMENT2}),
        case("string_empty", "the empty string; choice 3, noul with criteria", P, state="",
             questions={"intent": INTENT3, "formal": mg.FORMAL}),
        case("string_unicode", "German, Japanese and emoji", S,
             state=mg.GERMAN + " " + mg.JAPANESE + " " + mg.EMOJI,
             questions={"lang": LANG2, "happy": {"type": "noul",
                                                 "instructions": "The writer is happy 😊"}}),
        case("conversation_truncated", "a conversation longer than the room, cut from the "
             "left; choice 12, noul", P, state=mg.CONVERSATION,
             questions={"topic": mg.TOPIC12, "angry": ANGRY}),
        case("conversation_short", "three turns; choice 3, score 5", S,
             state=SHORT_CONVERSATION, questions={"intent": INTENT3, "urgency": URGENCY5}),
        case("single_option", "a one-option choice: probability 1, act feature top2 = 0", P,
             state=mg.EMAIL, questions={"only": {"type": "choice", "instructions": "Pick it.",
                                                 "criteria": {"solo": "the only option"}}}),
        case("option_order", "option_order on a choice, a score and a noul", P, state=TICKET,
             questions={"intent": dict(INTENT3, option_order=[2, 0, 1]),
                        "urgency": dict(URGENCY5, option_order=[4, 3, 2, 1, 0]),
                        "noul": dict(ANGRY, option_order=[1, 0])}),
        case("int_ids_int_labels", "int question ids and int choice labels", P,
             state="I would give it three stars out of five.",
             questions={1: {"type": "choice", "instructions": "How many stars?",
                            "criteria": [1, 2, 3, 4, 5]},
                        2: {"type": "noul", "instructions": "Satisfied.",
                            "labels": {"false": "no", "true": "yes"}}}),
        case("every_bucket", "choice and score of 2, 4, 7, 12 and 2, 5, 7, 11 options, noul", P,
             state=mg.EMAIL,
             questions={"c2": LANG2, "c4": {"type": "choice", "instructions": "Channel?",
                                            "criteria": ["email", "phone", "chat", "letter"]},
                        "c7": mg.TOPIC7, "c12": mg.TOPIC12, "s2": mg.SENTIMENT2, "s5": URGENCY5,
                        "s7": mg.SATISFACTION7, "s11": mg.SCALE11, "n": mg.FORMAL}),
        case("crowded_options", "long shared-prefix options cut to the head budget", P,
             state=mg.EMAIL, questions={"labels": mg.CROWDED_LABELS, "which": mg.CROWDED_CHOICE}),
        case("empty_questions", "no questions: empty answers, no forward", P, state=TICKET,
             questions={}),
        case("batch_mixed", "dict, string, empty, conversation and nested dict states in one "
             "forward", B, states=[TICKET, mg.EMAIL, "", mg.CONVERSATION, NESTED],
             questions=BASIC),
        case("batch_size_2", "batch_size=2 over five states: three forwards", B,
             states=[NESTED, mg.LONG_TEXT, "ok", SHORT_CONVERSATION, TICKET],
             questions={"intent": INTENT3, "angry": ANGRY}, batch_size=2),
        case("batch_overrides", "predict_batch with max_len and head_max_len overrides", B,
             states=[TICKET, mg.LONG_TEXT], questions={"which": mg.CROWDED_CHOICE, "angry": ANGRY},
             max_len=80, head_max_len=40),
        case("batch_empty_states", "an empty states list", B, states=[], questions=BASIC),
    ]


def error_cases() -> List[Dict[str, Any]]:
    P, B = "predict", "predict_batch"
    return [
        case("error_unknown_type", "an unknown question type", P, state=TICKET,
             questions={"bad": {"type": "multi", "instructions": "x", "criteria": ["a"]}}),
        case("error_choice_criteria_empty", "empty choice criteria", P, state=TICKET,
             questions={"bad": {"type": "choice", "instructions": "Pick.", "criteria": {}}}),
        case("error_states_is_dict", "predict_batch given a dict state, not a list", B,
             states=TICKET, questions=BASIC),
        case("error_none_state", "predict(None, ...)", P, state=None, questions=BASIC),
        case("error_options_do_not_fit", "60 options cannot fit in max_len=128", P,
             state=mg.EMAIL, questions={"huge": {"type": "choice", "instructions": "Pick.",
                                                 "criteria": mg.many_labels(60)}}),
    ]


# ------------------------------------------------------------------------------------ running

class StageRecorder:
    """Wraps `agent._forward` (as make_goldens' Recorder does) and hooks the act head, so every
    unpadded row keeps its ids, markers, logits and act, and the act head's input and output."""

    def __init__(self, agent: Any):
        self.rows: List[Dict[str, Any]] = []
        self._forward = agent._forward
        self._stages: List[Any] = []
        self._hook = agent.model.act_head.register_forward_hook(self._capture)
        agent._forward = self

    def _capture(self, module: Any, inputs: Any, output: Any) -> None:
        self._stages.append((inputs[0].detach().float().numpy().copy(),
                             output.detach().float().numpy().copy()))

    def __call__(self, b: Dict[str, Any]):
        self._stages.clear()
        logits, act = self._forward(b)
        assert len(self._stages) == 1, "one act head call per forward"
        act_in, act_logits = self._stages[0]
        ids, att = b["input_ids"].numpy(), b["attention_mask"].numpy()
        mpos, mmask, qtype = b["marker_pos"].numpy(), b["marker_mask"].numpy(), b["qtype"].numpy()
        d = act_in.shape[1] - 4
        for i in range(ids.shape[0]):
            n, k = int(att[i].sum()), int(mmask[i].sum())
            assert att[i, :n].all() and mmask[i, :k].all(), "masks must be prefixes"
            self.rows.append({
                "ids": ids[i, :n].tolist(), "markers": mpos[i, :k].tolist(),
                "qtype": int(qtype[i]),
                "logits": [float(x) for x in logits[i, :k]],
                "act": [float(x) for x in act[i]],
                "pooled": [float(x) for x in act_in[i, :d]],
                "features": [float(x) for x in act_in[i, d:]],
                "act_logits": [float(x) for x in act_logits[i]],
            })
        return logits, act

    def close(self, agent: Any) -> None:
        agent._forward = self._forward
        self._hook.remove()


def run_case(agent: Any, spec: Dict[str, Any]) -> Dict[str, Any]:
    args = copy.deepcopy(spec["args"])
    recorder = StageRecorder(agent)
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
            recorder.close(agent)
    out = dict(spec)
    out.update({"result": result, "error": error, "warnings": [str(w.message) for w in caught],
                "rows": recorder.rows})
    return out


def main() -> int:
    if "--rewrite-checkpoint" in sys.argv or not (CHECKPOINT / "model.safetensors").exists():
        write_laya_checkpoint(CHECKPOINT)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = laya.Agent(str(CHECKPOINT), device="cpu")
    specs = good_cases() + error_cases()
    assert len({s["id"] for s in specs}) == len(specs), "case ids must be unique"
    cases = []
    for spec in specs:
        done = run_case(agent, spec)
        if spec["id"].startswith("error_") != (done["error"] is not None):
            raise AssertionError("case %s: error=%r" % (spec["id"], done["error"]))
        cases.append(done)
    payload = mg.to_json({
        "laya_version": laya.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "checkpoint": {"path": "checkpoints/laya-init", "seed": SEED, "init": INIT,
                       "shape": {k: v for k, v in dataclasses.asdict(SHAPE).items()
                                 if k not in ("act_costs", "temperature_by_options")},
                       "load_warnings": [str(w.message) for w in caught]},
        "cases": cases,
    })
    for c, spec in zip(payload["cases"], specs):
        if mg.from_json(c["args"]) != spec["args"]:
            raise AssertionError("case %s: args do not round-trip" % spec["id"])
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")
    rows = [r for c in cases for r in c["rows"]]
    acts = [r["act"][0] for r in rows]
    print("%d cases (%d refusals), %d rows; act[0] in [%.4f, %.4f]; wrote %s"
          % (len(cases), sum(c["error"] is not None for c in cases), len(rows), min(acts),
             max(acts), OUT.relative_to(ROOT)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
