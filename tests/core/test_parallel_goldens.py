"""Parity with Laya 0.4.15 on checkpoints in its parallel option layout (issue 26):
`tests/goldens/parallel.json`, recorded by `tools/goldens_parallel.py` on
`tests/goldens/checkpoints/parallel-tiny` (initialised and fine-tuned by `laya.train` with
`option_layout="parallel"`) and on checkpoints kime's writer makes with
`write_checkpoint(..., option_layout="parallel")`.

- The layout: every row kime builds (`engine.rows_for`) has Laya's ids, markers, position ids and
  option ids, token for token, cut rows and multi-question requests included; the same rows
  give `kime.layout.parallel_layout` Laya's ids from the head alone; a request Laya refuses is
  refused with Laya's message.
- The answers: every case on the compiled FP32 backend and on the NumPy reference
  (`KIME_CPU_BACKEND=reference`), keys, order and types exact, numbers within `LAYA.rounded`,
  the same refusals; raw option logits and act probabilities within `FP32.logits` /
  `FP32.probs`; INT8 and BF16 (where the CPU has AVX512_BF16) within `INT8.probs` /
  `BF16.probs`.
- `OptionStabilityHook` (`kime.laya.stability`) on the parallel checkpoint, its reliability dicts
  as Laya's.
- The writer: the parallel keyword changes only `rl_agent_config.json`, by one key.
"""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, List

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import kime
import kime.laya.hooks as kime_hooks
from kime.checkpoint import load_checkpoint
from kime.layout import parallel_layout
from kime.request import Request
from kime.synthetic import OPTION_LAYOUTS, write_checkpoint

from ..laya.stability_cases import run_case as run_stability_case
from ..laya_replay import assert_same
from ..paths import GOLDENS
from ..tolerances import BF16, FP32, INT8, LAYA

CHECKPOINT = GOLDENS / "checkpoints" / "parallel-tiny"


def _decode(obj: Dict[str, Any]) -> Any:
    # A dict with non-string keys (int question ids, int labels) is recorded as its items.
    if set(obj) == {"__items__"}:
        return dict(obj["__items__"])
    return obj


DATA = json.loads((GOLDENS / "parallel.json").read_text(encoding="utf-8"), object_hook=_decode)
CASES = DATA["cases"]
GOOD = [c for c in CASES if c["error"] is None]
LAYOUTS = DATA["layouts"]
STABILITY = DATA["stability"]
ROW_CASES = [c for c in GOOD if c["call"] != "predict_long"]


def _unprefixed(message: str) -> str:
    return message.split(": ", 1)[1] if message.startswith(("laya: ", "kime: ")) else message


def _load(path: Path, precision: str = "f32", backend: str = "compiled") -> kime.Agent:
    old = os.environ.get("KIME_CPU_BACKEND")
    os.environ["KIME_CPU_BACKEND"] = backend
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return kime.load(str(path), device="cpu", threads=1, precision=precision)
    finally:
        if old is None:
            del os.environ["KIME_CPU_BACKEND"]
        else:
            os.environ["KIME_CPU_BACKEND"] = old


@pytest.fixture(scope="module")
def paths(tmp_path_factory) -> Dict[str, Path]:
    """Each recorded checkpoint: the committed one, and the writer's, written as recorded."""
    out = {"parallel-tiny": CHECKPOINT}
    root = tmp_path_factory.mktemp("parallel")
    for name, spec in DATA["checkpoints"].items():
        if spec.get("writer") == "kime.synthetic.write_checkpoint":
            out[name] = write_checkpoint(root / name, spec["shape"], seed=spec["seed"],
                                         odd_temperatures=spec["odd_temperatures"],
                                         option_layout=spec["option_layout"])
    return out


class Agents:
    """Agents opened on first use and closed with the module."""

    def __init__(self, paths: Dict[str, Path]):
        self.paths = paths
        self.open: Dict[Any, kime.Agent] = {}

    def get(self, name: str, precision: str = "f32", backend: str = "compiled") -> kime.Agent:
        key = (name, precision, backend)
        if key not in self.open:
            self.open[key] = _load(self.paths[name], precision, backend)
        return self.open[key]

    def close(self) -> None:
        for agent in self.open.values():
            agent.close()


@pytest.fixture(scope="module")
def agents(paths) -> Iterator[Agents]:
    a = Agents(paths)
    yield a
    a.close()


