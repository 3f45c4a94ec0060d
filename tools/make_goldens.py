"""Record Laya 0.4.15's answers on kime's test checkpoints: `tests/goldens/`.

kime's compatibility claim is "the same dicts as Laya", so the goldens are Laya's own output, not a
re-derivation. This script runs ONLY in a side virtual environment with the reference
implementation, which kime itself never imports:

    python -m venv .oracle
    .oracle/bin/pip install torch==2.13.0 laya==0.4.15
    .oracle/bin/python tools/make_goldens.py

It puts the repository root on `sys.path` and imports `kime.synthetic` alone, without running
`kime/__init__.py` (the writer needs only NumPy, tokenizers and safetensors, all of which Laya's
environment has; the engine may need more), then:

1. writes the `tiny` and `multilingual-tiny` checkpoints (seed 0) into
   `tests/goldens/checkpoints/<shape>`; they are committed, so a test needs no oracle;
2. loads each with `laya.Agent(path, device="cpu")`, keeping the warnings the load raised;
3. runs every case below and writes `tests/goldens/cases.json`;
4. runs the Laya surface's recorders (`tools/goldens_agent.py`, `goldens_calibration.py`,
   `goldens_confidence.py`), which write `tests/goldens/agent.json`, `calibration.json`,
   `confidence.json` and `structured.json`.

`cases.json` (UTF-8, indent 1) holds `laya_version`, `torch_version`, `transformers_version`,
`tokenizers_version`, `checkpoints` (name -> path, shape, seed, load_warnings) and `cases`, each:

    {"id", "checkpoint", "about",
     "call": "predict" | "predict_batch",
     "args": {"state" | "states", "questions", optional "max_len", "head_max_len", "batch_size"},
     "result": Laya's return value, or null when it raised,
     "error": null | {"type": "ValueError" | "TypeError", "message": str(exc)},
     "warnings": [messages of the warnings the call raised],
     "rows": [{"ids", "markers", "qtype", "logits", "act"}, ...]}

`rows` are the model rows in the order Laya built them (state-major, then question order), with
padding removed: `ids` the token ids, `markers` the [MASK] positions, `logits` the raw option
logits (float32) and `act` the softmaxed act-head probabilities. A dict whose keys are not all
strings (int question ids, int choice labels) is written as `{"__items__": [[key, value], ...]}`
so its keys keep their types; everything else is plain JSON, floats at full repr precision.

The script also checks that transformers' `AutoTokenizer` (what Laya tokenizes with) and the raw
`tokenizers.Tokenizer` (what kime uses) give the same ids on every text the cases tokenize, and
exits non-zero when they differ.
"""
from __future__ import annotations

import copy
import importlib
import json
import os
import shutil
import sys
import types
import warnings
from pathlib import Path
from typing import Any, Dict, List, Tuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import laya  # noqa: E402
import laya.agent  # noqa: E402
import laya.common  # noqa: E402


def _kime_synthetic() -> types.ModuleType:
    """Import `kime.synthetic` (the checkpoint writer) without running `kime/__init__.py`.

    The package's `__init__` wires up the engine, which may want compiled kernels or runtime
    dependencies this oracle environment does not have; the writer needs none of them.
    """
    package = types.ModuleType("kime")
    package.__path__ = [str(ROOT / "kime")]
    sys.modules.setdefault("kime", package)
    return importlib.import_module("kime.synthetic")


write_checkpoint = _kime_synthetic().write_checkpoint

GOLDENS = ROOT / "tests" / "goldens"
SEED = 0
CHECKPOINTS = ("tiny", "multilingual-tiny")


# ------------------------------------------------------------------------------------ encoding

