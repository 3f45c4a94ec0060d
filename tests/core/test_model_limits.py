"""Inputs at the model's limits, on the Python API, HTTP and MCP (issue 53), by property.

Generated: states from nothing to far past `max_len` (text, long conversations, deep and wide
JSON), every question type with option counts up to the head budget and past it, `max_len`
and `head_max_len` around the positions and past them. The checkpoint is the committed `tiny`
with 64 positions (`tests/goldens/limits.json`'s copy, whose answers there are Laya's), so a
row past the positions costs milliseconds.

Each example ends in an answer or in an error that names the field, on every surface:
- the Python API (`Agent.predict`): an answer to every question with finite probabilities
  summing to 1 and rows no longer than `max_len`, or an `InvalidRequest` whose problems are
  located at `questions.<id>`, `max_len` or `head_max_len`;
- HTTP (a real `kime serve` on loopback): the same answers, or a 4xx naming the field;
- MCP (`laya_predict` through `run_tool`, as the server runs it): the same answers, or an
  `invalid_*` code (never `internal_error`).
Nothing raises from inside, and no plan larger than the usual buckets stays in memory.
"""
from __future__ import annotations

import json
import math
import warnings
from typing import Any, Dict, Optional

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import kime
from kime.buckets import BUCKETS
from kime.laya import limits

from ..golden_cases import limits_checkpoint
from ..request_strategies import RUN, nested

WORD = st.sampled_from(["charged", "twice", "refund", "é", "order", "😞", "the", "invoice", "42"])


def _text(n: int, words: Any) -> str:
    return " ".join(words[i % len(words)] for i in range(n))


STATE = st.one_of(
    st.builds(_text, st.integers(0, 700), st.lists(WORD, min_size=1, max_size=5)),
    st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant"]),
                                    "content": st.builds(_text, st.integers(0, 30),
                                                         st.lists(WORD, min_size=1))}),
             max_size=60),
    st.integers(1, 300).map(nested),
    st.dictionaries(st.builds(lambda i: "k%d" % i, st.integers(0, 10 ** 6)),
                    st.one_of(WORD, st.integers(), st.none()), max_size=200),
)
QUESTION = st.one_of(
    st.builds(lambda k: {"type": "choice", "instructions": "Which one?",
                         "criteria": ["option number %d" % i for i in range(k)]},
              st.integers(1, 40)),
    st.builds(lambda k: {"type": "score", "instructions": "How much?",
                         "criteria": ["level %d of the scale" % i for i in range(k)]},
              st.integers(1, 40)),
    st.just({"type": "noul", "instructions": "It holds."}),
)
QUESTIONS = st.dictionaries(st.sampled_from(["a", "b", "c"]), QUESTION, min_size=1, max_size=3)
MAX_LEN = st.one_of(st.none(), st.sampled_from([1, 8, 12, 63, 64, 65, 159, 160, 161, 500]),
                    st.integers(1, 700))
HEAD_MAX_LEN = st.one_of(st.none(), st.sampled_from([-5, 0, 1, 16, 63, 64, 65, 400]),
                         st.integers(-10, 500))
