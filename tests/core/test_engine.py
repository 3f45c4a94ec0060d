"""The engine API (`kime.Kime`) and its agreement with the Laya API over the same engine."""
from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest

import kime
from kime.laya import wire

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "money matters", "tech": None, "sales": ""}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    7: {"type": "noul", "instructions": "Is it spam?"},
    "ordered": {"type": "choice", "instructions": "Pick", "criteria": [3, 1, 2],
                "option_order": [2, 0, 1]},
}
STATE = "My invoice is wrong and I was charged twice for the same order."


def test_decide_matches_predict_and_keeps_unrounded_values(engine, agent):
    response = engine.decide({"state": STATE, "questions": QUESTIONS})
    assert list(response.answers) == ["team", "urgency", 7, "ordered"]
    assert wire.result(response) == agent.predict(STATE, QUESTIONS)
    team = response.answers["team"]
    assert team.logits.dtype == np.float32 and team.logits.shape == (3,)
    assert abs(float(team.probabilities.sum()) - 1.0) < 1e-6
    assert 0.0 <= team.act_probability <= 1.0
    # An int label stays an int, in the answer and the probabilities.
    ordered = wire.result(response)["answers"]["ordered"]
    assert isinstance(ordered["choice"], int) and list(ordered["probabilities"]) == [3, 1, 2]


def test_request_object_and_dict_agree(engine):
    a = engine.decide(kime.Request(state=STATE * 3, questions=QUESTIONS, max_len=64))
    b = engine.decide({"state": STATE * 3, "questions": QUESTIONS, "max_len": 64})
    assert wire.result(a) == wire.result(b)
    assert a.usage.truncated and a.usage.state_tokens_dropped > 0


def test_option_order_is_undone_in_logits_and_probabilities(engine):
    """Slot s shows option order[s]; the answer is in the caller's order whatever the slots."""
    plain = {"q": {"type": "choice", "instructions": "Pick", "criteria": ["a", "b", "c"]}}
    ordered = {"q": dict(plain["q"], option_order=[2, 0, 1])}
    rows_plain = engine.rows_for({"state": STATE, "questions": plain})
    rows_ordered = engine.rows_for({"state": STATE, "questions": ordered})
    assert rows_plain[0].ids != rows_ordered[0].ids
    answer = engine.decide({"state": STATE, "questions": ordered}).answers["q"]
    slot_logits = engine.run_rows(rows_ordered, [0], cache=False)[0].logits
    # The logit in slot s belongs to option order[s].
    np.testing.assert_array_equal(answer.logits[[2, 0, 1]], slot_logits)
    assert answer.value == ["a", "b", "c"][int(np.argmax(answer.probabilities))]


def test_batch_invariance(engine):
    """A request's raw logits are the same bits alone and inside any batch."""
    rng = random.Random(3)
    states = [STATE * rng.randint(1, 6) for _ in range(7)] + [{"k": "v"}, ["turn 1", "turn 2"], ""]
    alone = [engine.decide({"state": s, "questions": QUESTIONS}, cache=False) for s in states]
    for _ in range(3):
        order = list(range(len(states)))
        rng.shuffle(order)
        together = engine.decide_batch(
            [{"state": states[i], "questions": QUESTIONS} for i in order], cache=False)
        for i, response in zip(order, together):
            for qid in QUESTIONS:
                got, want = response.answers[qid], alone[i].answers[qid]
                np.testing.assert_array_equal(got.logits, want.logits)
                assert got.act_probability == want.act_probability


def test_predict_batch_equals_predict_each_with_and_without_batch_size(agent):
    states = [STATE, {"ticket": 42, "tags": ["a", None]}, ["hi", "there"], STATE * 9, ""]
    each = [agent.predict(s, QUESTIONS) for s in states]
    assert agent.predict_batch(states, QUESTIONS) == each
    assert agent.predict_batch(states, QUESTIONS, batch_size=2) == each


def test_timed_and_async(engine):
    reqs = [{"state": STATE * n, "questions": QUESTIONS} for n in (1, 20)]
    responses, timing = engine.decide_batch_timed(reqs, cache=False)
    assert timing.batches >= 1 and timing.tokenize >= 0 and timing.device > 0
    assert timing.truncated == sum(len(r.usage.truncated_questions) for r in responses) > 0
    result = asyncio.run(engine.decide_async(reqs[0]))
    assert wire.result(result) == wire.result(responses[0])


def test_count_tokens_memory_and_facts(engine):
    req = {"state": STATE, "questions": QUESTIONS}
    rows = engine.rows_for(req)
    n_state = rows[0].state_tokens
    heads = engine.layouter.heads([kime.request.to_question(q, d) for q, d in QUESTIONS.items()],
                                  engine.checkpoint.config.head_max_len, engine.max_row_tokens)
    assert engine.count_tokens(req) == n_state + sum(len(h.ids) for h in heads)
    engine.decide(req)
    mem = engine.memory()
    # The compiled backend holds the packed blob and, after a call, at least one plan.
    assert mem.weights >= engine.checkpoint.weight_bytes() // 2 and mem.plans > 0
    assert engine.max_row_tokens == engine.checkpoint.config.max_len
    assert "cpu" in engine.device


