"""`Kime.embed`: the encoder alone, each row's mean-pooled last hidden state, through the same
scheduler, executor and plans as decisions.

Against the NumPy reference forward pass (FP32, row by row) on the committed checkpoints and on
tokenizers of other special-token templates (their rows as the template frames them); a row's
vector is the same bits alone, in any batch, beside concurrent decisions and at any thread count;
decision rows that share a run with embedding rows keep their bits; the answer cache, the
reference backend, and the refusals.
"""
from __future__ import annotations

import threading
import warnings
from typing import List

import numpy as np
import pytest

from kime.engine import Kime
from kime.errors import BadOption, InvalidArgument
from kime.executor import EMBED
from kime.layout import Row
from kime.testing import write_checkpoint

from ..paths import MULTILINGUAL_TINY, TINY
from ..tolerances import Tol

REFERENCE = Tol(0.0, 1e-5, "the compiled FP32 encoder against the NumPy FP32 reference, relative "
                "to the largest |value|: GEMM sums in other orders through four layers")
TEXTS = ["I was charged twice and want my money back.", "", "refund",
         "Ich möchte mein Geld zurück, bitte.", "emoji 😀 café " * 20, "a b c d e f g"]


def _engine(path, **kw) -> Kime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Kime(str(path), device="cpu", **kw)


@pytest.fixture(scope="module", params=[TINY, MULTILINGUAL_TINY], ids=["tiny", "ml"])
def engine(request):
    k = _engine(request.param, threads=2, answer_cache=0)
    yield k
    k.close()


def _rows(engine: Kime, texts: List[str], max_length: int) -> List[List[int]]:
    return engine.layouter.tok.encode_framed(texts, max_length)


def test_matches_the_numpy_reference(engine):
    from kime._cpu.reference import ReferenceModel

    ref = ReferenceModel(engine.checkpoint)
    got = engine.embed(TEXTS, max_length=40)
    want = np.stack([ref.embed(np.asarray(ids)) for ids in _rows(engine, TEXTS, 40)])
    assert got.shape == (len(TEXTS), engine.checkpoint.graph.hidden) and got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=0, atol=REFERENCE.atol * np.abs(want).max())


def test_the_reference_backend_embeds_too(monkeypatch):
    monkeypatch.setenv("KIME_CPU_BACKEND", "reference")
    ref = _engine(TINY, threads=1, answer_cache=0)
    compiled = _engine(TINY, threads=1, answer_cache=0)
    monkeypatch.delenv("KIME_CPU_BACKEND")
    try:
        assert "NumPy" in ref.device
        a, b = ref.embed(TEXTS[:4]), compiled.embed(TEXTS[:4])
        np.testing.assert_allclose(a, b, rtol=0, atol=REFERENCE.atol * np.abs(a).max())
    finally:
        ref.close()
        compiled.close()


def test_a_vector_does_not_depend_on_its_batch(engine):
    together = engine.embed(TEXTS)
    for i, text in enumerate(TEXTS):
        assert np.array_equal(engine.embed([text])[0], together[i])
    shuffled = engine.embed(TEXTS[::-1] + TEXTS[:2])
    assert np.array_equal(shuffled[:len(TEXTS)], together[::-1])
    assert np.array_equal(shuffled[len(TEXTS):], together[:2])


def test_a_vector_does_not_depend_on_the_thread_count():
    one, two = _engine(TINY, threads=1, answer_cache=0), _engine(TINY, threads=2, answer_cache=0)
    try:
        assert np.array_equal(one.embed(TEXTS), two.embed(TEXTS))
    finally:
        one.close()
        two.close()


