"""The INT8 gate: the comparison arithmetic on controlled answers, the request files, the API
end to end on the golden tiny checkpoint, and `kime gate` on the command line."""
from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pytest

import kime
from kime import cli
from kime.precision_gate import TIE_MARGIN, builtin_requests, compare, gate, load_requests

from ..paths import TINY


@pytest.fixture(scope="module")
def f32_run():
    """FP32 answers to a small built-in set, the base every controlled comparison perturbs."""
    reqs = builtin_requests(12, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with kime.Kime(str(TINY), device="cpu", precision="f32", threads=1, answer_cache=0) as eng:
            return reqs, eng.decide_batch(reqs, cache=False)


def _flip(answer) -> None:
    """Make the answer's argmax another option: swap its top two probabilities."""
    p = answer.probabilities.copy()
    order = np.argsort(p)[::-1]
    p[order[0]], p[order[1]] = p[order[1]], p[order[0]]
    answer.probabilities = p


def test_builtin_set_is_varied_and_valid(engine):
    reqs = builtin_requests(40)
    assert len(reqs) == 40 and builtin_requests(40) == reqs  # deterministic
    kinds = {type(r["state"]).__name__ for r in reqs}
    assert kinds == {"str", "dict", "list"}
    sizes = {len(q.get("criteria") or ()) for r in reqs for q in r["questions"].values()}
    assert min(sizes) <= 2 and max(sizes) >= 10
    state_tokens = [r.usage.state_tokens for r in engine.decide_batch(reqs, cache=False)]
    assert min(state_tokens) <= 5 and max(state_tokens) >= 200


def test_compare_counts_exactly_the_flips(f32_run):
    reqs, a = f32_run
    b = copy.deepcopy(a)
    flipped = [(0, "choice"), (3, "score"), (7, "noul"), (8, "noul")]
    for i, qid in flipped:
        _flip(b[i].answers[qid])
    out = compare(reqs, a, b)
    by_type = out["by_type"]
    assert {t: s.questions for t, s in by_type.items()} == {t: len(reqs) for t in by_type}
    assert {t: s.questions - s.agree for t, s in by_type.items()} == {
        "choice": 1, "score": 1, "noul": 2}
    assert sorted((d.request, d.question) for d in out["disagreements"]) == sorted(flipped)
    # The largest difference is a flipped answer's top-two gap; unflipped answers add nothing.
    gaps = {}
    for i, qid in flipped:
        p = np.sort(a[i].answers[qid].probabilities.astype(np.float64))[::-1]
        gaps.setdefault(a[i].answers[qid].type, []).append(p[0] - p[1])
    for t, g in gaps.items():
        assert by_type[t].max_prob_diff == pytest.approx(max(g), abs=1e-7)
        assert by_type[t].sum_prob_diff == pytest.approx(2 * sum(g), abs=1e-6)
        assert by_type[t].near_ties == sum(x < TIE_MARGIN for x in g)


def test_compare_accuracy_and_ece_against_a_direct_computation(f32_run):
    reqs, a = f32_run
    reqs = copy.deepcopy(reqs)
    b = copy.deepcopy(a)
    _flip(b[1].answers["choice"])
    rng = np.random.default_rng(0)
    want = {"f32": [], "int8": []}
    for i, req in enumerate(reqs):
        labels = {}
        for qid, ans in a[i].answers.items():
            k = ans.k
            pick = int(rng.integers(k))
            if ans.type == "choice":
                labels[qid] = ans.question.labels_out()[pick]
            elif ans.type == "score":
                labels[qid] = pick
            else:
                labels[qid] = bool(pick)
            for name, resp in (("f32", a[i]), ("int8", b[i])):
                p = resp.answers[qid].probabilities
                want[name].append((float(p.max()), int(p.argmax()) == pick))
        req["labels"] = labels
    cal = compare(reqs, a, b)["calibration"]
    assert cal.labelled == 3 * len(reqs)
    for name, pairs in want.items():
        conf = np.array([c for c, _ in pairs])
        ok = np.array([r for _, r in pairs], dtype=float)
        assert cal.accuracy[name] == pytest.approx(ok.mean())
        ece = 0.0
        for lo in np.arange(10) / 10:
            sel = (conf >= lo) & (conf < lo + 0.1) if lo < 0.9 else conf >= lo
            if sel.any():
                ece += abs(ok[sel].mean() - conf[sel].mean()) * sel.sum() / conf.size
        assert cal.ece[name] == pytest.approx(ece, abs=1e-9)


def test_a_label_that_names_no_option_is_refused(f32_run):
    reqs, a = f32_run
    reqs = copy.deepcopy(reqs)
    reqs[2]["labels"] = {"choice": "no-such-option", "score": 99, "noul": "maybe",
                         "ghost": True}
    with pytest.raises(kime.InvalidRequest) as e:
        compare(reqs, a, a)
    msgs = [p["msg"] for p in e.value.problems]
    assert len(msgs) == 4 and all(m.startswith("request 2") for m in msgs)
    assert "'no-such-option' is not one of its option keys" in msgs[0]
    assert "99 is not a level index" in msgs[1] and "'ghost'" in msgs[3]
    assert [p["loc"] for p in e.value.problems][1] == ["requests", 2, "labels", "score"]


def test_request_files(tmp_path):
    reqs = builtin_requests(3)
    as_list = tmp_path / "list.json"
    as_list.write_text(json.dumps(reqs))
    as_lines = tmp_path / "lines.jsonl"
    as_lines.write_text("\n".join(json.dumps(r) for r in reqs) + "\n\n")
    assert load_requests(str(as_list)) == reqs == load_requests(str(as_lines))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"state": "x"}, reqs[0], {"state": "y", "questions": {},
                                                         "labels": ["a"]}]))
    with pytest.raises(kime.BadOption) as e:
        load_requests(str(bad))
    message = str(e.value)
    assert "request 0" in message and "request 2" in message and "request 1" not in message
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(reqs[0]) + "\n{not json\n")
    with pytest.raises(kime.BadOption, match="line 2"):
        load_requests(str(broken))
    with pytest.raises(kime.BadOption, match="cannot read"):
        load_requests(str(tmp_path / "missing.json"))


