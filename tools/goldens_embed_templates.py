"""Record Laya 0.4.15's embedder and shortlist on tokenizers whose post-processor adds other
special tokens than ModernBERT's `[CLS] $A [SEP]` (issue 37): `tests/goldens/embed_templates.json`.
Run ONLY with the oracle environment (the real laya, transformers and torch), like
`tools/make_goldens.py`:

    .oracle/bin/python tools/goldens_embed_templates.py

Laya's embedder (`laya.shortlist.embed_fn_from_agent`) tokenizes with the checkpoint's own
tokenizer, `tok(texts, padding=True, truncation=True, max_length=max_length)`, so its rows are what
`tokenizer.json`'s post-processor makes of a text. The checkpoints are the `tiny` shape (seed 0,
odd temperatures) with each of `kime.synthetic.TOKENIZER_TEMPLATES`: `default` is the committed
`tests/goldens/checkpoints/tiny` (`[CLS] $A [SEP]`); `bare` (`$A`, nothing added) and `bos-eos`
(`<bos> $A <eos>` with two tokens of their own) are written by
`kime.synthetic.write_checkpoint(..., tokenizer_template=...)` into a temporary directory, as the
test writes them again. Recorded per template:

- `checkpoints[name]`: the writer's arguments, the post-processor's token count and template.
- `truncation`: transformers' own `tok(text, truncation=True, max_length=m)["input_ids"]` for
  `m` from 1 to 6 and 12 (the cut rule, specials included, and `max_length` below their count).
- `embeddings`: `embed_fn_from_agent(agent, **kwargs)(texts)`: the vectors (float32 values) or
  the error, and `rows`, the ids of each text as the embedder's tokenizer call gave them
  (padding removed), recorded from inside that call. On `bare` an empty text has no token:
  inside a chunk with a non-empty text its vector is zero (the masked mean over nothing), and
  a chunk of empty texts alone raises torch's reshape error (recorded as laya gives it, with
  `alone`: each non-empty text's vector embedded by itself).
- `shortlists`: `predict_shortlist(agent, state, questions, embed_fn_from_agent(agent), ...)`
  and `shortlist_choice` cases, through `tools/goldens_shortlist.py`'s `run_case` (the same
  record: result, error, warnings, the texts embedded, the predict calls); each checked to have
  cosines at least 1e-4 apart around its cut, so the ranking is not embedding noise.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT))

import transformers  # noqa: E402

import laya  # noqa: E402
import laya.shortlist  # noqa: E402
import make_goldens as mg  # noqa: E402  (its import puts kime.synthetic on the path)
import goldens_embed as ge  # noqa: E402
import goldens_shortlist as gs  # noqa: E402

from kime.synthetic import TOKENIZER_TEMPLATES, write_checkpoint  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "embed_templates.json"
TINY = GOLDENS / "checkpoints" / "tiny"
WRITER = {"shape": "tiny", "seed": 0, "odd_temperatures": True}

BOUNDARY = ["refund", "refund me", "refund me now", "please refund me now",
            "please refund me now, thanks", "please refund my card payment now, thanks a lot"]
TRUNCATED = [ge.LONG, "refund me now please", "refund", ""]
EMBED_CASES: List[Dict[str, Any]] = [
    {"id": "defaults", "kwargs": {}, "texts": ge.TEXTS},
    {"id": "batch_of_two", "kwargs": {"batch_size": 2}, "texts": ge.TEXTS[:7]},
    {"id": "empty_beside_text", "kwargs": {}, "texts": ["", "refund", None, "   "]},
    {"id": "empty_alone", "kwargs": {}, "texts": ["", None]},
    {"id": "one_empty", "kwargs": {}, "texts": [""]},
    {"id": "empty_chunk", "kwargs": {"batch_size": 2}, "texts": ["refund", "x", "", None, "y"]},
    {"id": "cut_at_16", "kwargs": {"max_length": 16, "batch_size": 3},
     "texts": [ge.LONG, ge.TEXTS[0], ge.TEXTS[4], ge.TEXTS[5], ""]},
    {"id": "cut_at_5", "kwargs": {"max_length": 5}, "texts": BOUNDARY},
    {"id": "max_length_3", "kwargs": {"max_length": 3}, "texts": [ge.LONG, "refund", "", None,
                                                                  "a b"]},
    {"id": "max_length_2", "kwargs": {"max_length": 2}, "texts": [ge.LONG, "refund", "a b", ""]},
    {"id": "max_length_1", "kwargs": {"max_length": 1},
     "texts": ["refund me now", "a", ge.TEXTS[5], ""]},
    {"id": "duplicates", "kwargs": {"batch_size": 4},
     "texts": ["refund", "refund", ge.TEXTS[0], "refund", None, ""]},
    {"id": "empty_list", "kwargs": {}, "texts": []},
]


def shortlist_cases(name: str) -> List[Dict[str, Any]]:
    """The encoder-embedder cases of `goldens_shortlist.py`, on this template's agent."""
    ps, sc = "predict_shortlist", "shortlist_choice"

    def c(cid: str, call: str = ps, on: Any = "agent", **args: Any) -> Dict[str, Any]:
        return gs.case("%s_%s" % (name, cid), call, on, name, "encoder", **args)

    return [
        c("mixed", state=gs.STATE, k=3, questions={
            "intent": gs.choice(gs.described(40)), "angry": gs.NOUL, "urgency": gs.SCORE}),
        c("plain_labels", state=gs.STATE, k=5, questions={"intent": gs.choice(gs.intents(30))}),
        c("dict_state", state=gs.DICT_STATE, k=6,
          questions={"intent": gs.choice(gs.described(24)), "angry": gs.NOUL}),
        c("conversation", state=gs.CONVERSATION, k=4,
          questions={"intent": gs.choice(gs.intents(20))}),
        c("kwargs_forwarded", state=gs.STATE, k=6, max_len=96, head_max_len=48,
          questions={"intent": gs.choice(gs.intents(30)), "angry": gs.NOUL}),
        c("choice_scores", sc, None, state=gs.STATE, criteria=gs.described(16), k=8,
          instructions="What does the customer want?", return_scores=True),
        c("error_k_zero", state=gs.STATE, k=0, questions={"intent": gs.choice(gs.intents(30))}),
        c("error_bad_state", state=None, k=3, questions={"intent": gs.choice(gs.intents(30))}),
    ]