def to_json(obj: Any) -> Any:
    """Plain JSON, except a dict with a non-str key becomes {"__items__": [[key, value], ...]}."""
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: to_json(v) for k, v in obj.items()}
        return {"__items__": [[to_json(k), to_json(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    return obj


def from_json(obj: Any) -> Any:
    """The inverse of `to_json`, used here to prove every case round-trips."""
    if isinstance(obj, dict):
        if set(obj) == {"__items__"}:
            return {_hashable(from_json(k)): from_json(v) for k, v in obj["__items__"]}
        return {k: from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_json(v) for v in obj]
    return obj


def _hashable(key: Any) -> Any:
    return tuple(key) if isinstance(key, list) else key


# ------------------------------------------------------------------------------------ texts

EMAIL = ("Subject: Refund request for order #48213\n"
         "Hi support team, I was charged twice for my subscription this month. "
         "Could you refund the duplicate payment? Thanks, Maria")

LONG_TEXT = " ".join([
    "The morning train to the coast was late again, and nobody on the platform seemed surprised.",
    "Our dashboard has returned HTTP 503 errors since 09:42 UTC, which is blocking the sales team.",
    "Please escalate to on-call engineering immediately; this is the third outage this week.",
    "The warranty covers manufacturing defects for two years but not accidental damage.",
    "Researchers found that sleep, exercise and a varied diet matter more than any supplement.",
    "The contract renews automatically unless either party gives thirty days of written notice.",
    "Satellites photographed the glacier each month, revealing how quickly its edge retreated.",
    "Students must submit their essays through the online portal before midnight on Friday.",
    "Volunteers planted four hundred trees along the northern edge of the park last autumn.",
    "FINAL SENTENCE: the customer wants a refund of 49.99 EUR for order A-7781.",
])

CONVERSATION = [
    {"role": "user", "content": "Hi, I ordered a blue kettle last week."},
    {"role": "assistant", "content": "Thanks for reaching out! What is your order number?"},
    {"role": "user", "content": "It is order #55102."},
    {"role": "assistant", "content": "I see it. The kettle was shipped on Monday."},
    {"role": "user", "content": "But I received a red toaster instead of the kettle."},
    {"role": "assistant", "content": "I am sorry about that. Would you like an exchange or a refund?"},
    {"role": "user", "content": "Hmm, let me think. What is faster?"},
    {"role": "assistant", "content": "An exchange usually takes three to five business days."},
    {"role": "user", "content": "And a refund?"},
    {"role": "assistant", "content": "A refund reaches your card within ten days."},
    {"role": "user", "content": "OK. Also, my invoice address is wrong, it should be Baker Street."},
    {"role": "assistant", "content": "I have updated the invoice address for you."},
    {"role": "user", "content": "Great. Please cancel the order and refund me, I do not want to wait."},
]

DICT_STATE = {
    "ticket": {"id": 90211, "subject": "Login loop — can't sign in", "priority": "high",
               "labels": ["auth", "web", "ünïcödé"], "score": 98.6, "ratio": 1e-05},
    "customer": {"name": "José García", "verified": False, "vip": True, "phone": None,
                 "locale": "es-ES", "notes": "¡Muy urgente! 🙏"},
    "history": [{"event": "login", "ok": False}, {"event": "reset", "ok": None}, 3, -4.5, "x"],
    "counts": {1: 3, 2: 5},
    "empty": {},
    "nested": {"a": {"b": {"c": [[], [1, [2, [3]]]]}}},
}

GERMAN = ("Guten Morgen! Die Lieferung ist leider beschädigt angekommen, und ich möchte das Paket "
          "zurückgeben. Könnten Sie mir bitte die Rechnung für März noch einmal schicken?")
FRENCH = "Bonjour, je voudrais annuler ma commande passée hier soir, s'il vous plaît. Merci !"
SPANISH = "Hola, ¿puedo cambiar la dirección de entrega de mi pedido? El producto llegó roto."
JAPANESE = "こんにちは。注文した商品がまだ届いていません。確認していただけますか。鬱陶しい 🦜"
EMOJI = "The package arrived broken 😞🙏 but the support 👩‍💻 was great 🎉🚀 ❤️ 10/10 ✅"

# ------------------------------------------------------------------------------------ questions

INTENT3 = {"type": "choice", "instructions": "What does the customer want?",
           "criteria": {"refund": "money back for a purchase", "information": "an answer to a question",
                        "cancel": "close the account or stop an order"}}
URGENCY5 = {"type": "score", "instructions": "How urgent is this message?",
            "criteria": ["not urgent", "low", "medium", "high", "critical, act now"]}
ANGRY = {"type": "noul", "instructions": "The customer is angry."}
LANG2 = {"type": "choice", "instructions": "Which language is the text in?", "criteria": ["English", "other"]}
TOPIC12 = {"type": "choice", "instructions": "Which topic fits best?",
           "criteria": ["billing", "shipping", "login", "bug", "feature", "praise", "security",
                        "cancel", "address", "pricing", "refund", "other"]}
TOPIC7 = {"type": "choice", "instructions": "Which department should handle it?",
          "criteria": {"sales": "new purchases", "support": "problems", "billing": "invoices",
                       "legal": "contracts and GDPR", "tech": "outages and bugs",
                       "logistics": "deliveries", "none": ""}}
SENTIMENT2 = {"type": "score", "instructions": "Sentiment of the text", "criteria": ["negative", "positive"]}
SATISFACTION7 = {"type": "score", "instructions": "How satisfied is the writer?",
                 "criteria": ["furious", "angry", "unhappy", "neutral", "content", "happy", "delighted"]}
SCALE11 = {"type": "score", "instructions": "Rate the severity from 0 to 10.",
           "criteria": ["none", "trivial", "minor", "small", "moderate", "notable", "serious",
                        "major", "severe", "critical", "catastrophic"]}
FORMAL = {"type": "noul", "instructions": "The text is written formally.",
          "criteria": {"true": "polite, complete sentences", "false": "casual or rude"}}

BASIC = {"intent": INTENT3, "urgency": URGENCY5, "angry": ANGRY, "language": LANG2}

CROWDED_CHOICE = {
    "type": "choice",
    "instructions": "Which statement describes the request best?",
    "criteria": {
        "a": "the customer is asking about the status of an order that was placed last week",
        "b": "the customer is asking about the status of an order that was placed yesterday",
        "c": "the customer is asking about the status of an invoice that was sent last month",
        "d": "the customer is asking about the status of a refund that was promised",
        "e": "the customer is asking about the status of a repair",
        "f": "the customer is asking about something else entirely",
        "g": "the customer is asking about the status of their account",
        "h": "the customer is asking about the status of a delivery",
    },
}
CROWDED_LABELS = {
    "type": "choice",
    "instructions": "Which label fits?",
    "criteria": ["the customer is asking about the status of an order placed last week",
                 "the customer is asking about the status of an order placed yesterday",
                 "the customer is asking about the status of an invoice sent last month",
                 "the customer is asking about the status of a refund",
                 "the customer is asking about the status of a repair",
                 "the customer is asking about something else",
                 "the customer is asking about the status of their account",
                 "the customer is complaining"],
}
CROWDED_SCORE = {
    "type": "score",
    "instructions": "How well does the answer follow the guideline?",
    "criteria": ["the answer does not follow the guideline at all and ignores the question",
                 "the answer does not follow the guideline at all but addresses the question",
                 "the answer partly follows the guideline and addresses the question",
                 "the answer partly follows the guideline and fully answers the question",
                 "the answer fully follows the guideline and fully answers the question",
                 "the answer fully follows the guideline, answers, and adds useful context"],
}


def many_labels(n: int) -> List[str]:
    return ["option number %d with extra words" % i for i in range(n)]


# ------------------------------------------------------------------------------------ cases

def case(id: str, checkpoint: str, about: str, call: str, **args: Any) -> Dict[str, Any]:
    return {"id": id, "checkpoint": checkpoint, "about": about, "call": call, "args": args}


def good_cases() -> List[Dict[str, Any]]:
    T, M = "tiny", "multilingual-tiny"
    return [
        case("string_state_basic", T, "an email string; choice 3, score 5, noul without criteria, choice 2",
             "predict", state=EMAIL, questions=BASIC),
        case("dict_state_unicode_nested", T,
             "a dict state with unicode, nesting, numbers, booleans, null and an int key; choice 6-10, score 6-10",
             "predict", state=DICT_STATE, questions={"dept": TOPIC7, "satisfaction": SATISFACTION7, "angry": ANGRY}),
        case("list_conversation_truncated_left", T,
             "a conversation longer than the room: truncated from the left; choice 11+, noul",
             "predict", state=CONVERSATION, questions={"topic": TOPIC12, "angry": ANGRY}),
        case("empty_string_state", T, "the empty string as the state", "predict",
             state="", questions={"intent": INTENT3, "formal": FORMAL}),
        case("long_string_truncated", T, "a long string keeps its start; score 11+, score 2, choice 2",
             "predict", state=LONG_TEXT, questions={"severity": SCALE11, "sentiment": SENTIMENT2, "language": LANG2}),
        case("mask_literal_everywhere", T,
             "[MASK] in the state, instructions, choice labels and descriptions, score levels, noul criteria and labels",
             "predict", state="Please [MASK] my order [MASK][MASK] now. [MASK]",
             questions={
                 "c": {"type": "choice", "instructions": "What does [MASK] want?",
                       "criteria": {"[MASK]": "a [MASK] label", "refund[MASK]": "money [MASK]back", "plain": None}},
                 "s": {"type": "score", "instructions": "[MASK]", "criteria": ["[MASK] low", "mid[MASK]", "[MASK]"]},
                 "n": {"type": "noul", "instructions": "The writer is [MASK] polite.",
                       "criteria": {"true": "yes [MASK]", "false": "[MASK]no"},
                       "labels": {"false": "[MASK] F", "true": "T [MASK]"}},
             }),
        case("literal_special_tokens_in_text", T,
             "[CLS] [SEP] [PAD] [UNK] written in the state and an option are tokenized as special tokens",
             "predict", state="[CLS] start [SEP] middle [PAD][UNK] end [SEP]",
             questions={"c": {"type": "choice", "instructions": "Pick [SEP] one", "criteria": ["[CLS] a", "b [PAD]"]}}),
        case("single_option_choice", T, "a choice with one option (k=1): probability 1, act features top2=0",
             "predict", state=EMAIL, questions={"only": {"type": "choice", "instructions": "Pick the label.",
                                                         "criteria": {"solo": "the only option"}}}),
        case("crowded_options_collapse", T,
             "long shared-prefix descriptions are cut to max(4, (head_max_len-16)//k) tokens and collapse",
             "predict", state=EMAIL,
             questions={"labels": CROWDED_LABELS, "which": CROWDED_CHOICE, "follow": CROWDED_SCORE}),
        case("noul_custom_labels_mixed_case_criteria", T,
             "noul with custom labels and criteria keyed 'True'/'FALSE'", "predict", state=EMAIL,
             questions={"n": {"type": "noul", "instructions": "The order was paid twice.",
                              "criteria": {"True": "charged two times", "FALSE": "charged once or never"},
                              "labels": {"false": "  No way ", "true": "Yes indeed"}},
                        "bools": {"type": "noul", "instructions": "Refund requested.",
                                  "criteria": {True: "asks for money back", False: ""}}}),
        case("choice_list_int_labels", T, "a list of int labels: the answer's choice stays an int",
             "predict", state="I would give it three stars out of five.",
             questions={"stars": {"type": "choice", "instructions": "How many stars?", "criteria": [1, 2, 3, 4, 5]}}),
        case("choice_mixed_scalar_labels", T, "labels of mixed scalar types: str, int, float, bool",
             "predict", state=EMAIL,
             questions={"mixed": {"type": "choice", "instructions": "Pick one.", "criteria": ["yes", 2, 3.5, False, ""]}}),
        case("choice_dict_none_empty_zero", T,
             "descriptions None and '' render the bare label; 0 and False are rendered",
             "predict", state=EMAIL,
             questions={"d": {"type": "choice", "instructions": "Pick one.",
                              "criteria": {"none": None, "empty": "", "zero": 0, "false": False, "text": "a text"}}}),
        case("structured_instructions_and_criteria", T,
             "dict and list instructions; dict- and list-valued choice, score and noul descriptions",
             "predict", state=EMAIL,
             questions={
                 "dict_ins": {"type": "noul", "instructions": {"task": "is it a refund?", "strict": True, "n": 2}},
                 "list_ins": {"type": "choice", "instructions": ["classify", "the email", 3, None],
                              "criteria": {"r": {"desc": "refund", "weight": 1.5}, "o": ["other", "misc"]}},
                 "score_struct": {"type": "score", "instructions": "Severity",
                                  "criteria": [{"level": "low", "ex": ["typo"]}, ["medium", 2], 3, "high"]},
                 "noul_struct": {"type": "noul", "instructions": "Mentions money",
                                 "criteria": {"true": {"mentions": ["refund", "charge"]}, "false": ["nothing"]}},
             }),
        case("option_order_choice_and_score", T,
             "option_order on a choice and on a score: slots permuted, answers back in caller order",
             "predict", state=EMAIL,
             questions={"intent": dict(INTENT3, option_order=[2, 0, 1]),
                        "urgency": dict(URGENCY5, option_order=[4, 3, 2, 1, 0]),
                        "noul": dict(ANGRY, option_order=[1, 0])}),
        case("unicode_emoji", T, "emoji, ZWJ sequences and CJK in the state and instructions",
             "predict", state=EMOJI + " " + JAPANESE,
             questions={"happy": {"type": "noul", "instructions": "The writer is happy 😊"},
                        "lang": {"type": "choice", "instructions": "Sprache? 言語?",
                                 "criteria": {"en": "English 🇬🇧", "ja": "日本語", "de": "Deutsch"}}}),
        case("int_question_ids", T, "int question ids come back as int keys", "predict", state=EMAIL,
             questions={1: INTENT3, 2: ANGRY, "three": URGENCY5}),
        case("empty_questions_predict", T, "empty questions: empty answers, zero usage, no forward",
             "predict", state=EMAIL, questions={}),
        case("max_len_head_max_len_override", T, "max_len=48 truncates the state, head_max_len=24 crowds options",
             "predict", state=EMAIL, questions={"intent": INTENT3, "urgency": URGENCY5}, max_len=48, head_max_len=24),
        case("head_max_len_override_large", T, "a larger head_max_len than the checkpoint's keeps options whole",
             "predict", state=LONG_TEXT, questions={"labels": CROWDED_LABELS}, head_max_len=150),
        case("buckets_all_sizes_tiny", T,
             "choice and score with 2, 3-5, 6-10 and 11+ options: every temperature bucket incl. clamped ones",
             "predict", state=EMAIL,
             questions={"c2": LANG2, "c4": {"type": "choice", "instructions": "Channel?",
                                            "criteria": ["email", "phone", "chat", "letter"]},
                        "c7": TOPIC7, "c12": TOPIC12, "s2": SENTIMENT2, "s5": URGENCY5, "s7": SATISFACTION7,
                        "s11": SCALE11, "n": FORMAL}),
        case("batch_mixed_lengths", T, "five states of different lengths and kinds in one forward",
             "predict_batch", states=[EMAIL, "", "short", DICT_STATE, CONVERSATION], questions=BASIC),
        case("batch_size_2_over_5", T, "batch_size=2 over 5 states: three forwards",
             "predict_batch", states=[LONG_TEXT, EMAIL, "ok", GERMAN, CONVERSATION[:3]],
             questions={"intent": INTENT3, "angry": ANGRY}, batch_size=2),
        case("batch_size_zero_means_all", T, "batch_size=0 sends every state in one forward",
             "predict_batch", states=[EMAIL, "short"], questions={"angry": ANGRY}, batch_size=0),
        case("batch_overrides", T, "predict_batch with max_len and head_max_len overrides",
             "predict_batch", states=[LONG_TEXT, EMAIL], questions={"which": CROWDED_CHOICE, "angry": ANGRY},
             max_len=96, head_max_len=40),
        case("batch_single_state", T, "a one-state batch (question token reuse disabled)",
             "predict_batch", states=[EMAIL], questions={"topic": TOPIC12}),
        case("batch_empty_questions", T, "empty questions over two states", "predict_batch",
             states=[EMAIL, "x"], questions={}),
        case("empty_states_list", T, "an empty states list returns []", "predict_batch",
             states=[], questions=BASIC),
        case("empty_states_skip_validation", T, "no states: the invalid question is never checked",
             "predict_batch", states=[], questions={"bad": {"type": "nope"}}),
        case("numeric_and_bool_instructions", T, "int, float and bool instructions are accepted as JSON text",
             "predict", state=EMAIL,
             questions={"i": {"type": "noul", "instructions": 42}, "f": {"type": "noul", "instructions": 3.5},
                        "b": {"type": "noul", "instructions": True}}),
        # ---------------------------------------------------------------- multilingual
        case("ml_german_basic", M, "German email; choice 3 ('warm' -> 1.0), score 5, noul, choice 2",
             "predict", state=GERMAN, questions=BASIC),
        case("ml_dict_state", M, "dict state on the metaspace tokenizer; choice 6-10, score 6-10 (0.4 -> 0.5)",
             "predict", state=DICT_STATE, questions={"dept": TOPIC7, "satisfaction": SATISFACTION7}),
        case("ml_conversation_truncated_left", M, "conversation truncated from the left; choice 11+, score 11+",
             "predict", state=CONVERSATION, questions={"topic": TOPIC12, "severity": SCALE11}),
        case("ml_long_string_truncated", M, "long string truncated from the end", "predict",
             state=LONG_TEXT + " " + GERMAN, questions={"angry": ANGRY, "sentiment": SENTIMENT2}),
        case("ml_mask_literal", M, "<mask> in the state, instructions, labels and criteria", "predict",
             state="Bitte <mask> meine Bestellung <mask><mask> jetzt. <mask>",
             questions={"c": {"type": "choice", "instructions": "Was will <mask>?",
                              "criteria": {"<mask>": "ein <mask> Label", "zurück<mask>": "Geld<mask>"}},
                        "s": {"type": "score", "instructions": "<mask>", "criteria": ["<mask> niedrig", "hoch<mask>"]},
                        "n": {"type": "noul", "instructions": "Höflich <mask>?",
                              "criteria": {"true": "ja <mask>", "false": "<mask>nein"},
                              "labels": {"false": "<mask>F", "true": "W <mask>"}}}),
        case("ml_literal_specials", M, "<bos> <eos> <pad> <unk> written in the text", "predict",
             state="<bos>Hallo<eos> <pad> Welt <unk>",
             questions={"c": {"type": "choice", "instructions": "<eos> Wahl", "criteria": ["<bos>a", "b"]}}),
        case("ml_japanese_emoji_byte_fallback", M,
             "Japanese, rare CJK and emoji that only byte fallback can encode", "predict",
             state=JAPANESE + " " + EMOJI,
             questions={"lang": {"type": "choice", "instructions": "言語は？",
                                 "criteria": {"ja": "日本語 🗾", "en": "英語", "fr": "フランス語", "es": "スペイン語"}},
                        "polite": {"type": "noul", "instructions": "丁寧な文章です。"}}),
        case("ml_french_spanish_batch", M, "French, Spanish, empty and dict states with batch_size=3",
             "predict_batch", states=[FRENCH, SPANISH, "", DICT_STATE, JAPANESE],
             questions={"intent": INTENT3, "urgency": URGENCY5}, batch_size=3),
        case("ml_batch_no_batch_size", M, "four states of different lengths in one forward",
             "predict_batch", states=[GERMAN, "ja", CONVERSATION, LONG_TEXT],
             questions={"c12": TOPIC12, "n": FORMAL}),
        case("ml_crowded_collapse", M, "crowded options collapse on the metaspace tokenizer", "predict",
             state=FRENCH, questions={"labels": CROWDED_LABELS, "which": CROWDED_CHOICE, "follow": CROWDED_SCORE}),
        case("ml_option_order", M, "option_order on choice 12 and score 7", "predict", state=SPANISH,
             questions={"topic": dict(TOPIC12, option_order=[11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0]),
                        "sat": dict(SATISFACTION7, option_order=[3, 1, 4, 0, 5, 2, 6])}),
        case("ml_overrides", M, "max_len=64 and head_max_len=30 overrides", "predict", state=GERMAN,
             questions={"intent": INTENT3, "topic": TOPIC12}, max_len=64, head_max_len=30),
        case("ml_buckets_all_sizes", M, "every temperature bucket on the multilingual checkpoint", "predict",
             state=SPANISH,
             questions={"c1": {"type": "choice", "instructions": "Only", "criteria": ["uno"]},
                        "c2": LANG2, "c5": {"type": "choice", "instructions": "Canal",
                                            "criteria": ["email", "phone", "chat", "letter", "fax"]},
                        "c7": TOPIC7, "c12": TOPIC12, "s2": SENTIMENT2, "s3": {"type": "score",
                        "instructions": "Tono", "criteria": ["malo", "normal", "bueno"]},
                        "s7": SATISFACTION7, "s11": SCALE11, "n": ANGRY}),
        case("ml_int_ids_int_labels", M, "int question ids and int labels on the multilingual checkpoint",
             "predict", state=FRENCH,
             questions={7: {"type": "choice", "instructions": "Note?", "criteria": [0, 1, 2, 10]},
                        8: {"type": "noul", "instructions": "Client poli.",
                            "labels": {"false": "non", "true": "oui"}}}),
    ]


def error_cases() -> List[Dict[str, Any]]:
    T, M = "tiny", "multilingual-tiny"
    ok = {"type": "noul", "instructions": "ok"}

    def q(**kw: Any) -> Dict[str, Any]:
        return {"bad": kw}

    def choice(criteria: Any, **kw: Any) -> Dict[str, Any]:
        return q(type="choice", instructions="Pick one.", criteria=criteria, **kw)

    def score(criteria: Any, **kw: Any) -> Dict[str, Any]:
        return q(type="score", instructions="Rate it.", criteria=criteria, **kw)

    def noul(**kw: Any) -> Dict[str, Any]:
        return q(type="noul", instructions="It holds.", **kw)

    P = "predict"
    return [
        case("error_blank_question_id", T, "a blank question id", P, state=EMAIL, questions={"   ": ok}),
        case("error_empty_question_id", M, "an empty question id", P, state=EMAIL, questions={"": ok}),
        case("error_none_question_id", T, "a None question id", P, state=EMAIL, questions={None: ok}),
        case("error_float_question_id", T, "a float question id", P, state=EMAIL, questions={1.5: ok}),
        case("error_definition_not_dict", T, "a definition that is not a dict", P, state=EMAIL,
             questions={"q": "choice"}),
        case("error_unknown_type", T, "an unknown question type", P, state=EMAIL,
             questions=q(type="multi", instructions="x", criteria=["a"])),
        case("error_missing_type", M, "no type at all", P, state=EMAIL, questions=q(instructions="x")),
        case("error_missing_instructions", T, "no instructions", P, state=EMAIL,
             questions=q(type="choice", criteria=["a", "b"])),
        case("error_none_instructions", T, "instructions None", P, state=EMAIL,
             questions=q(type="noul", instructions=None)),
        case("error_blank_instructions", T, "blank instructions", P, state=EMAIL,
             questions=q(type="noul", instructions=" \n\t ")),
        case("error_empty_list_instructions", T, "empty-list instructions", P, state=EMAIL,
             questions=q(type="noul", instructions=[])),
        case("error_empty_dict_instructions", M, "empty-dict instructions", P, state=EMAIL,
             questions=q(type="noul", instructions={})),
        case("error_none_state_with_empty_questions", T,
             "a None state is refused even when questions are empty (the state check comes first)",
             "predict_batch", states=[EMAIL, None], questions={}),
        case("error_choice_criteria_wrong_type", T, "choice criteria given as a string", P, state=EMAIL,
             questions=choice("a, b")),
        case("error_choice_criteria_missing", T, "choice without criteria", P, state=EMAIL,
             questions=q(type="choice", instructions="x")),
        case("error_choice_criteria_empty", T, "empty choice criteria", P, state=EMAIL, questions=choice({})),
        case("error_choice_label_not_scalar", T, "a list as a choice label", P, state=EMAIL,
             questions=choice(["a", ["b", "c"]])),
        case("error_choice_label_dict", M, "a dict as a choice label", P, state=EMAIL,
             questions=choice([{"x": 1}])),
        case("error_choice_label_null", T, "a null choice label", P, state=EMAIL, questions=choice(["a", None])),
        case("error_choice_label_repeated", T, "a repeated choice label", P, state=EMAIL,
             questions=choice(["a", "b", "a"])),
        case("error_choice_label_repeated_int_float", T, "1 and 1.0 are one answer key", P, state=EMAIL,
             questions=choice([1, 1.0])),
        case("error_choice_label_repeated_true_one", M, "True and 1 are one answer key", P, state=EMAIL,
             questions=choice([1, True])),
        case("error_score_criteria_not_list", T, "score criteria as a dict", P, state=EMAIL,
             questions=score({"0": "low", "1": "high"})),
        case("error_score_criteria_empty", T, "empty score criteria", P, state=EMAIL, questions=score([])),
        case("error_score_level_null", T, "a null score level", P, state=EMAIL,
             questions=score(["low", "mid", None])),
        case("error_noul_criteria_not_dict", T, "noul criteria as a list", P, state=EMAIL,
             questions=noul(criteria=["no", "yes"])),
        case("error_noul_criteria_other_keys", T, "noul criteria with keys other than true/false", P,
             state=EMAIL, questions=noul(criteria={"yes": "it holds", "True": "x", "no": "y"})),
        case("error_option_order_wrong_length", T, "option_order of the wrong length", P, state=EMAIL,
             questions=choice(["a", "b", "c"], option_order=[0, 1])),
        case("error_option_order_repeated", T, "option_order repeating an index", P, state=EMAIL,
             questions=score(["l", "m", "h"], option_order=[0, 0, 2])),
        case("error_option_order_bools", T, "option_order made of bools", P, state=EMAIL,
             questions=noul(option_order=[True, False])),
        case("error_option_order_not_list", M, "option_order given as a string", P, state=EMAIL,
             questions=choice(["a", "b"], option_order="01")),
        case("error_labels_on_choice", T, "labels on a non-noul question", P, state=EMAIL,
             questions=choice(["a", "b"], labels={"false": "n", "true": "y"})),
        case("error_noul_labels_missing_key", T, "noul labels without 'false'", P, state=EMAIL,
             questions=noul(labels={"true": "yes"})),
        case("error_noul_labels_equal", T, "noul labels that are equal after strip", P, state=EMAIL,
             questions=noul(labels={"false": "same", "true": " same "})),
        case("error_noul_labels_blank", M, "a blank noul label", P, state=EMAIL,
             questions=noul(labels={"false": "  ", "true": "yes"})),
        case("error_noul_labels_not_str", T, "a non-string noul label", P, state=EMAIL,
             questions=noul(labels={"false": 0, "true": 1})),
        case("error_states_is_string", T, "predict_batch given a string instead of a list", "predict_batch",
             states=EMAIL, questions=BASIC),
        case("error_states_is_dict", M, "predict_batch given a dict state instead of a list", "predict_batch",
             states={"a": 1}, questions=BASIC),
        case("error_questions_not_dict", T, "questions given as a list", "predict_batch",
             states=[EMAIL], questions=[INTENT3]),
        case("error_questions_not_dict_predict", M, "predict with questions as a list", P,
             state=EMAIL, questions=[ANGRY]),
        case("error_none_state_in_list", T, "a None state inside the list", "predict_batch",
             states=[EMAIL, None, "x"], questions=BASIC),
        case("error_none_state_predict", T, "predict(None, ...)", P, state=None, questions=BASIC),
        case("error_options_do_not_fit", T, "60 options cannot all fit in max_len=160", P, state=EMAIL,
             questions={"ok": ANGRY, "huge": {"type": "choice", "instructions": "Pick.",
                                              "criteria": many_labels(60)}}),
        case("error_options_do_not_fit_override", M, "a max_len override too small for the options", P,
             state=GERMAN, questions={"topic": TOPIC12}, max_len=24),
        case("error_options_do_not_fit_batch", T, "the fit error raised from inside predict_batch",
             "predict_batch", states=["a", "b"], questions={"topic": TOPIC12}, max_len=30, head_max_len=64),
        case("error_several_problems_ids", T,
             "several invalid questions: Laya reports only the first (the blank id)", P, state=EMAIL,
             questions={"fine": ok, "": {"type": "bogus"}, "x": {"type": "choice", "instructions": "y",
                                                                 "criteria": []}}),
        case("error_several_problems_one_question", M,
             "one question with an unknown type, no instructions and bad labels: first problem only",
             "predict_batch", states=[EMAIL], questions={"q": {"type": "ranking", "criteria": 3, "labels": "x"}}),
        case("error_several_problems_state_and_question", T,
             "a None state and an invalid question: the state check runs first", "predict_batch",
             states=[None, EMAIL], questions={"q": {"type": "choice", "instructions": "", "criteria": []}}),
        case("error_several_problems_args", T, "states a string and questions a list: the states check wins",
             "predict_batch", states="text", questions=["not", "a", "dict"]),
    ]


# ------------------------------------------------------------------------------------ running

class Recorder:
    """Wraps `agent._forward` to keep the unpadded rows of every collated batch."""

    def __init__(self, agent: Any):
        self.rows: List[Dict[str, Any]] = []
        self._forward = agent._forward
        agent._forward = self

    def __call__(self, b: Dict[str, Any]):
        logits, act = self._forward(b)
        ids, att = b["input_ids"].numpy(), b["attention_mask"].numpy()
        mpos, mmask, qtype = b["marker_pos"].numpy(), b["marker_mask"].numpy(), b["qtype"].numpy()
        for i in range(ids.shape[0]):
            n, k = int(att[i].sum()), int(mmask[i].sum())
            assert att[i, :n].all() and mmask[i, :k].all(), "masks must be prefixes"
            self.rows.append({
                "ids": ids[i, :n].tolist(),
                "markers": mpos[i, :k].tolist(),
                "qtype": int(qtype[i]),
                "logits": [float(x) for x in logits[i, :k]],
                "act": [float(x) for x in act[i]],
            })
        return logits, act


class TextLog:
    """Records every text Laya tokenizes, with the keyword arguments it used."""

    def __init__(self) -> None:
        self.calls: List[Tuple[str, Tuple[Tuple[str, Any], ...]]] = []
        self._original = laya.common.encode_text

    def install(self) -> None:
        def recording(tok: Any, text: str, **kwargs: Any):
            self.calls.append((text, tuple(sorted(kwargs.items()))))
            return self._original(tok, text, **kwargs)
        laya.common.encode_text = recording
        laya.agent.encode_text = recording


def run_case(agent: Any, spec: Dict[str, Any]) -> Dict[str, Any]:
    args = copy.deepcopy(spec["args"])
    recorder = Recorder(agent)
    result, error = None, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if spec["call"] == "predict":
                options = {k: args[k] for k in ("max_len", "head_max_len") if k in args}
                result = agent.system_one(args["state"], args["questions"], **options)
            else:
                options = {k: args[k] for k in ("batch_size", "max_len", "head_max_len") if k in args}
                result = agent.predict_batch(args["states"], args["questions"], **options)
        except (ValueError, TypeError) as exc:
            error = {"type": type(exc).__name__, "message": str(exc)}
        finally:
            agent._forward = recorder._forward
    if args != spec["args"]:
        raise AssertionError("Laya changed the arguments of case %s" % spec["id"])
    out = dict(spec)
    out.update({"result": result, "error": error, "warnings": [str(w.message) for w in caught],
                "rows": recorder.rows})
    return out


def check_tokenizers(path: Path, agent: Any, log: TextLog) -> List[str]:
    """Compare AutoTokenizer with the raw tokenizers encode on every logged text."""
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(path / "tokenizer" / "tokenizer.json"))
    problems = []
    for text, kwargs in dict.fromkeys(log.calls):
        options = dict(kwargs)
        expected = agent.tok(text, **options)["input_ids"]
        got = raw.encode(text, add_special_tokens=False).ids
        if options.get("truncation"):
            got = got[: options["max_length"]]
        if got != expected:
            problems.append("%s: %r -> AutoTokenizer %r, tokenizers %r" % (path.name, text, expected, got))
    return problems


def summarize(cases: List[Dict[str, Any]]) -> None:
    rows = [r for c in cases for r in c["rows"]]
    spreads = [max(r["logits"]) - min(r["logits"]) for r in rows if len(r["logits"]) > 1]
    acts = [r["act"][0] for r in rows]
    truncated = sum(1 for c in cases for res in _results(c) if res.get("usage", {}).get("truncated"))
    collapsed = sum(1 for c in cases for res in _results(c) if "options" in res.get("usage", {}))
    print("%d cases (%d errors), %d rows; logit spread median %.2f [%.2f..%.2f]; act[0] [%.3f..%.3f];"
          " %d truncated results, %d with collapsed options"
          % (len(cases), sum(c["error"] is not None for c in cases), len(rows), float(np.median(spreads)),
             min(spreads), max(spreads), min(acts), max(acts), truncated, collapsed))


def _results(c: Dict[str, Any]) -> List[Dict[str, Any]]:
    if c["result"] is None:
        return []
    return c["result"] if isinstance(c["result"], list) else [c["result"]]


def check_every_shape_loads() -> None:
    """Laya must load every checkpoint kime's writer makes, the big shapes included."""
    import tempfile

    from kime.synthetic import SHAPES

    for shape in SHAPES:
        with tempfile.TemporaryDirectory(prefix="kime-shape-") as tmp:
            path = write_checkpoint(os.path.join(tmp, shape), shape, seed=SEED,
                                    odd_temperatures=True)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                agent = laya.Agent(str(path), device="cpu")
            result = agent.predict("a state", {"q": {"type": "noul", "instructions": "true?"}})
            print("laya loads and answers the %s shape: noul=%s" % (shape, result["answers"]["q"]["noul"]))
            del agent


def main() -> int:
    specs = good_cases() + error_cases()
    ids = [s["id"] for s in specs]
    assert len(set(ids)) == len(ids), "case ids must be unique"

    log = TextLog()
    log.install()
    checkpoints, agents, problems = {}, {}, []
    for name in CHECKPOINTS:
        path = GOLDENS / "checkpoints" / name
        shutil.rmtree(path, ignore_errors=True)
        write_checkpoint(path, name, seed=SEED, odd_temperatures=True)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            agents[name] = laya.Agent(str(path), device="cpu")
        checkpoints[name] = {"path": "checkpoints/%s" % name, "shape": name, "seed": SEED,
                             "load_warnings": [str(w.message) for w in caught]}

    cases = []
    for spec in specs:
        before = len(log.calls)
        done = run_case(agents[spec["checkpoint"]], spec)
        should_fail = spec["id"].startswith("error_")
        if should_fail != (done["error"] is not None):
            raise AssertionError("case %s: expected %s, got error=%r"
                                 % (spec["id"], "an error" if should_fail else "success", done["error"]))
        cases.append(done)
        texts = TextLog()
        texts.calls = log.calls[before:]
        problems += check_tokenizers(GOLDENS / "checkpoints" / spec["checkpoint"], agents[spec["checkpoint"]], texts)

    payload = to_json({
        "laya_version": laya.__version__,
        "torch_version": torch.__version__,
        "transformers_version": transformers.__version__,
        "tokenizers_version": tokenizers.__version__,
        "checkpoints": checkpoints,
        "cases": cases,
    })
    if from_json(json.loads(json.dumps(payload))) != from_json(payload):
        raise AssertionError("cases.json does not round-trip")
    for c, spec in zip(payload["cases"], specs):
        if from_json(c["args"]) != spec["args"]:
            raise AssertionError("case %s: args do not round-trip" % spec["id"])
    with open(GOLDENS / "cases.json", "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")

    summarize(cases)
    check_every_shape_loads()
    print("%d distinct texts tokenized" % len(dict.fromkeys(log.calls)))
    for line in problems:
        print("TOKENIZER MISMATCH", line)
    failed = record_areas()
    return 1 if problems or failed else 0


AREAS = ("goldens_agent.py", "goldens_calibration.py", "goldens_confidence.py")
"""The Laya surface's recorders (issue 10), one file of goldens each, run after the core cases
against the checkpoints just written."""
AREAS += ("goldens_router.py",)  # issue 11: routing (lang.json, router.json)
AREAS += ("goldens_serve.py",)  # issue 11: laya serve over a Router, `laya TEXT` (serve.json)
AREAS += ("goldens_fit.py",)  # issue 13: laya.calibrate's fitters on fixed records (fit.json)
AREAS += ("goldens_shortlist.py",)  # issue 23: shortlist and tournament (shortlist.json)
AREAS += ("goldens_serve_env.py",)  # issue 23: laya serve's environment, whole (serve_env.json)
AREAS += ("goldens_embed.py",)  # issue 23: embed_fn_from_agent, cached_embed_fn (embed.json)
AREAS += ("goldens_stability.py",)  # issue 23: OptionStabilityHook and helpers (stability.json)
AREAS += ("goldens_surface.py",)  # issue 23: laya's names, presets, email, helpers, fitters (surface.json)
AREAS += ("goldens_laya_init.py",)  # issue 23: a Laya-initialised checkpoint (laya_init.json)
AREAS += ("goldens_llamaindex.py",)  # issue 24: LlamaIndex selectors, router (integrations_llamaindex.json)
AREAS += ("goldens_crewai.py",)  # issue 24: CrewAI router, task guard, in .oracle-crewai (integrations_crewai.json)
AREAS += ("goldens_mcp.py",)  # issue 24: laya-mcp-server's tools over a Router (mcp.json)
AREAS += ("goldens_tools.py",)  # issue 24: the tool selector (integrations_tools.json)
AREAS += ("goldens_langchain.py",)  # issue 24: LangChain/LangGraph runnables (integrations_langchain.json)
AREAS += ("goldens_agno.py",)  # issue 24: agno router and guardrail (integrations_agno.json)
AREAS += ("goldens_parallel.py",)  # issue 26: a laya.train parallel-layout checkpoint (parallel.json)
AREAS += ("goldens_embed_templates.py",)  # issue 37: embeddings on three tokenizer templates (embed_templates.json)
AREAS += ("goldens_faults.py",)  # issue 38: where laya's guards and pickers fail open (integrations_faults.json)
AREAS += ("goldens_ecosystem.py",)  # issue 52: Agent.tok, laya.common, a rebound build_sequence, laya --predict (ecosystem.json)
AREAS += ("goldens_limits.py",)  # issue 53: budgets past the model's positions and out of range (limits.json)
AREAS += ("goldens_precision.py",)  # issue 55: the precision contract's peers, laya AMP and ORT INT8 (precision.json)


def record_areas() -> List[str]:
    """Run each area's recorder in this interpreter (the oracle); the names of those that failed."""
    import subprocess

    failed = []
    for script in AREAS:
        print("== %s" % script, flush=True)
        if subprocess.run([sys.executable, str(ROOT / "tools" / script)]).returncode != 0:
            failed.append(script)
    return failed


if __name__ == "__main__":
    sys.exit(main())