def _call(agent: kime.Agent, case: Dict[str, Any]) -> Any:
    args = dict(case["args"])
    if case["call"] == "predict_batch":
        return agent.predict_batch(args.pop("states"), args.pop("questions"), **args)
    return getattr(agent, case["call"])(args.pop("state"), args.pop("questions"), **args)


def _rows(agent: kime.Agent, case: Dict[str, Any]) -> List[Any]:
    args = case["args"]
    states = args["states"] if case["call"] == "predict_batch" else [args["state"]]
    rows = []
    for state in states:
        rows.extend(agent.engine.rows_for(Request(
            state=state, questions=args["questions"], max_len=args.get("max_len"),
            head_max_len=args.get("head_max_len"))))
    return rows


def assert_answers(ours: Any, theirs: Any, tol: float, path: str, compare_choice: bool) -> None:
    """Keys in order, types exact, floats within `tol`, other values equal. A `choice` that
    differs is accepted only where Laya's own probabilities tie it with Laya's choice (identical
    option spans get identical logits in this layout), or not compared (`compare_choice`)."""
    if isinstance(theirs, dict):
        assert isinstance(ours, dict), "%s: %r is not a dict" % (path, ours)
        assert list(ours) == list(theirs), "%s keys: %r != %r" % (path, list(ours), list(theirs))
        for key in theirs:
            if key == "choice" and ours[key] != theirs[key]:
                assert type(ours[key]) is type(theirs[key]), path
                probs = theirs.get("probabilities")
                assert not compare_choice or (
                    isinstance(probs, dict) and ours[key] in probs
                    and probs[ours[key]] >= max(probs.values()) - LAYA.rounded.atol), \
                    "%s/choice: %r != %r (Laya)" % (path, ours[key], theirs[key])
                continue
            assert_answers(ours[key], theirs[key], tol, "%s/%s" % (path, key), compare_choice)
    elif isinstance(theirs, list):
        assert isinstance(ours, list) and len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_answers(a, b, tol, "%s[%d]" % (path, i), compare_choice)
    elif isinstance(theirs, float):
        assert type(ours) is float, "%s: %r is not a float" % (path, ours)
        assert abs(ours - theirs) <= tol, "%s: %r != %r (Laya)" % (path, ours, theirs)
    else:
        assert type(ours) is type(theirs) and ours == theirs, "%s: %r != %r" % (path, ours, theirs)


# ------------------------------------------------------------------------------------ the goldens


def test_the_goldens_cover_the_issue():
    """A trained parallel checkpoint with a local layer whose window is shorter than its rows,
    answers away from uniform, and every kind of call the issue lists, refusals included."""
    cfg = json.loads((CHECKPOINT / "rl_agent_config.json").read_text(encoding="utf-8"))
    assert cfg["option_layout"] == "parallel" and cfg["fine_tuned"] is True
    ck = load_checkpoint(str(CHECKPOINT))
    assert ck.config.parallel
    kinds = [layer.attention.half_window for layer in ck.graph.layers]
    assert None in kinds and any(k is not None for k in kinds)
    half = min(k for k in kinds if k is not None)
    lengths = [len(r["ids"]) for c in GOOD for r in c["rows"] if c["checkpoint"] == "parallel-tiny"]
    assert np.median(lengths) > 2 * half
    assert all(spec["parallel_options"] for spec in DATA["checkpoints"].values())
    assert {c["call"] for c in GOOD} == {"predict", "predict_batch", "predict_long"}
    assert {c["checkpoint"] for c in GOOD} == set(DATA["checkpoints"])
    assert sum(1 for c in CASES if c["error"]) >= 5
    spread = [max(r["logits"]) - min(r["logits"]) for c in GOOD for r in c["rows"]
              if c["checkpoint"] == "parallel-tiny" and len(r["logits"]) > 1]
    assert np.mean(spread) > 0.2
    assert any(x["error"] for x in LAYOUTS) and any(x["rows"] for x in LAYOUTS)
    assert {x["result"]["answers"]["intent"]["reliability"]["option_layout"]
            for x in STABILITY if x["id"].endswith(("_defaults", "_parallel"))} \
        == {"sequential", "parallel"}


def test_layas_answers_permute_with_the_options():
    """What the layout is for, in Laya's own numbers: one question in four option orders gets
    the same probability per label (to float32 rounding)."""
    case = next(c for c in GOOD if c["id"] == "option_order_choice")
    answers = list(case["result"]["answers"].values())
    for other in answers[1:]:
        for label, p in answers[0]["probabilities"].items():
            assert abs(other["probabilities"][label] - p) <= LAYA.rounded.atol


# ------------------------------------------------------------------------------------ layout


