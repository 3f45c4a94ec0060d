"""`kime decide --shortlist-k K` and `--tournament-group G`: one state's choices narrowed by
Laya's shortlist (the checkpoint's own encoder as the embedder) or its tournament, printing what
`predict_shortlist` / `predict_tournament` return on the same checkpoint, and their refusals
(the flags' combinations, and Laya's messages for a bad K or G) as one line and exit 2."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest

import kime
from kime import cli
from kime.laya import shortlist

from ..hub_cache import bundle_cache
from ..paths import MULTILINGUAL_TINY, ROOT, TINY

STATE = "My card payment went through twice, please refund one of them."
QUESTIONS = {
    "intent": {"type": "choice", "instructions": "Which intent?",
               "criteria": {"intent %02d" % i: "the customer wants thing %d" % i
                            for i in range(40)}},
    "angry": {"type": "noul", "instructions": "The customer is angry."},
}


@pytest.fixture(scope="module")
def agent() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(str(TINY), device="cpu", threads=1)


@pytest.fixture
def questions_file(tmp_path: Path) -> str:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return str(path)


def run(capsys: Any, *argv: str) -> tuple:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the tiny checkpoint's temperatures
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's own refusals
            code = e.code
    out, err = capsys.readouterr()
    return code, out, err


def decide(questions_file: str, *extra: str) -> List[str]:
    return ["decide", "--model", str(TINY), "--device", "cpu", "--threads", "1",
            "-q", questions_file, "--state", STATE, "--compact", *extra]


def as_printed(result: Dict[str, Any]) -> Any:
    return json.loads(json.dumps(result, ensure_ascii=False))


def test_tournament_group_prints_predict_tournament(capsys, questions_file, agent):
    code, out, err = run(capsys, *decide(questions_file, "--tournament-group", "8"))
    assert code == 0, err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = shortlist.predict_tournament(agent, STATE, QUESTIONS, 8)
    assert json.loads(out) == as_printed(want)
    assert json.loads(out)["tournament"]["intent"]["rounds"] == 1


def test_shortlist_k_prints_predict_shortlist_on_the_encoder(capsys, questions_file, agent):
    code, out, err = run(capsys, *decide(questions_file, "--shortlist-k", "6",
                                         "--min-confidence", "0.8"))
    assert code == 0, err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = shortlist.predict_shortlist(agent, STATE, QUESTIONS,
                                           shortlist.embed_fn_from_agent(agent), 6,
                                           min_confidence=0.8)
    got = json.loads(out)
    assert got == as_printed(want)
    meta = got["shortlist"]["intent"]
    assert (meta["k"], meta["n"], meta["passthrough"], len(meta["labels"])) == (6, 40, False, 6)
    assert list(got["answers"]["intent"]["probabilities"]) == meta["labels"]


@pytest.mark.parametrize("flags, message", [
    (["--shortlist-k", "0"], "k must be a positive integer, got 0"),
    (["--tournament-group", "1"], "group_size must be an integer of at least 2, got 1"),
    (["--shortlist-k", "3", "--tournament-group", "4"], "narrow a choice two ways: give one"),
    (["--tournament-group", "4", "--batch", "-"], "--tournament-group answers one state"),
    (["--shortlist-k", "3", "--model", "auto"], "--shortlist-k embeds with the checkpoint's"),
])
def test_refusals_are_one_line_exit_2(capsys, questions_file, flags, message):
    argv = decide(questions_file, *flags)
    if "--batch" in flags:
        argv.remove("--state")
        argv.remove(STATE)
    code, out, err = run(capsys, *argv)
    assert (code, out) == (2, "")
    assert err.startswith("kime: error: ") and message in err and err.count("\n") == 1


def test_a_flag_that_is_not_a_number_is_argparse_s_refusal(capsys, questions_file):
    code, _, err = run(capsys, *decide(questions_file, "--tournament-group", "many"))
    assert code == 2 and "--tournament-group: invalid int value: 'many'" in err


def test_tournament_on_model_auto_routes_first(tmp_path, questions_file):
    """`--model auto --tournament-group`: every call of the tournament goes through the Router,
    so the result is routed (`routing`) and carries the tournament, as the Router's own
    `predict_tournament` does on the same checkpoints."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIME_", "LAYA_"))}
    env.update(HF_HUB_CACHE=str(bundle_cache(tmp_path / "hub")), HF_HUB_OFFLINE="1",
               PYTHONWARNINGS="ignore")
    argv = decide(questions_file, "--tournament-group", "16")
    argv[argv.index(str(TINY))] = "auto"
    proc = subprocess.run([sys.executable, "-m", "kime.cli"] + argv, text=True,
                          capture_output=True, env=env, cwd=str(ROOT), timeout=120)
    assert proc.returncode == 0, proc.stderr
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        router = kime.Router(models={"english": str(TINY), "multilingual": str(MULTILINGUAL_TINY),
                                     "typed-decisions": str(TINY)},
                             device="cpu", agent_kwargs={"threads": 1})
        want = as_printed(shortlist.predict_tournament(router, STATE, QUESTIONS, 16))
    got = json.loads(proc.stdout)
    assert got["routing"]["model"] == want["routing"]["model"] == "english"
    assert got["tournament"] == want["tournament"]
    assert got["answers"] == want["answers"]
