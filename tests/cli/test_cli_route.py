"""`kime route` (Laya's default command) and `kime decide`'s routing flags and `--batch` JSONL.

`kime route` is compared with `laya TEXT ...` as recorded in `tests/goldens/serve.json`: the same
stdout, the exit code, and Laya's error text. `kime decide --model auto` runs against a real
Hugging Face cache (offline) that holds the bundle repo, made of the test checkpoints.
"""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kime
from kime import cli
from kime.cli.batch_lines import answer_lines
from kime.laya.router import Router

from .. import paths
from ..hub_cache import bundle_cache
from ..paths import GOLDENS, ROOT

TINY = str(paths.TINY)
ML = str(paths.MULTILINGUAL_TINY)
SERVE = json.loads((GOLDENS / "serve.json").read_text(encoding="utf-8"))
QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": {"refund": "money back", "information": "an answer"}},
    "angry": {"type": "noul", "instructions": "The customer is angry."},
}
ENGLISH = "I was charged twice for my subscription this month, please refund the payment."
GERMAN = "Guten Morgen! Die Lieferung ist leider beschädigt angekommen, bitte erstatten Sie das."
JAPANESE = "こんにちは。注文した商品がまだ届いていません。確認していただけますか。"


def run(capsys, *argv: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the tiny checkpoint's temperatures
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's own refusals
            code = e.code
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("case", SERVE["cli"], ids=[c["id"] for c in SERVE["cli"]])
def test_route_is_laya_default_command(capsys, case):
    code, out, err = run(capsys, "route", *case["argv"])
    assert (code, out) == (case["code"], case["stdout"])
    if case["code"]:
        # Laya's text, after its program's prefix (`laya: ` or argparse's `laya: error: `)
        reason = case["stderr"].strip().splitlines()[-1]
        reason = reason.split("error: ", 1)[1] if "error: " in reason else reason[len("laya: "):]
        assert reason in err


@pytest.fixture(scope="module")
def questions_file(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("q") / "questions.json"
    path.write_text(json.dumps(QUESTIONS))
    return str(path)


@pytest.fixture(scope="module")
def tiny_agent():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(TINY, device="cpu", threads=1)


def test_decide_batch_one_model(capsys, tmp_path, questions_file, tiny_agent):
    """JSONL in, JSONL out in input order; a bad line prints its error and the run goes on."""
    lines = [json.dumps({"state": ENGLISH}), "", "not json",
             json.dumps({"state": GERMAN, "lang": "de", "max_len": 64}),
             json.dumps({"state": "x", "questions": {"a": {"type": "bogus"}}}),
             json.dumps({"state": "y", "bogus": 1}), json.dumps(["a list"]),
             json.dumps({"state": "z", "task": "typed-decisions"}),
             json.dumps({"state": {"subject": "hi"}, "questions": {"n": QUESTIONS["angry"]}})]
    batch = tmp_path / "requests.jsonl"
    batch.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, out, err = run(capsys, "decide", "-m", TINY, "--device", "cpu", "--threads", "1",
                         "-q", questions_file, "--batch", str(batch), "--batch-size", "3",
                         "--min-confidence", "0.5")
    assert code == 2
    assert err.strip() == "kime: error: 5 request(s) failed, on line(s) 3, 5, 6, 7, 8"
    got = [json.loads(line) for line in out.splitlines()]
    assert len(got) == 8  # one per non-blank line
    assert got[0] == tiny_agent.predict(ENGLISH, QUESTIONS, min_confidence=0.5)
    assert got[2] == tiny_agent.predict(GERMAN, QUESTIONS, lang="de", max_len=64,
                                        min_confidence=0.5)
    assert got[7] == tiny_agent.predict({"subject": "hi"}, {"n": QUESTIONS["angry"]},
                                        min_confidence=0.5)
    errors = {g["line"]: g["error"] for g in got if "line" in g}
    assert sorted(errors) == [3, 5, 6, 7, 8]
    assert errors[3]["message"].startswith("not a JSON object")
    with pytest.raises(kime.InvalidRequest) as bad:
        tiny_agent.predict("x", {"a": {"type": "bogus"}})
    assert errors[5]["problems"] == json.loads(json.dumps(bad.value.problems))
    assert errors[6]["problems"][0]["loc"] == ["bogus"]
    assert errors[8]["message"] == "task chooses a checkpoint: run with --model auto"


def _kime(args: List[str], cache: Path, stdin: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KIME_", "LAYA_"))}
    env.update(HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, "-m", "kime.cli"] + args, input=stdin, text=True,
                          capture_output=True, env=env, cwd=str(ROOT), timeout=120)


@pytest.fixture(scope="module")
def local_router():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Router(models={"english": TINY, "multilingual": ML, "typed-decisions": TINY},
                      device="cpu", agent_kwargs={"threads": 1})


def _predict(router: Router, state: Any, **kw: Any) -> Dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the tiny checkpoints' temperatures
        return router.predict(state, QUESTIONS, **kw)


def _same_answer(got: Dict[str, Any], want: Dict[str, Any]) -> None:
    """The same result, apart from where the checkpoint was read (cache vs directory)."""
    assert got["answers"] == want["answers"] and got["usage"] == want["usage"]
    routing = dict(got["routing"], repo=None)
    assert routing == dict(want["routing"], repo=None)


@pytest.mark.slow  # kime decide subprocesses over a Router of three checkpoints
def test_decide_model_auto_routes(tmp_path, questions_file, local_router):
    """`--model auto` runs Laya's Router over Laya's checkpoints (here from the cache), with the
    routing flags; one state, and a JSONL batch read from stdin."""
    cache = bundle_cache(tmp_path / "hub")
    base = ["decide", "--model", "auto", "--device", "cpu", "--threads", "1",
            "-q", questions_file, "--compact"]
    proc = _kime(base + ["--state", ENGLISH, "--lang", "de", "--min-confidence", "0.9"], cache)
    assert proc.returncode == 0, proc.stderr
    _same_answer(json.loads(proc.stdout),
                 _predict(local_router, ENGLISH, lang="de", min_confidence=0.9))
    lines = [{"state": ENGLISH}, {"state": GERMAN}, {"state": JAPANESE},
             {"state": ENGLISH, "task": "typed-decisions"}, {"state": GERMAN, "model": "en"},
             {"state": ENGLISH, "lang_guess": "de"}, {"state": ENGLISH, "task": "nope"},
             {"state": "12345"}]
    proc = _kime(base + ["--batch", "-", "--batch-size", "4"], cache,
                 stdin="".join(json.dumps(line) + "\n" for line in lines))
    assert proc.returncode == 2, proc.stderr
    got = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [g.get("routing", {}).get("model") for g in got] == [
        "english", "multilingual", "multilingual", "typed-decisions", "english", "multilingual",
        None, "multilingual"]
    for line, result in zip(lines, got):
        if "routing" in result:
            line = dict(line)
            _same_answer(result, _predict(local_router, line.pop("state"), **line))
    assert got[6] == {"line": 7, "error": {
        "type": "InvalidRequest", "message": got[6]["error"]["message"],
        "problems": got[6]["error"]["problems"]}}
    assert got[6]["error"]["message"].startswith("unknown model 'nope'; choose one of")
    assert "--task choose among checkpoints" in _kime(
        ["decide", "-m", TINY, "-q", questions_file, "--state", "x", "--task", "typed"],
        cache).stderr


def test_decide_flag_refusals(capsys, questions_file):
    code, _, err = run(capsys, "decide", "-m", TINY, "-q", questions_file, "--state", "x",
                       "--min-confidence", "1.5")
    assert code == 2 and "min_confidence must be a float in [0.0, 1.0], got 1.5" in err
    code, _, err = run(capsys, "decide", "-m", TINY, "--state", "x")
    assert code == 2 and "--questions is required" in err
    code, _, err = run(capsys, "decide", "-m", TINY, "-q", questions_file, "--batch", "-",
                       "--state", "x")
    assert code == 2 and "--batch reads its states from its lines" in err
    code, _, err = run(capsys, "decide", "-m", TINY, "-q", questions_file, "--batch",
                       "/no/such/file.jsonl")
    assert code == 2 and "cannot read --batch /no/such/file.jsonl" in err


LINES = st.one_of(
    st.text(max_size=30),
    st.builds(lambda s: json.dumps({"state": s}), st.text(max_size=20)),
    st.builds(lambda s, q: json.dumps({"state": s, "questions": q}), st.text(max_size=10),
              st.dictionaries(st.text(max_size=3), st.none() | st.integers(), max_size=2)),
    st.builds(json.dumps, st.one_of(st.integers(), st.lists(st.integers(), max_size=2),
                                    st.dictionaries(st.text(max_size=4), st.integers(),
                                                    max_size=2))))


@pytest.mark.slow  # 60 hypothesis examples, each a batch run
@settings(max_examples=60, deadline=None)
@given(st.lists(LINES, max_size=8), st.integers(min_value=1, max_value=4))
def test_batch_lines_never_stop_and_keep_order(tiny_agent, lines, batch_size):
    """Whatever the lines hold, every non-blank one gets exactly one output line, in order, and
    a failure names its own line."""
    lines = [line.replace("\n", " ").replace("\r", " ") for line in lines]
    out = io.StringIO()
    failed = answer_lines([line + "\n" for line in lines], tiny_agent, QUESTIONS, {},
                          batch_size, None, out)
    written = [json.loads(line) for line in out.getvalue().split("\n")[:-1]]
    numbers = [n for n, line in enumerate(lines, 1) if line.strip()]
    assert len(written) == len(numbers)
    assert failed == [n for n, w in zip(numbers, written) if "line" in w]
    for n, w in zip(numbers, written):
        if "line" in w:
            assert w["line"] == n and w["error"]["message"]
        else:
            state = json.loads(lines[n - 1])
            assert w == tiny_agent.predict(state["state"], state.get("questions", QUESTIONS))
