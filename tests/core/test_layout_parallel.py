"""The parallel option layout's rows (`kime.layout.parallel_layout`, issue 26): what every row
of a parallel checkpoint carries, and how the executor keeps the two layouts apart.

Laya's exact position and option ids on recorded questions are replayed from the goldens in
tests/core/test_parallel_goldens.py; these tests hold the rule's invariants over generated
inputs, and the plumbing from a request to a batch.
"""
from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import kime
from kime.batch import Batch
from kime.executor import _pack, row_key
from kime.layout import Row, parallel_layout

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team handles this ticket?",
             "criteria": {"billing": "money, invoices and refunds", "tech": None, "sales": ""}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "spam": {"type": "noul", "instructions": "Is it spam?"},
}
STATE = "My invoice is wrong and I was charged twice for the same order. " * 6


@st.composite
def heads(draw):
    """(markers, head_len, length): a head whose slots are 1..6 tokens, and a row at least as
    long as the head."""
    start = draw(st.integers(1, 12))
    spans = draw(st.lists(st.integers(1, 6), max_size=10))
    markers, at = [], start
    for n in spans:
        markers.append(at)
        at += n
    head_len = at + 1
    return markers, head_len, head_len + draw(st.integers(0, 40))


@given(heads())
def test_every_slot_starts_at_one_position_and_the_rest_follows_the_longest(case):
    markers, head_len, length = case
    positions, option_ids = parallel_layout(markers, head_len, length)
    assert len(positions) == len(option_ids) == length
    if not markers:
        assert positions == list(range(length)) and option_ids == [0] * length
        return
    start = markers[0]
    ends = markers[1:] + [head_len - 1]
    for s, (a, b) in enumerate(zip(markers, ends)):
        assert positions[a:b] == list(range(start, start + b - a))
        assert option_ids[a:b] == [s + 1] * (b - a)
    assert positions[:start] == list(range(start)) and option_ids[:start] == [0] * start
    tail = positions[head_len - 1:]
    after = start + max(b - a for a, b in zip(markers, ends))
    assert tail == list(range(after, after + len(tail)))
    assert option_ids[head_len - 1:] == [0] * len(tail)


@given(heads(), st.permutations(range(10)))
def test_reordering_the_slots_only_moves_their_tokens(case, perm):
    """Laya's point: listed in another order, each option's tokens keep their positions."""
    markers, head_len, length = case
    ends = markers[1:] + [head_len - 1]
    spans = [b - a for a, b in zip(markers, ends)]
    order = [i for i in perm if i < len(spans)]
    moved, at = [], markers[0] if markers else 0
    for i in order:
        moved.append(at)
        at += spans[i]
    pos_a, _ = parallel_layout(markers, head_len, length)
    pos_b, _ = parallel_layout(moved, head_len, length)
    for slot, i in enumerate(order):
        a, b = markers[i], markers[i] + spans[i]
        assert pos_b[moved[slot]:moved[slot] + spans[i]] == pos_a[a:b]
    assert pos_a[head_len - 1:] == pos_b[head_len - 1:]


@pytest.fixture(scope="module")
def parallel_engine(tiny_path: Path, tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("parallel") / "ck"
    shutil.copytree(tiny_path, path)
    cfg = json.loads((path / "rl_agent_config.json").read_text())
    cfg["option_layout"] = "parallel"
    (path / "rl_agent_config.json").write_text(json.dumps(cfg))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tiny checkpoint's out-of-range temperatures
        engine = kime.Kime(str(path), device="cpu", threads=1)
    with engine:
        yield engine


def _check_row(row: Row, head_len: int) -> None:
    assert row.positions is not None and row.option_ids is not None
    assert len(row.positions) == len(row.option_ids) == len(row.ids)
    expect = parallel_layout(row.markers, head_len, len(row.ids))
    assert (row.positions, row.option_ids) == expect


def test_a_parallel_checkpoints_rows_carry_the_layout(parallel_engine, engine):
    lay = parallel_engine.layouter
    for request in ({"state": STATE, "questions": QUESTIONS},
                    {"state": [{"role": "user", "content": STATE}] * 3, "questions": QUESTIONS,
                     "max_len": 96}):
        rows = parallel_engine.rows_for(request)
        plain = engine.rows_for(request)
        assert [r.ids for r in rows] == [r.ids for r in plain]  # the same tokens
        assert [r.markers for r in rows] == [r.markers for r in plain]
        assert all(r.positions is None for r in plain)
        max_len = request.get("max_len") or lay.max_len
        for row in rows:
            assert len(row.ids) <= max_len
            # The head ends at the first [SEP] after the last marker.
            head_len = row.ids.index(lay.tok.sep_id, row.markers[-1]) + 1
            _check_row(row, head_len)


def test_a_cut_row_is_laid_out_before_the_cut(parallel_engine):
    """A head longer than max_len: the layout is the uncut row's, cut, as Laya cuts it."""
    many = {"big": {"type": "choice", "instructions": "Pick one",
                    "criteria": ["option number %d with words" % i for i in range(6)]}}
    full = parallel_engine.rows_for({"state": "x", "questions": many})[0]
    cut_at = full.markers[-1] + 2  # the last marker survives, its slot is cut
    cut = parallel_engine.rows_for({"state": "x", "questions": many, "max_len": cut_at})[0]
    assert cut.ids == full.ids[:cut_at]
    assert cut.positions == full.positions[:cut_at]
    assert cut.option_ids == full.option_ids[:cut_at]


def test_the_executor_packs_the_layout_and_keys_it_apart():
    seq = Row(ids=[1, 2, 3, 4], markers=[1, 2], state_tokens=0, state_tokens_used=0)
    pos, opt = parallel_layout([1, 2], 4, 4)
    par = Row(ids=seq.ids, markers=seq.markers, state_tokens=0, state_tokens_used=0,
              positions=pos, option_ids=opt)
    assert row_key(seq, 0) != row_key(par, 0)
    batch = _pack([par, par], [0, 1])
    assert batch.parallel and batch.positions.tolist() == pos * 2
    assert batch.option_ids.tolist() == opt * 2
    assert not _pack([seq], [0]).parallel
    with pytest.raises(kime.BackendError, match="mixes rows"):
        _pack([seq, par], [0, 0])
    with pytest.raises(ValueError, match="as long as the row"):
        Batch.pack([[1, 2]], [[0]], [0], positions=[[0]], option_ids=[[0]])
    with pytest.raises(ValueError, match="both or neither"):
        Batch.pack([[1, 2]], [[0]], [0], positions=[[0, 1]])
