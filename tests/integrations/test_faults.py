"""Where laya 0.4.15's integrations fail open, kime's fail closed
(`tests/goldens/integrations_faults.json`, recorded by `tools/goldens_faults.py`).

Every guard (LangChain, agno, CrewAI) and every picker (the LangChain router, the agno and
CrewAI routers, LlamaIndex's selector, the tool selector) is asked of a real stub server on
loopback that answers `{}`, no answers, a `noul` without its number or with NaN, an answer of
another type, or a pick outside the candidates. The golden holds what laya does (mostly: lets
the input through, or picks a member it was not offered); each case here shows what kime does
instead: refuses the reply as malformed, blocks the input as the guard's own violation, or, for
the tool selector with a fallback tool, routes the unreadable reply there. The CrewAI cases run
in CrewAI's own venv (`test_crewai.py` calls `check` for them).
"""
from __future__ import annotations

import json
import os
import warnings
from typing import Any, Dict, Iterator

import pytest

from ..paths import GOLDENS
from . import faults_cases as fc

GOLDEN = json.loads((GOLDENS / "integrations_faults.json").read_text(encoding="utf-8"))
CASES = {case["id"]: case for case in GOLDEN["cases"]}
NEEDS = {"langchain": "langchain_core", "agno": "agno", "llamaindex": "llama_index.core"}
"""The framework each module imports (the tool selector needs none)."""


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    server = fc.StubServer()
    yield server.url
    server.stop()


def check(case: Dict[str, Any], url: str) -> None:
    """laya's recorded fault, and kime's outcome for the same reply."""
    theirs = case["outcome"]
    if "laya_fault" in case:  # laya passed, picked, or crashed with a raw error
        assert "result" in theirs or "RuntimeError" not in theirs["error"]["mro"], theirs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours = fc.run_case("kime", case, url)
    if case["kime"] == "fallback":
        assert ours == {"result": {"tool_name": "human", "is_fallback": True,
                                   "probabilities": {}}}, ours
        return
    error = ours.get("error")
    assert error is not None, "kime let %s through: %r" % (case["id"], ours)
    if case["kime"] == "violation":
        assert error["type"].endswith("GuardrailError") or error["type"] == "LayaTaskGuardError"
        assert "ValueError" in error["mro"] and "injection" in error["message"], error
        return
    assert "RuntimeError" in error["mro"], error
    words = ("Malformed probability in decision answer from Laya: "  # the selector's own
             if case["framework"] == "tools" else
             "Malformed decision response from Laya server at <stub>/%s: " % case["body"])
    assert error["message"].startswith(words), error
    if "laya_fault" not in case:  # laya fails closed here too: kime's words are laya's
        assert error["message"] == theirs["error"]["message"]


def test_the_golden_covers_every_guard_and_picker() -> None:
    assert GOLDEN["laya_version"] == "0.4.15"
    assert {c["cls"] for c in CASES.values()} == set(fc.GUARDS.values()) | set(
        fc.PICKERS.values())
    guards = [c for c in CASES.values() if c["cls"] in fc.GUARDS.values()]
    for body in ("empty", "no-answers", "noul-missing", "noul-nan"):
        assert {c["framework"] for c in guards if c["body"] == body} == set(fc.GUARDS)
    assert sum("laya_fault" in c for c in CASES.values()) >= 30


@pytest.mark.parametrize("cid", sorted(c for c in CASES if CASES[c]["framework"] != "crewai"))
def test_kime_blocks_or_refuses_what_laya_lets_through(cid: str, stub: str) -> None:
    case = CASES[cid]
    if case["framework"] in NEEDS:
        pytest.importorskip(NEEDS[case["framework"]])
    os.environ.setdefault("AGNO_TELEMETRY", "false")
    check(case, stub)