def test_concurrent_callers_share_runs_and_keep_their_bits(engine):
    want = engine.embed(TEXTS)
    request = {"state": TEXTS[0], "questions": {
        "q": {"type": "choice", "instructions": "Which?", "criteria": ["refund", "info"]}}}
    decided = repr(engine.decide(request, cache=False))
    errors: List[BaseException] = []

    def embedder(seed: int) -> None:
        rng = np.random.default_rng(seed)
        try:
            for _ in range(5):
                pick = rng.choice(len(TEXTS), size=3).tolist()
                assert np.array_equal(engine.embed([TEXTS[i] for i in pick]), want[pick])
        except BaseException as e:  # reported on the test's thread
            errors.append(e)

    def decider() -> None:
        try:
            for _ in range(5):
                assert repr(engine.decide(request, cache=False)) == decided
        except BaseException as e:
            errors.append(e)

    runs = engine.scheduler.runs
    threads = [threading.Thread(target=embedder, args=(s,)) for s in range(4)]
    threads += [threading.Thread(target=decider) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    assert engine.scheduler.runs > runs


def test_decision_rows_keep_their_bits_beside_embedding_rows(engine):
    request = {"state": TEXTS[3], "questions": {
        "a": {"type": "choice", "instructions": "Which?", "criteria": ["x", "y", "z"]},
        "b": {"type": "noul", "instructions": "Is it?"}}}
    job = engine.lay_out([request], cache=False)[0]
    qtypes = [q.type_index for q in job.questions]
    alone = engine.run_rows(job.rows, qtypes, cache=False)
    embed_rows = [Row(ids=ids, markers=[], state_tokens=0, state_tokens_used=0)
                  for ids in _rows(engine, TEXTS, 64)]
    mixed = engine.run_rows(embed_rows[:2] + job.rows + embed_rows[2:],
                            [EMBED] * 2 + qtypes + [EMBED] * (len(TEXTS) - 2), cache=False)
    for a, b in zip(alone, mixed[2:2 + len(job.rows)]):
        assert np.array_equal(a.logits, b.logits) and np.array_equal(a.act, b.act)
    vectors = engine.embed(TEXTS, max_length=64)
    got = [m.act for m in mixed[:2] + mixed[2 + len(job.rows):]]
    assert np.array_equal(np.stack(got), vectors)
    assert all(m.logits.shape == (0,) for m in mixed[:2])


def test_truncation_and_empty_input(engine):
    long = "the parcel never came and nobody answers " * 20
    cut = engine.embed([long, long + " and more"], max_length=8)
    assert np.array_equal(cut[0], cut[1])  # both rows are the same first 6 tokens
    assert not np.array_equal(engine.embed([long], max_length=9)[0], cut[0])
    # None is "", and a max_length below the two special tokens cuts nothing, as transformers
    # (tests/laya/test_embed_templates.py holds transformers' own rows)
    none = engine.embed([None, "", "refund"], max_length=1)
    assert np.array_equal(none[0], none[1])
    assert np.array_equal(none[2], engine.embed(["refund"])[0])
    empty = engine.embed([])
    assert empty.shape == (0, engine.checkpoint.graph.hidden) and empty.dtype == np.float32


@pytest.mark.parametrize("template", ["bare", "bos-eos"])
def test_rows_follow_the_tokenizers_template(tmp_path, template):
    """On a tokenizer whose post-processor adds nothing (or other tokens), a row is its text's
    tokens as that template frames them, checked against the reference on those very ids; a
    text with no token at all is the zero vector and runs no forward pass."""
    from kime._cpu.reference import ReferenceModel

    path = write_checkpoint(tmp_path / template, "tiny", seed=2, tokenizer_template=template)
    k = _engine(path, threads=1, answer_cache=0)
    try:
        tok = k.layouter.tok
        texts = ["refund me now", "", "a b c d e f g h i j"]
        rows = tok.encode_framed(texts, 6)
        bare = tok.encode_many(texts)
        assert [len(r) - len(b[:6 - tok.frame_tokens]) for r, b in zip(rows, bare)] \
            == [tok.frame_tokens] * 3
        assert all(tok.cls_id not in r and tok.sep_id not in r for r in rows)
        ref = ReferenceModel(k.checkpoint)
        got = k.embed(texts, max_length=6)
        for vector, ids in zip(got, rows):
            want = ref.embed(np.asarray(ids)) if ids else np.zeros(k.checkpoint.graph.hidden)
            np.testing.assert_allclose(vector, want, rtol=0,
                                       atol=REFERENCE.atol * np.abs(got).max())
        runs = k.scheduler.runs
        empty = k.embed(["", None, ""])
        assert k.scheduler.runs == runs + (tok.frame_tokens > 0)
        assert empty.any() == (tok.frame_tokens > 0)
    finally:
        k.close()


def test_the_answer_cache_keeps_vectors():
    k = _engine(TINY, threads=1)
    try:
        first = k.embed(TEXTS[:3])
        hits = k.cache_stats()["answers"]["hits"]
        assert np.array_equal(k.embed(TEXTS[:3]), first)
        assert k.cache_stats()["answers"]["hits"] == hits + 3
        assert np.array_equal(k.embed(TEXTS[:3], cache=False), first)
    finally:
        k.close()


@pytest.mark.parametrize("bad", [0, -1, True, 2.0, "8", None])
def test_bad_max_length_is_refused(engine, bad):
    with pytest.raises(BadOption, match="max_length must be a positive integer, got %s"
                       % repr(bad).replace("(", r"\(").replace(")", r"\)")):
        engine.embed(["x"], max_length=bad)


@pytest.mark.parametrize("bad", ["one text", b"bytes", 3, {"a"}])
def test_texts_must_be_a_list(engine, bad):
    with pytest.raises(InvalidArgument, match="texts must be a list of strings"):
        engine.embed(bad)


def test_a_closed_engine_refuses():
    from kime.errors import BackendError

    k = _engine(TINY, threads=1)
    k.close()
    with pytest.raises(BackendError, match="closed"):
        k.embed(["x"])
