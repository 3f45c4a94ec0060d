"""Record what laya-based packages reach for besides predict (issue 52):
`tests/goldens/ecosystem.json`. Run ONLY with the oracle environment (the real laya,
transformers and torch), like `tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_ecosystem.py

What it records, on the committed `tiny` and `multilingual-tiny` checkpoints:

- `modules`: every module of the laya package (`pkgutil.walk_packages`), which kime's path
  table must map or refuse by name;
- `tokenizers[name]`: transformers' `AutoTokenizer` (what `Agent.tok` is in laya) on texts and
  keyword sets (`calls`: the result dict, or the error type), its special tokens and ids, `len`,
  `vocab_size`, `model_max_length`, and `encode`, `decode`, `tokenize`, `convert_*` cases;
- `common`: `laya.common`'s pure helpers on those tokenizers: `build_sequence` with every
  return flag, `build_head`, `serialize_state`, `temp_bucket`, `clamp_temperature`,
  `collate_items` (tensors as lists);
- `rebound`: `Agent.predict` over a state longer than a row, with `laya.agent.build_sequence`
  as laya ships it and rebound to keep the state's end (`truncate_left=True`, as one MCP
  server rebinds it), so the rebinding is seen to change the answer;
- `cli`: `laya.cli.main(argv)` answering (`--predict`, `--preset`, `--questions`, `--batch`,
  `--min-confidence`, `--json`) over an offline Hugging Face cache holding the bundle repo made
  of the test checkpoints (`tests/hub_cache.py`): exit code, stdout, stderr.
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import pkgutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# The offline Hub cache laya's CLI loads from: set before huggingface_hub reads its environment.
HUB = Path(tempfile.mkdtemp(prefix="laya-hub-"))
os.environ["HF_HUB_CACHE"] = str(HUB)
os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

import laya  # noqa: E402
import laya.agent  # noqa: E402
import laya.common  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "ecosystem.json"
CHECKPOINTS = GOLDENS / "checkpoints"
NAMES = ("tiny", "multilingual-tiny")

TEXTS = ["Hello world", "I was charged twice, please refund me.", "", "   ",
         "Ich möchte das Paket zurückgeben, bitte.", "こんにちは。注文した商品がまだ届いていません。",
         "a [MASK] b <mask> c", "emoji 🙂 and tabs\tand\nnewlines",
         " ".join("word%d" % i for i in range(120))]
CALLS: List[Dict[str, Any]] = [
    {}, {"add_special_tokens": False}, {"truncation": True, "max_length": 5},
    {"truncation": True, "max_length": 1}, {"max_length": 4},
    {"add_special_tokens": False, "truncation": True, "max_length": 3},
    {"truncation": True}, {"padding": True}, {"padding": "max_length", "max_length": 12,
                                              "truncation": True},
    {"return_attention_mask": False}]
QUESTIONS = {
    "intent": {"t": "choice", "ins": "What does the customer want?",
               "crit": {"refund": "money back", "information": None, "cancel": "stop it"}},
    "urgency": {"t": "score", "ins": "How urgent?", "crit": ["not", "somewhat", "very"]},
    "legal": {"t": "noul", "ins": "Is a lawyer mentioned?", "crit": {"true": "yes"},
              "labels": {"false": "no", "true": "yes"}},
    "crowded": {"t": "choice", "ins": "Pick " * 40,
                "crit": {"option number %d" % i: "a long description " * 4 for i in range(12)}},
}
STATES: List[Any] = ["short state", {"subject": "Invoice", "body": "billed twice " * 30},
                     [{"role": "user", "content": "turn %d " % i * 8} for i in range(12)]]
PREDICT_QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "cancel": "stop an order"}},
    "start": {"type": "noul", "instructions": "Does the text open with a greeting?"},
}


def _plain(obj: Any) -> Any:
    if isinstance(obj, torch.Tensor):
        return obj.tolist()
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    return obj


def _outcome(fn: Any) -> Dict[str, Any]:
    try:
        return {"result": _plain(fn())}
    except Exception as e:  # recorded: what laya or transformers refuses
        return {"error": type(e).__name__}


def tokenizer_record(path: Path) -> Dict[str, Any]:
    tok = AutoTokenizer.from_pretrained(str(path / "tokenizer"))
    calls = []
    for kwargs in CALLS:
        calls.append(dict(kwargs=kwargs, text=TEXTS, **_outcome(lambda: dict(tok(TEXTS,
                                                                                  **kwargs)))))
        for text in TEXTS[:3]:
            calls.append(dict(kwargs=kwargs, text=text,
                              **_outcome(lambda: dict(tok(text, **kwargs)))))
    roles = ("bos", "eos", "unk", "sep", "pad", "cls", "mask")
    ids = tok("Hello [MASK] world <mask>")["input_ids"]
    return {
        "special": {r + "_token": getattr(tok, r + "_token") for r in roles},
        "special_ids": {r + "_token_id": getattr(tok, r + "_token_id") for r in roles},
        "all_special_tokens": list(tok.all_special_tokens),
        "all_special_ids": list(tok.all_special_ids),
        "len": len(tok), "vocab_size": tok.vocab_size, "model_max_length": tok.model_max_length,
        "calls": calls,
        "encode": [{"text": t, "ids": tok.encode(t)} for t in TEXTS],
        "decode": [{"ids": ids, "skip": skip, "text": tok.decode(ids, skip_special_tokens=skip)}
                   for skip in (False, True)],
        "tokenize": [{"text": t, "tokens": tok.tokenize(t)} for t in TEXTS[:6]],
        "tokens_to_ids": {"tokens": ["[MASK]", "<mask>", "Hello", "zzqqxx"],
                          "ids": tok.convert_tokens_to_ids(["[MASK]", "<mask>", "Hello",
                                                            "zzqqxx"])},
        "ids_to_tokens": {"ids": ids, "tokens": tok.convert_ids_to_tokens(ids),
                          "skipped": tok.convert_ids_to_tokens(ids, skip_special_tokens=True)},
    }


def common_record(path: Path) -> Dict[str, Any]:
    tok = AutoTokenizer.from_pretrained(str(path / "tokenizer"))
    sequences = []
    for qid, q in QUESTIONS.items():
        for s, state in enumerate(STATES):
            for budget in ((512, 192), (96, 48), (40, 30)):
                for left in (False, True):
                    sequences.append(dict(q=qid, state=s, max_len=budget[0],
                                          head_max_len=budget[1], truncate_left=left,
                                          **_outcome(lambda: laya.common.build_sequence(
                                              tok, state, q, budget[0], budget[1],
                                              truncate_left=left, return_stats=True,
                                              return_truncation_stats=True,
                                              return_layout=True))))
        sequences.append(dict(q=qid, state=0, max_len=512, head_max_len=192,
                              option_order="reversed", **_outcome(
                                  lambda: laya.common.build_sequence(
                                      tok, STATES[0], q, option_order=list(range(
                                          len(laya.common.render_options(q))))[::-1]))))
    heads = [dict(q=qid, **_outcome(lambda: laya.common.build_head(tok, q, 64)))
             for qid, q in QUESTIONS.items()]
    items = [[{"ids": [1, 5, 6, 2], "markers": [1], "qtype": 0, "label": 0, "extra": "x"},
              {"ids": [1, 7, 2], "markers": [1, 2], "qtype": 2, "target": [0.25, 0.75]}],
             [{"ids": [1, 9, 9, 9, 9, 2], "markers": [1, 3, 4], "qtype": 1}]]
    return {"sequences": sequences, "heads": heads,
            "serialize_state": [{"state": s, "text": laya.common.serialize_state(s)}
                                for s in STATES],
            "temp_bucket": [{"qtype": t, "k": k, "bucket": laya.common.temp_bucket(t, k)}
                            for t in (0, 1, 2) for k in (1, 2, 3, 5, 6, 10, 11, 40)],
            "clamp_temperature": [{"t": t, "value": laya.common.clamp_temperature(t)}
                                  for t in (0.1, 0.5, 1.3, 5, 9, "2.5", "x", None, True,
                                            float("nan"))],
            "collate_items": {"items": items, "pad_id": 3,
                              "result": _plain(laya.common.collate_items(items, 3))}}


def rebound_record() -> Dict[str, Any]:
    agent = laya.Agent(str(CHECKPOINTS / "tiny"), device="cpu")
    state = "Hello! " + " ".join("filler%d" % i for i in range(600)) + " Please refund me."
    original = laya.agent.build_sequence

    def keep_end(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 7:
            kwargs["truncate_left"] = True
        return original(*args, **kwargs)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = agent.predict(state, PREDICT_QUESTIONS)
        laya.agent.build_sequence = keep_end
        try:
            rebound = agent.predict(state, PREDICT_QUESTIONS)
        finally:
            laya.agent.build_sequence = original
    return {"state": state, "questions": PREDICT_QUESTIONS, "plain": plain, "rebound": rebound}


CLI_TEXT = "I was charged twice for my subscription this month, please refund me."


def cli_record(tmp: Path) -> List[Dict[str, Any]]:
    import laya.cli
    from tests.hub_cache import bundle_cache

    bundle_cache(HUB)
    questions = tmp / "questions.json"
    questions.write_text(json.dumps({"state_key": "ticket", "questions": PREDICT_QUESTIONS}))
    batch = tmp / "batch.txt"
    batch.write_text("Guten Morgen, die Rechnung bitte.\n\n" + CLI_TEXT + "\n")
    cases = [[CLI_TEXT, "--predict"], [CLI_TEXT, "--predict", "--json"],
             [CLI_TEXT, "--preset", "triage"], [CLI_TEXT, "--questions", str(questions)],
             [CLI_TEXT, "--questions", str(questions), "--min-confidence", "0.9"],
             [CLI_TEXT, "--predict", "--model", "ml", "--max-len", "64"],
             ["--batch", str(batch), "--predict", "--json"], ["--batch", str(batch)],
             ["--batch", str(batch), "--preset", "guard"],
             [CLI_TEXT, "--min-confidence", "0.5"], [CLI_TEXT, "--predict", "--explain"]]
    out = []
    for i, argv in enumerate(cases):
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                code = laya.cli.main(list(argv))
            except SystemExit as e:
                code = e.code
        text = [a.replace(str(tmp), "<tmp>") for a in argv]
        out.append({"id": "cli_%02d" % i, "argv": text, "code": code,
                    "stdout": stdout.getvalue(), "stderr": stderr.getvalue()})
    return out


def main() -> int:
    modules = sorted(m.name for m in pkgutil.walk_packages(laya.__path__, "laya."))
    record: Dict[str, Any] = {"laya_version": laya.__version__, "modules": modules,
                              "tokenizers": {}, "common": {}}
    for name in NAMES:
        record["tokenizers"][name] = tokenizer_record(CHECKPOINTS / name)
        record["common"][name] = common_record(CHECKPOINTS / name)
    record["rebound"] = rebound_record()
    with tempfile.TemporaryDirectory() as tmp:
        record["cli"] = cli_record(Path(tmp))
    OUT.write_text(json.dumps(record, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print("wrote %s: %d modules, %d cli cases" % (OUT.relative_to(ROOT), len(modules),
                                                 len(record["cli"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