def _head_len(row: Dict[str, Any]) -> int:
    """The head's length from a whole row: the closing [SEP] is the first shared token after the
    first marker (no head token after the instruction's [SEP] is shared but that one)."""
    opt = row["option_ids"]
    return next(i for i in range(row["markers"][0], len(opt)) if opt[i] == 0) + 1


@pytest.mark.parametrize("spec", LAYOUTS, ids=[x["id"] for x in LAYOUTS])
def test_layout_rows_are_layas(agents, spec):
    """kime's rows for a request: Laya's ids, markers, position ids and option ids exactly."""
    agent = agents.get("parallel-tiny")
    req = Request(state=spec["state"], questions=spec["questions"], max_len=spec.get("max_len"),
                  head_max_len=spec.get("head_max_len"))
    if spec["error"]:
        kind = {"ValueError": ValueError, "TypeError": TypeError}[spec["error"]["type"]]
        with pytest.raises(kind) as info:
            agent.engine.rows_for(req)
        assert spec["error"]["message"] in str(info.value)
        return
    rows = agent.engine.rows_for(req)
    got = [{"ids": r.ids, "markers": r.markers, "position_ids": r.positions,
            "option_ids": r.option_ids} for r in rows]
    want = [{k: w[k] for k in ("ids", "markers", "position_ids", "option_ids")}
            for w in spec["rows"]]
    assert got == want


def _whole_rows() -> List[Dict[str, Any]]:
    """Recorded rows that hold their whole head (every marker and the closing [SEP])."""
    out = []
    for c in GOOD:
        out.extend(r for r in c["rows"] if r["markers"] and 0 in r["option_ids"][r["markers"][0]:])
    for x in LAYOUTS:
        out.extend(r for r in x["rows"] or () if 0 in r["option_ids"][r["markers"][0]:])
    return out


def test_parallel_layout_from_the_head_alone():
    """`kime.layout.parallel_layout` on a row's markers and head length gives Laya's ids."""
    rows = _whole_rows()
    assert len(rows) > 100
    for row in rows:
        positions, option_ids = parallel_layout(row["markers"], _head_len(row), len(row["ids"]))
        assert (positions, option_ids) == (row["position_ids"], row["option_ids"])


@pytest.mark.parametrize("case", ROW_CASES, ids=[c["id"] for c in ROW_CASES])
def test_case_rows_are_layas(agents, case):
    """The rows of every recorded call (not predict_long's windows): Laya's layout, and the raw
    logits and act probabilities of an FP32 forward within FP32.logits / FP32.probs."""
    agent = agents.get(case["checkpoint"])
    rows = _rows(agent, case)
    got = [(r.ids, r.markers, r.positions, r.option_ids) for r in rows]
    assert got == [(w["ids"], w["markers"], w["position_ids"], w["option_ids"])
                   for w in case["rows"]]
    if not rows:
        return
    outputs = agent.engine.run_rows(rows, [w["qtype"] for w in case["rows"]], cache=False)
    for (logits, act), want in zip(outputs, case["rows"]):
        np.testing.assert_allclose(logits, want["logits"], **FP32.logits.kw)
        np.testing.assert_allclose(act, want["act"], **FP32.probs.kw)


# ------------------------------------------------------------------------------------ answers