@pytest.mark.slow  # 30 requests at FP32 and INT8, packing INT8 first
def test_gate_end_to_end_on_the_golden_tiny_checkpoint(monkeypatch, tmp_path):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        report = gate(str(TINY), builtin_requests(30), threads=1, threshold=1.0)
    assert report.requests == 30 and report.questions == 90
    assert all(s.questions == 30 for s in report.by_type.values())
    assert "INT8" in report.devices["int8"] and "FP32" in report.devices["f32"]
    # INT8 really ran: the probabilities moved, by a little.
    assert 0 < report.mean_prob_diff <= report.max_prob_diff < 0.5
    flips = sum(s.questions - s.agree for s in report.by_type.values())
    assert len(report.disagreements) == flips
    assert report.passed == (flips == 0)  # threshold 1.0: any flip fails
    text = report.format()
    assert ("PASS" if report.passed else "FAIL") in text and "choice" in text
    as_dict = report.to_dict()
    assert json.loads(json.dumps(as_dict))["questions"] == 90


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_gate_refuses_bad_arguments():
    with pytest.raises(kime.BadOption, match="threshold"):
        gate(str(TINY), [], threshold=1.5)
    with pytest.raises(kime.BadOption, match="at least one request"):
        gate(str(TINY), [])
    with pytest.raises(kime.InvalidRequest) as e:
        gate(str(TINY), [{"state": "x", "questions": {"a": {"type": "choice"}}}])
    assert "'a'" in str(e.value)


def test_cli_gate(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        code = cli.main(["gate", str(TINY), "--limit", "8", "--threads", "1", "--json"])
    out, err = capsys.readouterr()
    report = json.loads(out)
    assert report["questions"] == 24 and code == (0 if report["passed"] else cli.EXIT_GATE)
    assert report["source"] == "built-in"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        code = cli.main(["gate", str(TINY), "--limit", "4", "--threshold", "1e-9"])
    out, err = capsys.readouterr()
    assert code == 0 and "PASS" in out and "running 4 requests in int8" in err
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    code = cli.main(["gate", str(TINY), "--requests", str(bad)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_USAGE and err.count("\n") == 1 and "request 1" in err
