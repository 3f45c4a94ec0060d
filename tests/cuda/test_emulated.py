"""The CUDA backend's plans, lowering, slot layout, graph replay and split on out-of-memory, run
on a CPU with the kernels replaced by their float64 references (emulator.py) and compared with
the NumPy reference forward pass. The CUDA kernels themselves are checked on a GPU
(test_kernels.py); this checks everything around them, on any machine."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

from kime._cpu.reference import ReferenceModel
from kime._cuda import backend as cuda_backend
from kime._cuda.layout import sub_batch
from kime.backend import Device, Memory, Precision
from kime.batch import Batch
from kime.checkpoint import load_checkpoint
from kime.engine import Kime
from kime.errors import BackendError
from kime.factory import Target

from .. import embed_templates
from ..golden_cases import DATA
from ..paths import GOLDENS
from ..tolerances import FP16, FP32
from .emulator import FakeCupy, FakeGemm, FakeKernels


@pytest.fixture(scope="module", params=sorted(DATA["checkpoints"]))
def checkpoint(request):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_checkpoint(str(GOLDENS / DATA["checkpoints"][request.param]["path"]))


@pytest.fixture
def emulated(monkeypatch):
    def make(ck, precision="f32", graphs=True, limit=None):
        fake = FakeCupy(limit)
        monkeypatch.setattr(cuda_backend, "toolkit", lambda ordinal: (fake, None))
        monkeypatch.setattr(cuda_backend, "Kernels", FakeKernels)
        monkeypatch.setattr(cuda_backend, "Gemm",
                            lambda cublas, ptr, half: FakeGemm(cublas, ptr, half, fake))
        return cuda_backend.CudaBackend(ck, precision=precision, graphs=graphs)
    return make


def _batch(ck, lengths, seed):
    rng = np.random.default_rng(seed)
    vocab = ck.tokenizer.vocab_size
    rows = [rng.integers(0, vocab, n).tolist() for n in lengths]
    markers = [sorted(rng.choice(n, size=min(n, 1 + r % 4), replace=False).tolist())
               for r, n in enumerate(lengths)]
    return Batch.pack(rows, markers, rng.integers(0, 3, len(lengths)).tolist())


LENGTHS = [37, 1, 16, 90, 5]


def test_emulated_fp32_matches_the_reference(checkpoint, emulated):
    backend = emulated(checkpoint, graphs=False)
    batch = _batch(checkpoint, LENGTHS, 0)
    got = backend.run(batch)
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **FP32.logits.kw)
    np.testing.assert_allclose(got.act, want.act, **FP32.probs.kw)


def test_emulated_fp16_is_close_to_the_reference(checkpoint, emulated):
    backend = emulated(checkpoint, precision="f16", graphs=False)
    batch = _batch(checkpoint, LENGTHS, 1)
    got = backend.run(batch)
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **FP16.logits.kw)
    np.testing.assert_allclose(got.act, want.act, **FP16.probs.kw)


def test_graph_replay_matches_eager_runs(checkpoint, emulated):
    eager = emulated(checkpoint, graphs=False)
    graphed = emulated(checkpoint, graphs=True)
    for seed, lengths in enumerate([LENGTHS, [3, 60], [120], [9, 9, 9, 9]]):
        batch = _batch(checkpoint, lengths, seed)
        a, b = eager.run(batch), graphed.run(batch)
        np.testing.assert_array_equal(a.logits, b.logits)
        np.testing.assert_array_equal(a.act, b.act)
    plan = graphed.plans[288]
    assert plan.graph is not None and plan.graph.launches == 3 and plan.graph_error is None
    assert "CUDA graphs" in graphed.describe()


def test_a_row_alone_and_in_a_batch_agree(checkpoint, emulated):
    backend = emulated(checkpoint, graphs=False)
    batch = _batch(checkpoint, LENGTHS, 2)
    together = backend.run(batch)
    logits, act = together.logits.copy(), together.act.copy()
    for r in range(batch.rows):
        alone = backend.run(sub_batch(batch, r, r + 1))
        np.testing.assert_allclose(alone.logits, logits[batch.mcu[r]:batch.mcu[r + 1]],
                                   **FP32.batch_logits.kw)
        np.testing.assert_allclose(alone.act[0], act[r], **FP32.batch_act.kw)


def test_out_of_memory_splits_the_batch(checkpoint, emulated):
    d = checkpoint.hidden
    # Room for the weights and a 288-slot plan, not for a 576-slot one.
    limit = max(576 * d * 4, checkpoint.encoder.vocab * d * 4) + 1
    backend = emulated(checkpoint, graphs=False, limit=limit)
    batch = _batch(checkpoint, [150, 150, 120], 3)
    got = backend.run(batch)
    assert backend.oom_cap == 576 and set(backend.plans) == {288}
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **FP32.logits.kw)
    np.testing.assert_allclose(got.act, want.act, **FP32.probs.kw)
    too_long = _batch(checkpoint, [400], 4)
    with pytest.raises(Exception, match="out of memory for a single row"):
        backend.run(too_long)


def test_a_batch_past_the_largest_plan_runs_in_a_plan_that_is_not_kept(checkpoint, emulated,
                                                                       monkeypatch):
    """Issue 53: a request that raised `max_len` past the usual plans got a plan of its own that
    was kept for good (0.7 GB on base). The largest usual plan is set to 288 slots here, so a
    300-token row is past it: it runs, as the reference runs it, and nothing is kept."""
    monkeypatch.setattr(cuda_backend, "plan_caps", lambda: (288,))
    backend = emulated(checkpoint, graphs=True)
    batch = _batch(checkpoint, [300], 6)
    got = backend.run(batch)
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **FP32.logits.kw)
    np.testing.assert_allclose(got.act, want.act, **FP32.probs.kw)
    assert not backend.plans and backend.memory().plans == 0


def test_memory_counts_weights_and_plans(checkpoint, emulated):
    backend = emulated(checkpoint)
    assert backend.memory().plans == 0 and backend.memory().weights > 0
    backend.run(_batch(checkpoint, [20], 5))
    assert backend.memory().plans > 0


def test_close_frees_weights_and_plans_and_refuses_to_run(checkpoint, emulated):
    backend = emulated(checkpoint)
    batch = _batch(checkpoint, [20], 5)
    backend.run(batch)
    backend.close()
    assert backend.memory() == Memory(weights=0, plans=0) and not backend.plans
    with pytest.raises(BackendError, match="closed"):
        backend.run(batch)
    with pytest.raises(BackendError, match="closed"):
        backend.prepare(20)
    backend.close()  # closing twice is fine


def test_prepare_builds_the_plan_a_batch_needs(checkpoint, emulated):
    backend = emulated(checkpoint)
    backend.prepare(20)
    assert set(backend.plans) == {288} and backend.plans[288].graph is not None
    assert backend.device == Device("cuda", 0) and backend.precision is Precision.F32
    assert backend.kernels == "sm_90" and backend.weights_from == "uploaded"
    assert backend.weights_file is None and backend.max_batch_tokens > 0


def test_gemm_slices_cover_every_row_once():
    from kime._cuda.gemm import GemmCall

    class Recorder:
        half = True

        def __init__(self):
            self.calls = []

        def __call__(self, *args):
            self.calls.append(args)

    fake = FakeCupy()
    x, w = fake.zeros((576, 8), np.float16), fake.zeros((4, 8), np.float16)
    y = fake.zeros((576, 4), np.float16)
    rec = Recorder()
    GemmCall(rec, x, w, y, 576, 4, 8, "w", chunk=288)()
    assert rec.calls == [(x.data.ptr, w.data.ptr, y.data.ptr, 288, 4, 8),
                         (x.data.ptr + 288 * 8 * 2, w.data.ptr, y.data.ptr + 288 * 4 * 2,
                          288, 4, 8)]
    rec.calls.clear()
    GemmCall(rec, x, w, y, 576, 4, 8, "w", chunk=None)()
    GemmCall(rec, x, w, y, 576, 4, 8, "w", chunk=500)()  # not a divisor: one whole GEMM
    assert [c[3] for c in rec.calls] == [576, 576]


def test_every_upload_is_on_the_backend_stream(checkpoint, emulated):
    """CuPy enqueues a copy or memset on the current stream, and the backend's non-blocking stream
    does not wait for the null stream: weights uploaded there could still be in flight when the
    first forward pass reads them."""
    backend = emulated(checkpoint)
    backend.run(_batch(checkpoint, [20], 6))
    transfers = backend.cupy.transfers
    assert transfers and all(s is backend.stream for s in transfers), [
        None if s is None else "another stream" for s in transfers if s is not backend.stream]


# --- the embedding mode (embed.py) ---------------------------------------------------------------

def _embed_batch(ck, lengths, seed):
    rng = np.random.default_rng(seed)
    return Batch.pack_embed([rng.integers(0, ck.tokenizer.vocab_size, n).tolist()
                             for n in lengths])


@pytest.mark.parametrize("precision,tol", [("f32", FP32.logits), ("f16", FP16.logits)])
def test_emulated_embedding_matches_the_reference(checkpoint, emulated, precision, tol):
    backend = emulated(checkpoint, precision=precision, graphs=False)
    batch = _embed_batch(checkpoint, LENGTHS, 7)
    got = backend.run(batch)
    want = ReferenceModel(checkpoint).run(batch).pooled
    assert got.pooled is not None and got.pooled.shape == (batch.rows, checkpoint.hidden)
    assert got.logits.size == 0 and got.act.shape[0] == 0
    np.testing.assert_allclose(got.pooled, want, **tol.kw)


def test_embedding_graph_replay_matches_eager_and_leaves_decisions_alone(checkpoint, emulated):
    eager = emulated(checkpoint, graphs=False)
    graphed = emulated(checkpoint, graphs=True)
    decide = _batch(checkpoint, LENGTHS, 8)
    before = graphed.run(decide)
    logits, act = before.logits.copy(), before.act.copy()
    for seed, lengths in enumerate([LENGTHS, [3, 60], [120], [9, 9, 9, 9]]):
        batch = _embed_batch(checkpoint, lengths, seed)
        a = eager.run(batch).pooled
        b = graphed.run(batch).pooled
        assert a is not None and b is not None
        np.testing.assert_array_equal(a, b)
    plan = graphed.plans[288]
    assert plan.embedding is not None and plan.embedding.graph.launches == 3
    after = graphed.run(decide)  # the plan's decision graph, after embedding batches ran in it
    np.testing.assert_array_equal(after.logits, logits)
    np.testing.assert_array_equal(after.act, act)
    assert plan.graph.launches == 1 and plan.graph_error is None


def test_an_embedding_row_alone_and_in_a_batch_agree(checkpoint, emulated):
    backend = emulated(checkpoint, graphs=False)
    batch = _embed_batch(checkpoint, LENGTHS, 9)
    together = backend.run(batch).pooled
    assert together is not None
    together = together.copy()
    for r in range(batch.rows):
        alone = backend.run(sub_batch(batch, r, r + 1)).pooled
        assert alone is not None and alone.shape == (1, checkpoint.hidden)
        np.testing.assert_allclose(alone[0], together[r], **FP32.batch_logits.kw)


def test_an_empty_embedding_row_is_zeros(checkpoint, emulated):
    backend = emulated(checkpoint, graphs=False)
    rows = _embed_batch(checkpoint, [12, 30], 10)
    a, b = rows.ids[:12].tolist(), rows.ids[12:].tolist()
    got = backend.run(Batch.pack_embed([a, [], b, []])).pooled
    assert got is not None
    want = ReferenceModel(checkpoint).run(rows).pooled
    assert not got[[1, 3]].any()
    np.testing.assert_allclose(got[[0, 2]], want, **FP32.logits.kw)


@pytest.fixture(scope="module")
def template_paths(tmp_path_factory):
    return embed_templates.template_paths(tmp_path_factory.mktemp("templates"))


EMBED_CASES = [c for c in embed_templates.DATA["embeddings"] if c["error"] is None and c["texts"]]


@pytest.mark.parametrize("case", EMBED_CASES, ids=[c["id"] for c in EMBED_CASES])
def test_the_engine_embeds_laya_rows_on_every_template(case, template_paths, monkeypatch):
    """`Kime.embed` on the emulated CUDA backend: the rows each tokenizer template frames, Laya's
    vectors (tests/goldens/embed_templates.json), empty rows the zero vector. The load's
    self-check is off: it would probe each template's checkpoint (test_selfcheck.py tests it)."""
    monkeypatch.setenv("KIME_CUDA_SELFCHECK", "0")
    fake = FakeCupy(None)
    monkeypatch.setattr(cuda_backend, "toolkit", lambda ordinal: (fake, None))
    monkeypatch.setattr(cuda_backend, "Kernels", FakeKernels)
    monkeypatch.setattr(cuda_backend, "Gemm",
                        lambda cublas, ptr, half: FakeGemm(cublas, ptr, half, fake))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engine = Kime(str(template_paths[case["checkpoint"]]),
                      device=Target(Device("cuda", 0), Precision.F32), answer_cache=0)
    try:
        assert isinstance(engine.backend, cuda_backend.CudaBackend)
        got = engine.embed(case["texts"], max_length=case["kwargs"].get("max_length", 512))
    finally:
        engine.close()
    want = np.asarray(case["vectors"], dtype=np.float64).reshape(case["shape"])
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=FP32.embeddings.atol * np.abs(want).max())


def test_out_of_memory_splits_an_embedding_batch(checkpoint, emulated):
    d = checkpoint.hidden
    limit = max(576 * d * 4, checkpoint.encoder.vocab * d * 4) + 1
    backend = emulated(checkpoint, graphs=False, limit=limit)
    batch = _embed_batch(checkpoint, [150, 150, 120], 11)
    got = backend.run(batch).pooled
    assert backend.oom_cap == 576 and set(backend.plans) == {288}
    assert got is not None and got.shape == (3, d)
    np.testing.assert_allclose(got, ReferenceModel(checkpoint).run(batch).pooled,
                               **FP32.logits.kw)


def test_memory_counts_the_embedding_buffers_once_built(checkpoint, emulated):
    backend = emulated(checkpoint)
    backend.run(_batch(checkpoint, [20], 12))
    decisions = backend.memory().plans
    backend.run(_embed_batch(checkpoint, [20], 12))
    grown = backend.memory().plans
    backend.run(_embed_batch(checkpoint, [33, 4], 13))
    assert decisions < grown == backend.memory().plans
