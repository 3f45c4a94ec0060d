"""`laya`, laya's command line on kime (`kime.cli.laya`, the shim's `laya` script), answering
as laya 0.4.15 does over an offline Hub cache of the test checkpoints
(`tests/goldens/ecosystem.json`'s `cli`; the routing cases are `serve.json`'s, in
`tests/cli/test_cli_route.py`'s way)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import textwrap

import pytest

from kime.cli.laya import main

from ..hub_cache import bundle_cache
from ..paths import GOLDENS, ROOT

ECOSYSTEM = json.loads((GOLDENS / "ecosystem.json").read_text(encoding="utf-8"))
SERVE = json.loads((GOLDENS / "serve.json").read_text(encoding="utf-8"))
PREDICT_QUESTIONS = ECOSYSTEM["rebound"]["questions"]
CLI_TEXT = "I was charged twice for my subscription this month, please refund me."


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("case", SERVE["cli"], ids=[c["id"] for c in SERVE["cli"]])
def test_laya_routes_a_text_as_laya(case):
    assert _run(case["argv"]) == (case["code"], case["stdout"], case["stderr"])


def test_laya_train_and_eval_are_refused_naming_laya():
    for argv, script in ((["train", "--epochs", "1"], "laya-train"), (["eval"], "laya-evals")):
        code, out, err = _run(argv)
        assert code == 2 and not out
        assert script in err and "pip install laya==0.4.15" in err


@pytest.mark.slow
def test_laya_answers_as_laya(tmp_path):
    """Every answering case, in one interpreter over the offline bundle cache."""
    cache = bundle_cache(tmp_path / "hub")
    (tmp_path / "questions.json").write_text(json.dumps({"state_key": "ticket",
                                                         "questions": PREDICT_QUESTIONS}))
    (tmp_path / "batch.txt").write_text("Guten Morgen, die Rechnung bitte.\n\n" + CLI_TEXT
                                        + "\n")
    cases = [[a.replace("<tmp>", str(tmp_path)) for a in c["argv"]] for c in ECOSYSTEM["cli"]]
    script = textwrap.dedent("""
        import contextlib, io, json, sys, warnings
        warnings.simplefilter("ignore")
        from kime.cli.laya import main
        out = []
        for argv in json.loads(sys.argv[1]):
            o, e = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
                try:
                    code = main(argv)
                except SystemExit as x:
                    code = x.code
            out.append([code, o.getvalue(), e.getvalue()])
        print(json.dumps(out))
    """)
    env = dict(os.environ, PYTHONPATH=str(ROOT), HF_HUB_CACHE=str(cache), HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", script, json.dumps(cases)], capture_output=True,
                          text=True, env=env, timeout=240)
    assert done.returncode == 0, done.stderr
    for case, (code, out, err) in zip(ECOSYSTEM["cli"], json.loads(done.stdout)):
        assert (code, out) == (case["code"], case["stdout"]), case["argv"]
        # kime names every problem at once where laya stops at the first: laya's is among them
        said = case["stderr"].strip().removeprefix("laya: ")
        assert said in err.replace(str(tmp_path), "<tmp>"), case["argv"]
        assert bool(err) == bool(case["stderr"])