FIELDS = ("questions", "max_len", "head_max_len")


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> kime.Agent:
    path = limits_checkpoint("tiny-positions-64", tmp_path_factory.mktemp("limits"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.load(str(path), device="cpu", threads=1, answer_cache=0)


def _python(agent: kime.Agent, state: Any, questions: Dict[str, Any], max_len: Optional[int],
            head_max_len: Optional[int]) -> Optional[Dict[str, Any]]:
    """Laya's API: the result, or None after checking the refusal names a field."""
    try:
        result = agent.predict(state, questions, max_len=max_len, head_max_len=head_max_len)
    except kime.InvalidRequest as e:
        assert e.problems and all(p["loc"] and p["loc"][0] in FIELDS for p in e.problems), \
            e.problems
        if e.problems[0]["loc"][0] == "questions":
            assert isinstance(e, kime.TooLong) and "option markers fit" in str(e)
        return None
    assert list(result["answers"]) == list(questions)
    for answer in result["answers"].values():
        # a noul answers one probability; the others a distribution over their options
        probs = ([answer["noul"], 1 - answer["noul"]] if answer["type"] == "noul"
                 else list(answer["probabilities"].values()))
        assert all(math.isfinite(p) and 0 <= p <= 1 for p in probs)
        assert abs(sum(probs) - 1) <= 5e-5 * len(probs) + 1e-6
    rows = agent.engine.rows_for({"state": state, "questions": questions, "max_len": max_len,
                                  "head_max_len": head_max_len})
    width = agent.engine.max_row_tokens if max_len is None else max_len
    assert all(len(r.ids) <= width for r in rows)
    assert result["usage"]["input_tokens"] == sum(len(r.ids) for r in rows)
    return result


def _no_plan_kept_past_the_buckets(agent: kime.Agent) -> None:
    assert set(agent.engine.backend.plans) <= set(BUCKETS)


@RUN
@given(state=STATE, questions=QUESTIONS, max_len=MAX_LEN, head_max_len=HEAD_MAX_LEN)
def test_the_python_api_answers_or_names_the_field(agent, state, questions, max_len,
                                                   head_max_len):
    _python(agent, state, questions, max_len, head_max_len)
    _no_plan_kept_past_the_buckets(agent)


@pytest.fixture(scope="module")
def server(agent):
    pytest.importorskip("fastapi")
    from ..serve.loopback import LoopbackServer

    srv = LoopbackServer(agent.engine)
    yield srv
    srv.stop()


def _same_answers(ours: Dict[str, Any], theirs: Dict[str, Any]) -> None:
    """The same answers, leaving out the server's Jev additions (`x_*` keys, serving.md)."""
    def laya(answers: Dict[str, Any]) -> Any:
        return json.loads(json.dumps({qid: {k: v for k, v in a.items() if not k.startswith("x_")}
                                      for qid, a in answers.items()}))
    assert laya(ours["answers"]) == laya(theirs["answers"])


def _wire_refuses(questions: Dict[str, Any], head_max_len: Optional[int]) -> bool:
    """Where laya serve refuses what laya's Agent answers (tests/project/test_limits.py says
    why): a `head_max_len` below one, a score past `BODY_SCORE_LEVELS`."""
    return (head_max_len is not None and head_max_len < 1) or any(
        q["type"] == "score" and len(q["criteria"]) > limits.BODY_SCORE_LEVELS
        for q in questions.values())


@pytest.mark.slow  # a real server; a few hundred HTTP requests
@settings(RUN, max_examples=max(25, RUN.max_examples // 2))
@given(state=STATE, questions=QUESTIONS, max_len=MAX_LEN, head_max_len=HEAD_MAX_LEN)
def test_http_answers_as_python_or_names_the_field(agent, server, state, questions, max_len,
                                                   head_max_len):
    body = {"state": state, "questions": questions, "max_len": max_len,
            "head_max_len": head_max_len}
    status, reply = server.post("/v1/systemone", json.dumps(body).encode())
    wire_refused = _wire_refuses(questions, head_max_len)
    if status == 200:
        assert not wire_refused
        want = _python(agent, state, questions, max_len, head_max_len)
        assert want is not None
        _same_answers(reply, want)
    else:
        assert 400 <= status < 500 and status != 404, (status, reply)
        text = json.dumps(reply)
        assert any(name in text for name in FIELDS + tuple(repr(q) for q in questions)), reply
        if not wire_refused:
            assert _python(agent, state, questions, max_len, head_max_len) is None
    _no_plan_kept_past_the_buckets(agent)


@settings(RUN, max_examples=max(25, RUN.max_examples // 2))
@given(state=STATE, questions=QUESTIONS, max_len=MAX_LEN, head_max_len=HEAD_MAX_LEN)
def test_mcp_answers_as_python_or_names_the_field(agent, state, questions, max_len,
                                                  head_max_len):
    from kime.mcp import tools
    from kime.mcp.validate import ToolError

    as_object = state if isinstance(state, dict) and state else {"state": state}
    # laya's tools take a choice's criteria as an object only (their schema), and a state as one
    questions = {qid: dict(q, criteria=dict.fromkeys(q["criteria"], ""))
                 if q["type"] == "choice" else q for qid, q in questions.items()}
    try:
        reply = tools.run_tool(tools.laya_predict, agent=agent, state=as_object,
                               questions=questions, max_len=max_len, head_max_len=head_max_len)
    except ToolError as e:
        assert e.code in ("invalid_request", "invalid_max_len", "invalid_head_max_len"), \
            e.payload()
        if e.code == "invalid_request":
            assert _python(agent, as_object, questions, max_len, head_max_len) is None
        else:  # laya's tools refuse a budget below one, as its server does
            assert e.code[len("invalid_"):] in e.message
    else:
        want = _python(agent, as_object, questions, max_len, head_max_len)
        assert want is not None
        _same_answers(reply, want)
    _no_plan_kept_past_the_buckets(agent)