def _replay(agent: kime.Agent, case: Dict[str, Any], tol: float, compare_choice: bool,
            compare_warnings: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case["error"]:
            kind = {"ValueError": ValueError, "TypeError": TypeError}[case["error"]["type"]]
            with pytest.raises(kind) as info:
                _call(agent, case)
            assert str(info.value).endswith(case["error"]["message"]), str(info.value)
            return
        ours = _call(agent, case)
    assert_answers(ours, case["result"], tol, case["id"], compare_choice)
    if compare_warnings:
        shown = [_unprefixed(str(w.message)) for w in caught
                 if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
        assert shown == [_unprefixed(m) for m in case["warnings"]]


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_fp32(agents, case):
    """The compiled FP32 backend answers as Laya does, and refuses what Laya refuses."""
    _replay(agents.get(case["checkpoint"]), case, LAYA.rounded.atol, True, True)


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_case_reference(agents, case):
    """The NumPy reference answers as Laya does."""
    _replay(agents.get(case["checkpoint"], backend="reference"), case, LAYA.rounded.atol,
            True, False)


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_reduced_precision_stays_near_laya(agents, precision):
    """INT8 and BF16 stay within their probability bounds of Laya (choices not compared: a
    reduced precision may flip a close argmax)."""
    if precision == "bf16":
        from kime._cpu.backend import check_bf16

        try:
            check_bf16()
        except kime.Unsupported as e:
            pytest.skip(str(e))
    tol = {"int8": INT8.probs, "bf16": BF16.probs}[precision].atol
    for case in GOOD:
        _replay(agents.get(case["checkpoint"], precision), case, tol, False, False)


# ------------------------------------------------------------------------------------ stability


def _collapsed(result: Any) -> List[Any]:
    """Questions whose options were all cut to the same tokens: in this layout every slot is
    then the same input, so the probabilities tie exactly and Laya's choice (and every choice its
    probes report) is float32 noise."""
    if not isinstance(result, dict):
        return []
    options = result.get("usage", {}).get("options", {})
    return [qid for qid, o in options.items() if o["distinct"] == 1 and o["total"] > 1]


def _without_choices(answer: Dict[str, Any]) -> Dict[str, Any]:
    rel = answer.get("reliability") or {}
    return {"probabilities": answer["probabilities"],
            "reliability": {k: rel.get(k) for k in ("probes", "option_layout", "n_variants")}}


@pytest.mark.parametrize("case", STABILITY, ids=[c["id"] for c in STABILITY])
def test_option_stability_hook(agents, case):
    """`OptionStabilityHook` on the parallel checkpoint: Laya's reliability dicts and refusals.
    Laya's hook takes the layout from `agent.config`, which neither Laya's agent nor kime's has,
    so on the checkpoint alone it probes as on a sequential one; the cases that set
    `agent.config` run rename-only. A question whose options all collapsed is compared without
    its choices (`_collapsed`)."""
    agent = agents.get("parallel-tiny")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if case["error"]:
            kind = {"ValueError": ValueError, "TypeError": TypeError}[case["error"]["type"]]
            with pytest.raises(kind) as info:
                run_stability_case(kime_hooks, case, {"parallel-tiny": agent}, lambda h: None)
            assert str(info.value).endswith(case["error"]["message"]), str(info.value)
        else:
            ours = run_stability_case(kime_hooks, case, {"parallel-tiny": agent}, lambda h: None)
            want = case["result"]
            for qid in _collapsed(want):
                probs = want["answers"][qid]["probabilities"]
                assert max(probs.values()) - min(probs.values()) <= LAYA.rounded.atol
                assert_same(_without_choices(ours["answers"].pop(qid)),
                            _without_choices(want["answers"][qid]), case["id"])
                want = dict(want, answers={k: v for k, v in want["answers"].items() if k != qid})
            assert_same(ours, want, case["id"])
    shown = [_unprefixed(str(w.message)) for w in caught
             if not issubclass(w.category, (DeprecationWarning, FutureWarning))]
    assert shown == [_unprefixed(m) for m in case["warnings"]]


# ------------------------------------------------------------------------------------ the writer


def test_the_writer_names_only_a_parallel_layout(tmp_path):
    """`option_layout="parallel"` adds one key to `rl_agent_config.json` and changes no other
    byte; the default writes the committed sequential checkpoint's config unchanged."""
    seq = write_checkpoint(tmp_path / "seq", "multilingual-tiny", seed=0, odd_temperatures=True)
    par = write_checkpoint(tmp_path / "par", "multilingual-tiny", seed=0, odd_temperatures=True,
                           option_layout="parallel")
    committed = GOLDENS / "checkpoints" / "multilingual-tiny"
    assert (seq / "rl_agent_config.json").read_bytes() == \
        (committed / "rl_agent_config.json").read_bytes()
    for part in ("model.safetensors", "encoder/config.json", "tokenizer/tokenizer.json"):
        assert (seq / part).read_bytes() == (par / part).read_bytes(), part
    a = json.loads((seq / "rl_agent_config.json").read_text(encoding="utf-8"))
    b = json.loads((par / "rl_agent_config.json").read_text(encoding="utf-8"))
    assert "option_layout" not in a and b.pop("option_layout") == "parallel" and a == b
    assert load_checkpoint(str(par)).config.parallel
    assert not load_checkpoint(str(seq)).config.parallel


@given(st.one_of(st.text(max_size=12), st.none(), st.integers(), st.lists(st.text(max_size=3))))
def test_the_writer_refuses_an_unknown_layout(layout):
    """Anything but Laya's two names is refused before a file is written, naming the field."""
    if layout in OPTION_LAYOUTS:
        return
    with pytest.raises(ValueError, match="option_layout"):
        write_checkpoint("/nonexistent/never-written", "tiny", option_layout=layout)
