"""Embedding rows as the checkpoint's tokenizer makes them (issue 37), against Laya 0.4.15 on three
tokenizer templates (`tests/embed_templates.py`): ModernBERT's `[CLS] $A [SEP]` (`default`, the
committed `tiny`), one that adds nothing (`bare`: `$A`) and one that adds other tokens (`bos-eos`:
`<bos> $A <eos>`, tokens the decision layout never uses).

- The rows: transformers' own `tok(text, truncation=True, max_length=m)` for `m` from 1 up,
  and the rows Laya's embedder ran its encoder on, id for id (`Tokenizer.encode_framed`).
- The vectors: `embed_fn_from_agent` within `FP32.embeddings` of Laya's scale, empty texts,
  cut texts and `max_length` 1, 2 and 3 included. Where Laya raises (a chunk holding only texts
  without a token, on `bare`: torch cannot reshape an empty batch) kime gives those texts the
  zero vector, the masked mean Laya gives the same text beside a non-empty one, and each other
  text the vector Laya gives it alone.
- The shortlists over those vectors: `predict_shortlist` and `shortlist_choice` with the
  checkpoint's encoder, the result (the shortlist, and the final predict's `usage`, exactly),
  the texts embedded, the predict calls and the refusals, as `tests/laya/test_shortlist.py`.
"""
from __future__ import annotations

import copy
import warnings
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest

import kime
from kime.laya import shortlist
from kime.laya.embedding import embed_fn_from_agent
from kime.testing import TOKENIZER_TEMPLATES

from .. import shortlist_fixtures as fx
from ..embed_templates import DATA, template_paths
from ..laya_replay import assert_same, encode
from ..tolerances import FP32
EMBEDDINGS = DATA["embeddings"]
SHORTLISTS = DATA["shortlists"]
ERRORS = {"ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError}


@pytest.fixture(scope="module")
def agents(tmp_path_factory) -> Iterator[Dict[str, Any]]:
    paths = template_paths(tmp_path_factory.mktemp("templates"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = {name: kime.load(str(path), device="cpu", threads=1)
                for name, path in paths.items()}
    yield made
    for agent in made.values():
        agent.close()


def _strings(texts: List[Any]) -> List[str]:
    return ["" if t is None else str(t) for t in texts]


def test_goldens_cover_the_brief():
    assert set(DATA["checkpoints"]) == set(TOKENIZER_TEMPLATES)
    assert {c["frame_tokens"] for c in DATA["checkpoints"].values()} == {0, 2}
    cases = {c["id"].split("_", 1)[1] for c in EMBEDDINGS}
    assert {"max_length_1", "max_length_2", "max_length_3", "one_empty", "cut_at_16"} <= cases
    cut = [c for c in EMBEDDINGS if c["kwargs"].get("max_length", 512) < 512]
    assert any(len(r) == c["kwargs"]["max_length"] for c in cut for r in c["rows"])
    assert any(len(r) > c["kwargs"]["max_length"] for c in cut for r in c["rows"])  # below
    assert any(r == [] for c in EMBEDDINGS for r in c["rows"])
    assert {c["checkpoint"] for c in SHORTLISTS} == set(TOKENIZER_TEMPLATES)
    assert sum(c["error"] is not None for c in SHORTLISTS) >= 6


@pytest.mark.parametrize("name", sorted(DATA["truncation"]))
def test_rows_are_cut_as_transformers_cuts(agents, name):
    tok = agents[name].engine.layouter.tok
    assert tok.frame_tokens == DATA["checkpoints"][name]["frame_tokens"]
    for rec in DATA["truncation"][name]:
        assert tok.encode_framed([rec["text"]], rec["max_length"]) == [rec["ids"]], rec


@pytest.mark.parametrize("case", EMBEDDINGS, ids=[c["id"] for c in EMBEDDINGS])
def test_rows_are_the_embedders_rows(agents, case):
    tok = agents[case["checkpoint"]].engine.layouter.tok
    got = tok.encode_framed(_strings(case["texts"]), case["kwargs"].get("max_length", 512))
    # Laya tokenizes chunk by chunk: where a chunk raised, the chunks after it never ran.
    assert got[:len(case["rows"])] == case["rows"]
    assert len(case["rows"]) == len(got) or case["error"] is not None


@pytest.mark.parametrize("case", EMBEDDINGS, ids=[c["id"] for c in EMBEDDINGS])
def test_embeddings_equal_laya(agents, case):
    got = embed_fn_from_agent(agents[case["checkpoint"]], **case["kwargs"])(case["texts"])
    assert got.dtype == np.float32 and got.shape == (len(case["texts"]), case["hidden"])
    if case["error"] is None:
        want = np.asarray(case["vectors"], dtype=np.float64).reshape(case["shape"])
    else:
        assert case["error"][0] == "RuntimeError" and "reshape" in case["error"][1]
        want = np.asarray([np.zeros(case["hidden"]) if v is None else v
                           for v in case["alone"]]).reshape(got.shape)
    scale = np.abs(want).max(initial=1.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=FP32.embeddings.atol * scale)
    for i, text in enumerate(_strings(case["texts"])):
        if case["checkpoint"] == "bare" and text == "":
            assert not got[i].any()  # no token: the mean over nothing


@pytest.mark.parametrize("case", SHORTLISTS, ids=[c["id"] for c in SHORTLISTS])
def test_shortlists_equal_laya(agents, case):
    agent = agents[case["checkpoint"]]
    target = fx.Counted(agent) if case["on"] == "agent" else None
    embedder = fx.Recording(shortlist.embed_fn_from_agent(agent))
    args = copy.deepcopy(case["args"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case["error"]:
            with pytest.raises(ERRORS[case["error"]["type"]]) as info:
                _call(case, target, embedder, args)
            assert str(info.value) == case["error"]["message"]
        else:
            result = encode(_call(case, target, embedder, args))
            assert_same(result, case["result"])
            if case["call"] == "predict_shortlist":
                for got, want in zip(result["shortlist"].values(),
                                     case["result"]["shortlist"].values()):
                    assert _exact(got) == _exact(want)  # cosines: within assert_same's bound
                assert result["usage"] == case["result"]["usage"]
            else:
                assert result[0] == case["result"][0]
    assert [str(w.message) for w in caught] == case["warnings"]
    assert embedder.calls == case["embedded"]
    assert (target.calls if target is not None else 0) == case["calls"]


def _exact(entry: Dict[str, Any]) -> Dict[str, Any]:
    return {k: v for k, v in entry.items() if k != "scores"}


def _call(case: Dict[str, Any], target: Any, embedder: Any, args: Dict[str, Any]) -> Any:
    if case["call"] == "shortlist_choice":
        return shortlist.shortlist_choice(args.pop("state"), args.pop("criteria"), embedder,
                                          **args)
    return shortlist.predict_shortlist(target, args.pop("state"), args.pop("questions"),
                                       embedder, **args)
