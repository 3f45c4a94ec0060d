"""One limit, one place (issue 53): every size limit of Laya's surfaces has one home,
`kime.laya.limits`, and every rule a question or a budget follows one home in `kime.request` /
`kime.render`; each surface (the Python API, `kime serve`, `kime mcp`) asks them. Where laya's
own surfaces differ, the test that pins the difference says why.

Before, `MAX_SCORE_LEVELS` was 32 in the server's checks and 10 in the planner under one name,
`MAX_STATE_CHARS` was defined by the server and the MCP each, and the noul-labels and
`option_order` rules were written out again in the MCP's validation."""
from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest
from fastapi import HTTPException
from hypothesis import given
from hypothesis import strategies as st

import kime
from kime.laya import limits
from kime.laya.schemas import MAX_SCORE_LEVELS, SchemaError, plan_from_json_schema
from kime.mcp.validate import ToolError, validate_budget, validate_questions, validate_state
from kime.render import is_option_order, noul_labels_problem
from kime.request import budget_problems, check_question
from kime.serve.limits import check_sizes

KIME = Path(kime.__file__).resolve().parent
NOT_SURFACE_LIMITS = {
    "MAX_POSITIONS": "the model's default positions (kime.graph), not a limit on input",
    "MAX_BATCH_TOKENS": "a server setting's default (laya serve's forward-pass size), a knob",
    "LAYA_MAX_CONCURRENT": "what laya serve reads an unreadable LAYA_MAX_CONCURRENT as",
    "MAX_PER_THREAD": "a CUDA kernel's register tile (kernels.cu)",
    "MAX_HEAD_DIM": "a CUDA kernel's largest head (kernels.cu)",
    "ACT_MAX": "a CUDA kernel's act head width (kernels.cu)",
    "TEMP_MAX": "Laya's temperature clamp (kime.calibration), not a size",
    "SIGN_OFF_MAX": "laya.email's heuristics (data), not a size limit on input",
    "FOOTER_MAX": "laya.email's heuristics (data), not a size limit on input",
    "MAX_DEPTH": "how deep language detection reads a state for evidence, not a refusal",
}


def _numbers(node: ast.AST) -> bool:
    return all(isinstance(n, (ast.Constant, ast.BinOp, ast.operator)) for n in ast.walk(node)
               if not isinstance(n, (ast.Load, ast.operator))) and any(
        isinstance(n, ast.Constant) and isinstance(n.value, (int, float))
        for n in ast.walk(node))


def test_every_limit_is_defined_in_one_module():
    """A module-level `MAX_*` (or `*_MAX`) name given a number is a limit, and limits live in
    `kime.laya.limits`; a module that keeps a name at laya's import path takes its value from
    there (`MAX_SCORE_LEVELS = limits.SCHEMA_SCORE_LEVELS`)."""
    found: List[str] = []
    for path in sorted(KIME.rglob("*.py")):
        if path == KIME / "laya" / "limits.py":
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, ast.AnnAssign) and node.value else [])
            value = getattr(node, "value", None)
            for target in targets:
                name = getattr(target, "id", "")
                if "MAX" in name.split("_") and value is not None and _numbers(value) \
                        and name.lstrip("_") not in NOT_SURFACE_LIMITS:
                    found.append("%s: %s" % (path.relative_to(KIME.parent), name))
    assert not found, "limits defined outside kime/laya/limits.py: %s" % found


def test_laya_import_paths_keep_laya_names_and_values():
    # laya.structured's planner bounds an integer range at 10 levels; laya serve bounds a body's
    # score question at 32. Both are laya's, and they bound different things (a plan made from
    # a schema, a question a client wrote), so both stay, under names that say which.
    assert (MAX_SCORE_LEVELS, limits.SCHEMA_SCORE_LEVELS, limits.BODY_SCORE_LEVELS) == (10, 10, 32)
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0,
                                                     "maximum": limits.SCHEMA_SCORE_LEVELS}}}
    with pytest.raises(SchemaError, match="11 levels exceeds MAX_SCORE_LEVELS=10"):
        plan_from_json_schema(schema)
    levels = ["level %d" % i for i in range(limits.BODY_SCORE_LEVELS)]
    check_sizes(["s"], {"q": {"type": "score", "criteria": levels}})
    with pytest.raises(HTTPException, match="too many score levels for 'q' \\(33 > 32\\)"):
        check_sizes(["s"], {"q": {"type": "score", "criteria": levels + ["one more"]}})


