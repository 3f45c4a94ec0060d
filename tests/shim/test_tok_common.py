"""`Agent.tok`, `laya.common`'s helpers and a rebound `laya.agent.build_sequence` against
laya 0.4.15 and transformers' AutoTokenizer (`tests/goldens/ecosystem.json`,
`tools/goldens_ecosystem.py`)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import kime
import kime.laya.agent as agent_module
from kime.errors import InvalidArgument
from kime.laya import common

from ..paths import CHECKPOINTS, GOLDENS

ECOSYSTEM = json.loads((GOLDENS / "ecosystem.json").read_text(encoding="utf-8"))
NAMES = sorted(ECOSYSTEM["tokenizers"])
pytestmark = pytest.mark.filterwarnings("ignore:kime. this checkpoint ships invalid")


@pytest.fixture(scope="module", params=NAMES)
def named_agent(request):
    agent = kime.load(str(CHECKPOINTS / request.param), device="cpu", answer_cache=0)
    yield request.param, agent
    agent.close()


def _outcome(fn):
    try:
        value = fn()
    except Exception as e:
        return {"error": type(e).__name__}
    return {"result": value}


def test_tok_gives_transformers_ids_masks_and_special_tokens(named_agent):
    name, agent = named_agent
    tok, want = agent.tok, ECOSYSTEM["tokenizers"][name]
    for key, value in want["special"].items():
        assert getattr(tok, key) == value, key
    for key, value in want["special_ids"].items():
        assert getattr(tok, key) == value, key
    assert tok.all_special_tokens == want["all_special_tokens"]
    assert tok.all_special_ids == want["all_special_ids"]
    assert (len(tok), tok.vocab_size, tok.model_max_length) == (
        want["len"], want["vocab_size"], want["model_max_length"])
    for case in want["calls"]:
        got = _outcome(lambda: dict(tok(case["text"], **case["kwargs"])))
        assert got == {k: v for k, v in case.items() if k in ("result", "error")}, case["kwargs"]
    for case in want["encode"]:
        assert tok.encode(case["text"]) == case["ids"]
    for case in want["decode"]:
        assert tok.decode(case["ids"], skip_special_tokens=case["skip"]) == case["text"]
    for case in want["tokenize"]:
        assert tok.tokenize(case["text"]) == case["tokens"]
    pair = want["tokens_to_ids"]
    assert tok.convert_tokens_to_ids(pair["tokens"]) == pair["ids"]
    back = want["ids_to_tokens"]
    assert tok.convert_ids_to_tokens(back["ids"]) == back["tokens"]
    assert tok.convert_ids_to_tokens(back["ids"], skip_special_tokens=True) == back["skipped"]


def test_tok_numpy_tensors_and_refusals(named_agent):
    _, agent = named_agent
    tok = agent.tok
    arrays = tok(["a b", "hello there"], padding=True, return_tensors="np")
    lists = tok(["a b", "hello there"], padding=True)
    assert arrays["input_ids"].dtype == np.int64
    assert arrays["input_ids"].tolist() == lists["input_ids"]
    assert lists.input_ids == lists["input_ids"]
    for kwargs in ({"return_tensors": "pt"}, {"return_offsets_mapping": True},
                   {"text_pair": "b"}, {"padding": "sideways"}):
        with pytest.raises(InvalidArgument) as e:
            tok("a", **kwargs)
        assert next(iter(kwargs)) in str(e.value)
    with pytest.raises(InvalidArgument):
        tok(["a", 3])


def test_common_helpers_equal_laya(named_agent):
    name, agent = named_agent
    want = ECOSYSTEM["common"][name]
    questions = _QUESTIONS
    states = [c["state"] for c in want["serialize_state"]]
    for case in want["serialize_state"]:
        assert common.serialize_state(case["state"]) == case["text"]
    for case in want["sequences"]:
        q, state = questions[case["q"]], states[case["state"]]
        if case.get("option_order") == "reversed":
            order = list(range(len(common.render_options(q))))[::-1]
            got = _outcome(lambda: [list(x) if isinstance(x, tuple) else x for x in
                                    common.build_sequence(agent.tok, state, q,
                                                          option_order=order)])
        else:
            got = _outcome(lambda: list(common.build_sequence(
                agent.tok, state, q, case["max_len"], case["head_max_len"],
                truncate_left=case["truncate_left"], return_stats=True,
                return_truncation_stats=True, return_layout=True)))
        assert got == {k: case[k] for k in ("result", "error") if k in case}, case
    for case in want["heads"]:
        assert _outcome(lambda: list(common.build_head(agent.tok, questions[case["q"]], 64))) \
            == {k: case[k] for k in ("result", "error") if k in case}
    for case in want["temp_bucket"]:
        assert common.temp_bucket(case["qtype"], case["k"]) == case["bucket"]
    for case in want["clamp_temperature"]:
        got = common.clamp_temperature(case["t"])
        assert got == case["value"] or (math.isnan(case["t"]) if isinstance(case["t"], float)
                                        else False) and got == case["value"]
    collated = want["collate_items"]
    got = common.collate_items(collated["items"], collated["pad_id"])
    assert {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in got.items()} \
        == collated["result"]
    assert common.collate_items([[]], 0) is None


def test_build_sequence_takes_any_transformers_like_tokenizer(named_agent):
    """A caller's own tokenizer object (here a minimal one over Agent.tok) lays rows out as
    Agent.tok itself does: the adapter, not kime's tokenizer, is used."""
    _, agent = named_agent

    class Plain:
        def __init__(self, tok):
            self.tok = tok
            for attr in ("mask_token", "mask_token_id", "cls_token_id", "sep_token_id"):
                setattr(self, attr, getattr(tok, attr))

        def __call__(self, text, **kwargs):
            return self.tok(text, **kwargs)

    q = _QUESTIONS["crowded"]
    assert common.build_sequence(Plain(agent.tok), "a state", q, 96, 48, return_stats=True) \
        == common.build_sequence(agent.tok, "a state", q, 96, 48, return_stats=True)


