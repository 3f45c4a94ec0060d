"""Record Laya 0.4.15 at the model's limits (issue 53): `tests/goldens/limits.json`. Run ONLY
with the oracle interpreter (the real laya and torch):

    .oracle/bin/python tools/goldens_limits.py

What laya does with a token budget past the model's positions, around them and out of range:

- on `tiny` (the committed checkpoint, ModernBERT's 8192 positions), `max_len` 8193 and 12000
  over a state of 18,000 tokens (issue 53's reproduction): laya answers, because transformers'
  ModernBERT computes RoPE's angles for any position (`ModernBertRotaryEmbedding.forward`), so
  nothing bounds a row but memory and time;
- on `tiny-positions-64`, `tiny` with `max_position_embeddings` 64 in `encoder/config.json`
  (written into a temporary directory; the `checkpoints` entry says how, and the tests make the
  same copy): rows around and far past its 64 positions and its `max_len` of 160, in strings,
  conversations and batches, with `head_max_len` from below zero to past the positions -- rows
  of a few hundred tokens, so kime's tests replay them in milliseconds;
- `max_len` and `head_max_len` values laya refuses, or answers, that are not positive integers
  (0, negative, bool, float, str), and budgets too small for the options.

`limits.json` (UTF-8, indent 1): versions, `checkpoints` (name -> `path` under tests/goldens
or `copy_of` and the `encoder_config` keys changed, and the load warnings) and `cases` in
`cases.json`'s format (`tools/make_goldens.py`: `id`, `checkpoint`, `about`, `call`, `args`,
`result`, `error`, `warnings`, `rows`).
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import tokenizers  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402

import laya  # noqa: E402
import make_goldens as mg  # noqa: E402

GOLDENS = ROOT / "tests" / "goldens"
OUT = GOLDENS / "limits.json"
SHORT = "tiny-positions-64"
SHORT_CONFIG = {"max_position_embeddings": 64}
"""The copy's change to `encoder/config.json`: 64 positions, under its `max_len` of 160."""

CHARGED = "I was charged twice " * 3000
"""Issue 53's state: 18,001 tokens on `tiny`."""
TEAM = {"team": {"type": "choice", "instructions": "Which team?",
                 "criteria": ["billing", "tech", "sales"]}}
LONG = " ".join([mg.LONG_TEXT] * 6)
"""About 1,200 tokens on `tiny`: longer than every budget below but the largest."""
SHORT_QUESTIONS = {"intent": mg.INTENT3, "urgency": mg.URGENCY5, "angry": mg.ANGRY}


def cases() -> List[Dict[str, Any]]:
    T, S = "tiny", SHORT
    c, P, B = mg.case, "predict", "predict_batch"
    out = [
        c("past_positions_8193", T, "max_len one past ModernBERT's 8192 positions", P,
          state=CHARGED, questions=TEAM, max_len=8193),
        c("past_positions_12000", T, "issue 53: max_len 12000 over an 18,001-token state", P,
          state=CHARGED, questions=TEAM, max_len=12000),
    ]
    for max_len in (63, 64, 65, 160, 161, 400, 1000):
        out.append(c("positions_max_len_%d" % max_len, S, "a row of %d tokens on 64 positions"
                     % max_len, P, state=LONG, questions=SHORT_QUESTIONS, max_len=max_len))
    out += [
        c("positions_conversation", S, "a conversation past the positions keeps its end", P,
          state=mg.CONVERSATION * 4, questions=SHORT_QUESTIONS, max_len=300),
        c("positions_dict", S, "a JSON state past the positions keeps its start", P,
          state={"ticket": LONG, "meta": mg.DICT_STATE}, questions=SHORT_QUESTIONS, max_len=250),
        c("positions_batch", S, "a batch of a long and a short state past the positions", B,
          states=[LONG, "short", mg.EMAIL], questions=SHORT_QUESTIONS, max_len=300,
          head_max_len=100),
        c("positions_state_fits", S, "max_len far past a short state: the row is the state's",
          P, state=mg.EMAIL, questions=SHORT_QUESTIONS, max_len=10 ** 7),
        c("positions_empty_state", S, "an empty state past the positions", P, state="",
          questions=SHORT_QUESTIONS, max_len=500),
        c("positions_crowded", S, "crowded options with a head past the positions", P,
          state=LONG, questions={"labels": mg.CROWDED_LABELS}, max_len=400, head_max_len=300),
    ]
    for head in (0, -3, 1, 8):
        out.append(c("head_max_len_%s" % str(head).replace("-", "minus_"), S,
                     "head_max_len %d: laya crowds the options to their 4-token floor" % head,
                     P, state=LONG, questions={"labels": mg.CROWDED_LABELS, **TEAM},
                     max_len=300, head_max_len=head))
    out.append(c("head_max_len_true", S, "head_max_len True: laya reads it as 1", P,
                 state=mg.EMAIL, questions=TEAM, head_max_len=True))
    out.append(c("head_max_len_float", S, "head_max_len 2.5 without crowding: laya answers", P,
                 state=mg.EMAIL, questions=TEAM, head_max_len=2.5))
    for value, name in ((0, "0"), (-5, "minus_5"), (True, "true"), (1.5, "float"),
                        ("512", "str"), (12, "12")):
        out.append(c("error_max_len_%s" % name, S, "max_len %r" % (value,), P, state=mg.EMAIL,
                     questions=TEAM, max_len=value))
    out.append(c("error_head_max_len_float_crowded", S,
                 "head_max_len 100.5 crowds eight options to 10.0 tokens: a float slice", P,
                 state=LONG, questions={"labels": mg.CROWDED_LABELS}, head_max_len=100.5))
    return out


def main() -> int:
    checkpoints: Dict[str, Dict[str, Any]] = {}
    agents: Dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kime-limits-") as tmp:
        short = Path(tmp) / SHORT
        shutil.copytree(GOLDENS / "checkpoints" / "tiny", short)
        config = json.loads((short / "encoder" / "config.json").read_text())
        config.update(SHORT_CONFIG)
        (short / "encoder" / "config.json").write_text(json.dumps(config, indent=2) + "\n")
        for name, path, how in (("tiny", GOLDENS / "checkpoints" / "tiny",
                                 {"path": "checkpoints/tiny"}),
                                (SHORT, short, {"copy_of": "checkpoints/tiny",
                                                "encoder_config": SHORT_CONFIG})):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                agents[name] = laya.Agent(str(path), device="cpu")
            checkpoints[name] = dict(how, load_warnings=[str(w.message) for w in caught])
        done = []
        for spec in cases():
            print(spec["id"], flush=True)
            got = mg.run_case(agents[spec["checkpoint"]], spec)
            if spec["id"].startswith("error_") != (got["error"] is not None):
                raise AssertionError("case %s: error=%r" % (spec["id"], got["error"]))
            done.append(got)
    payload = mg.to_json({"laya_version": laya.__version__, "torch_version": torch.__version__,
                          "transformers_version": transformers.__version__,
                          "tokenizers_version": tokenizers.__version__,
                          "checkpoints": checkpoints, "cases": done})
    with open(OUT, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print("wrote %s: %d cases" % (OUT, len(done)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