@pytest.fixture(scope="module")
def engine(tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.Kime(str(tiny_path), device="cpu", threads=1)


def test_the_python_api_has_no_size_limits_where_the_wire_does(engine):
    """laya's Agent bounds no state and no score scale: a 50,001-character state and a score of
    33 levels are answered in Python, refused over HTTP and (the state) by the MCP tools, which
    take input from a network and a language model."""
    state = "x" * (limits.STATE_CHARS + 1)
    levels = ["level %d" % i for i in range(limits.BODY_SCORE_LEVELS + 1)]
    questions = {"q": {"type": "score", "instructions": "Rate it.", "criteria": levels}}
    answer = engine.decide({"state": state, "questions": questions, "max_len": 1024,
                            "head_max_len": 512})
    assert answer["q"].k == len(levels)
    with pytest.raises(HTTPException, match="state too large"):
        check_sizes([state], {})
    wrapped = {"text": state[:-len('{"text": ""}')]}  # as JSON, one character too many
    assert limits.state_chars(wrapped) == limits.STATE_CHARS + 1
    with pytest.raises(ToolError, match="state too large"):
        validate_state(wrapped)


def test_head_max_len_below_one_is_answered_in_python_and_refused_over_the_wire(engine):
    """laya's Agent answers `head_max_len` 0 or below (tests/goldens/limits.json); laya serve
    and laya's tools refuse it: their callers cannot mean one. One rule, with the wire's
    stricter reading named (`budget_problems(..., wire=True)`)."""
    assert engine.decide({"state": "s", "questions": {"q": {"type": "noul", "instructions": "?"}},
                          "head_max_len": 0})["q"].k == 2
    assert budget_problems("head_max_len", 0, ["head_max_len"], wire=True)
    with pytest.raises(ToolError, match="head_max_len must be a positive integer, got 0"):
        validate_budget(0, "head_max_len")


LABELS = st.one_of(
    st.none(), st.text(max_size=3), st.lists(st.text(max_size=3), max_size=2),
    st.dictionaries(st.sampled_from(["false", "true", "False", "yes"]),
                    st.one_of(st.text(max_size=4), st.integers(), st.none(), st.booleans()),
                    max_size=3))
ORDERS = st.one_of(st.none(), st.integers(), st.text(max_size=2),
                   st.lists(st.one_of(st.integers(-1, 4), st.booleans(), st.floats(0, 3),
                                      st.text(max_size=1)), max_size=5))


def _mcp_accepts(question: Dict[str, Any]) -> bool:
    try:
        validate_questions({"q": question})
    except ToolError:
        return False
    return True


def _agent_problems(question: Dict[str, Any], field: str) -> List[Any]:
    return [p for p in check_question("q", question) if p["loc"][-1] == field]


@given(labels=LABELS)
def test_the_agent_and_the_mcp_ask_one_labels_rule(labels: Any) -> None:
    question = {"type": "noul", "instructions": "It holds.", "labels": labels}
    valid = noul_labels_problem(labels) is None
    assert _mcp_accepts(question) == valid
    assert (not _agent_problems(question, "labels")) == valid


@given(order=ORDERS, n=st.integers(1, 4))
def test_the_agent_and_the_mcp_ask_one_option_order_rule(order: Any, n: int) -> None:
    question = {"type": "choice", "instructions": "Pick.",
                "criteria": {"l%d" % i: "" for i in range(n)}, "option_order": order}
    valid = is_option_order(order, n)
    assert _mcp_accepts(question) == valid
    assert (not _agent_problems(question, "option_order")) == valid