def test_torch_modules_are_refused_by_name():
    for name in common.TORCH_ONLY:
        with pytest.raises(common.TorchOnly) as e:
            getattr(common, name)
        assert name in str(e.value) and "PyTorch" in str(e.value)
    with pytest.raises(AttributeError):
        common.no_such_name  # noqa: B018


def _close(got, want):
    assert got["usage"] == want["usage"]
    for qid, answer in want["answers"].items():
        for key, value in answer.items():
            if isinstance(value, dict):
                for k, v in value.items():
                    assert got["answers"][qid][key][k] == pytest.approx(v, abs=2e-4), (qid, key)
            elif isinstance(value, float):
                assert got["answers"][qid][key] == pytest.approx(value, abs=2e-4), (qid, key)
            else:
                assert got["answers"][qid][key] == value, (qid, key)


def test_a_rebound_build_sequence_lays_the_agents_rows_out_as_in_laya():
    want = ECOSYSTEM["rebound"]
    agent = kime.load(str(CHECKPOINTS / "tiny"), device="cpu", answer_cache=0)
    original = agent_module.build_sequence
    calls = []

    def keep_end(*args, **kwargs):
        calls.append(args[2]["t"])
        if len(args) < 7:
            kwargs["truncate_left"] = True
        return original(*args, **kwargs)

    try:
        assert agent.answering is agent.engine  # nothing rebound: the cached layout
        _close(agent.predict(want["state"], want["questions"]), want["plain"])
        agent_module.build_sequence = keep_end
        _close(agent.predict(want["state"], want["questions"]), want["rebound"])
        assert calls == ["choice", "noul"]
    finally:
        agent_module.build_sequence = original
    assert agent.answering is agent.engine
    _close(agent.predict(want["state"], want["questions"]), want["plain"])
    agent.close()


_QUESTIONS = {
    "intent": {"t": "choice", "ins": "What does the customer want?",
               "crit": {"refund": "money back", "information": None, "cancel": "stop it"}},
    "urgency": {"t": "score", "ins": "How urgent?", "crit": ["not", "somewhat", "very"]},
    "legal": {"t": "noul", "ins": "Is a lawyer mentioned?", "crit": {"true": "yes"},
              "labels": {"false": "no", "true": "yes"}},
    "crowded": {"t": "choice", "ins": "Pick " * 40,
                "crit": {"option number %d" % i: "a long description " * 4 for i in range(12)}},
}
"""The recorder's questions (tools/goldens_ecosystem.py's QUESTIONS), which the golden keys by
name."""