@pytest.mark.parametrize("device", ["metal", "ane", "mps"])
def test_unsupported_devices_are_clear(tiny_path, device):
    with pytest.raises(kime.Unsupported) as info:
        kime.Kime(str(tiny_path), device=device)
    assert "device" in str(info.value)


@pytest.mark.parametrize("kw", [{"device": "tpu"}, {"precision": "f8"}, {"threads": -1}])
def test_bad_options_are_value_errors(tiny_path, kw):
    with pytest.raises(kime.BadOption):
        kime.Kime(str(tiny_path), **kw)


def test_auto_is_f32_on_the_cpu_and_f16_is_refused_there(tiny_path):
    """The CPU has no FP16 kernels: `auto` means FP32 there, and an explicit `f16` is refused
    with a message naming the precision, instead of quietly running FP32."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = kime.Kime(str(tiny_path), device="cpu", threads=1)
        f32 = kime.Kime(str(tiny_path), device="cpu", precision="f32", threads=2)
        with pytest.raises(kime.Unsupported, match="precision='f16'"):
            kime.Kime(str(tiny_path), device="cpu", precision="f16")
    assert auto.backend.precision is kime.Precision.F32
    a = auto.decide({"state": STATE, "questions": QUESTIONS})
    b = f32.decide({"state": STATE, "questions": QUESTIONS})
    for qid in QUESTIONS:
        np.testing.assert_array_equal(a.answers[qid].logits, b.answers[qid].logits)


def test_device_and_precision_parse_once_into_typed_values():
    assert kime.Device.parse("CUDA:3") == kime.Device("cuda", 3)
    assert str(kime.Device.parse(None)) == "auto" and str(kime.Device.parse("cpu")) == "cpu"
    assert kime.Precision.parse("FP32") is kime.Precision.F32
    assert kime.Precision.parse(None) is kime.Precision.AUTO
    assert kime.Precision.AUTO.on(kime.Device("cuda")) is kime.Precision.F16
    assert kime.Precision.AUTO.on(kime.Device("cpu")) is kime.Precision.F32
    with pytest.raises(kime.Unsupported, match="int8"):
        kime.Precision.INT8.on(kime.Device("cuda", 1))
    with pytest.raises(kime.BadOption):
        kime.Device.parse("cuda:x")


def test_a_closed_engine_frees_its_model_and_says_so(tiny_path):
    engine = kime.Kime(str(tiny_path), device="cpu", threads=1)
    engine.decide({"state": STATE, "questions": QUESTIONS})
    assert engine.memory().weights > 0
    engine.close()
    engine.close()  # twice is fine
    assert engine.memory() == kime.Memory(weights=0, plans=0)
    with pytest.raises(kime.BackendError, match="closed"):
        engine.decide({"state": STATE, "questions": QUESTIONS}, cache=False)


def test_checkpoint_temperatures_warn_at_load(tiny_path):
    with pytest.warns(RuntimeWarning, match=r"choice:11\+=0.1006 -> 0.5"):
        kime.load(str(tiny_path))


def test_cli_decide(tiny_path, tmp_path, capsys):
    import json
    from kime.cli import main

    qfile = tmp_path / "q.json"
    qfile.write_text(json.dumps({"urgency": QUESTIONS["urgency"]}))
    assert main(["decide", "--model", str(tiny_path), "--state", STATE, "--questions", str(qfile),
                 "--compact"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["answers"]["urgency"]["type"] == "score"
    qfile.write_text(json.dumps({"urgency": {"type": "score"}}))
    assert main(["decide", "--model", str(tiny_path), "--state", "x",
                 "--questions", str(qfile)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err and "'instructions'" in err
    assert main(["decide", "--model", str(tmp_path / "nope"), "--state", "x", "--questions",
                 str(qfile)]) == 3


def test_the_readme_checkpoint_loads_without_a_warning_and_odd_temperatures_warn(tmp_path):
    """Regression (issue 14): the README's first checkpoint warned on every newcomer's first run."""
    import warnings

    from kime.testing import write_checkpoint

    clean = write_checkpoint(tmp_path / "clean", "tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kime.Kime(str(clean), device="cpu", threads=1).close()
    odd = write_checkpoint(tmp_path / "odd", "tiny", odd_temperatures=True)
    with pytest.warns(RuntimeWarning, match=r"choice:11\+=0.1006 -> 0.5"):
        kime.Kime(str(odd), device="cpu", threads=1).close()


def test_the_temperature_warning_names_the_callers_line(tiny_path):
    """Regression (issue 14): it pointed at kime's own `return Agent(Kime(...` line."""
    with pytest.warns(RuntimeWarning, match="invalid temperatures") as record:
        kime.load(str(tiny_path), device="cpu")
    assert record[0].filename == __file__