class RowLog:
    """Wraps `laya.shortlist.encode_text` to keep, per call, each text's ids with padding
    removed: the rows the embedder ran the encoder on."""

    def __init__(self) -> None:
        self.rows: List[List[int]] = []
        self._inner: Callable[..., Any] = laya.shortlist.encode_text

    def __call__(self, tok: Any, texts: Any, **kwargs: Any) -> Any:
        encoded = self._inner(tok, texts, **kwargs)
        for ids, mask in zip(encoded["input_ids"].tolist(), encoded["attention_mask"].tolist()):
            self.rows.append([i for i, m in zip(ids, mask) if m])
        return encoded


def template_of(agent: Any) -> Dict[str, Any]:
    backend = agent.tok.backend_tokenizer
    return {"frame_tokens": backend.num_special_tokens_to_add(False),
            "post_processor": repr(backend.post_processor)}


def record_embeddings(name: str, agent: Any, log: RowLog) -> List[Dict[str, Any]]:
    hidden = agent.model.encoder.config.hidden_size
    out = []
    for case in EMBED_CASES:
        del log.rows[:]
        rec: Dict[str, Any] = {**case, "id": "%s_%s" % (name, case["id"]), "checkpoint": name,
                               "hidden": hidden}
        try:
            vectors = laya.shortlist.embed_fn_from_agent(agent, **case["kwargs"])(case["texts"])
            rec.update(shape=list(vectors.shape), vectors=ge.f32(vectors), error=None)
            rec["rows"] = list(log.rows)
        except Exception as e:  # the bare template's chunk of empty texts alone
            rec["rows"] = list(log.rows)
            # What laya gives each non-empty text by itself, to replay the case against.
            alone = laya.shortlist.embed_fn_from_agent(agent, **case["kwargs"])
            rec.update(shape=None, vectors=None, error=ge.err(e), alone=[
                None if t in (None, "") else ge.f32(alone([t]))[0] for t in case["texts"]])
        out.append(rec)
    return out


def record_truncation(agent: Any) -> List[Dict[str, Any]]:
    return [{"text": text, "max_length": m,
             "ids": agent.tok(text, truncation=True, max_length=m)["input_ids"]}
            for text in TRUNCATED for m in (1, 2, 3, 4, 5, 6, 12)]


def main() -> int:
    for key in [k for k in os.environ if k.startswith("LAYA_")]:
        del os.environ[key]
    log = RowLog()
    laya.shortlist.encode_text = log  # the embedder's own tokenizer call, recorded
    data: Dict[str, Any] = {"laya_version": laya.__version__,
                            "transformers_version": transformers.__version__,
                            "checkpoints": {}, "truncation": {}, "embeddings": [],
                            "shortlists": []}
    with tempfile.TemporaryDirectory(prefix="kime-templates-") as tmp, \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        agents = {}
        for name in TOKENIZER_TEMPLATES:
            path = TINY if name == "default" else write_checkpoint(
                Path(tmp) / name, tokenizer_template=name, **WRITER)
            agents[name] = laya.Agent(str(path), device="cpu")
            data["checkpoints"][name] = dict(WRITER, tokenizer_template=name,
                                             **template_of(agents[name]))
        for name, agent in agents.items():
            data["truncation"][name] = record_truncation(agent)
            data["embeddings"] += record_embeddings(name, agent, log)
        specs = [spec for name in agents for spec in shortlist_cases(name)]
        for spec in specs:
            if "_error_" not in spec["id"]:
                gs.check_margins(spec, agents, laya.shortlist)
        for spec in specs:
            done = gs.run_case(spec, agents, None, laya.shortlist)
            done["args"] = gs.to_json(done["args"])
            data["shortlists"].append(done)
    frames = {n: c["frame_tokens"] for n, c in data["checkpoints"].items()}
    assert frames == {"default": 2, "bare": 0, "bos-eos": 2}, frames
    failed = [c["id"] for c in data["embeddings"] if c["error"] is not None]
    assert all(i.startswith("bare_") for i in failed), failed
    OUT.write_text(json.dumps(mg.to_json(data), indent=1, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    print("wrote %s: %d templates, %d embedding cases (%d raised in laya: %s), %d shortlist "
          "cases (%d refusals)" % (OUT.relative_to(ROOT), len(agents), len(data["embeddings"]),
                                   len(failed), ", ".join(failed), len(data["shortlists"]),
                                   sum(c["error"] is not None for c in data["shortlists"])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
