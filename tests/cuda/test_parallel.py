"""The CUDA backend on parallel-layout batches (issue 26), emulated on a CPU (emulator.py): the
plan's parallel lowering against the NumPy reference forward pass with position ids and option
ids, FP32 and FP16; a row's answer whatever its batch; graph replay; sequential batches on the
same plan keeping their bits, launches and metadata upload; the split on running out of memory;
a parallel checkpoint warming both graphs. The emulated attention visits only the keys the
kernel's widened key range does (parallel_reference.key_ranges), so a row reach too small fails
here too, not only on a GPU."""
from __future__ import annotations

import dataclasses
import warnings
from typing import List, Sequence, Tuple

import numpy as np
import pytest

from kime._cpu.reference import ReferenceModel
from kime._cuda import backend as cuda_backend
from kime._cuda.layout import sub_batch
from kime.batch import Batch
from kime.checkpoint import load_checkpoint

from ..golden_cases import DATA
from ..paths import GOLDENS
from ..tolerances import FP16, FP32
from .emulator import FakeCupy, FakeGemm, FakeKernels
from .parallel_reference import pack_parallel

# (tokens before the first marker, option slot lengths, state tokens after the closing [SEP]):
# slots of one token, a last slot shorter than the longest, five equal slots, a long state past
# the local windows (4 and 8 on the test checkpoints).
ROWS: List[Tuple[int, Sequence[int], int]] = [
    (3, [5, 2, 7], 10), (1, [1], 0), (4, [20, 3], 30), (2, [6, 6, 6, 6, 6], 40), (5, [2, 30, 4], 9)]


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


def parallel_batch(ck, rows: Sequence[Tuple[int, Sequence[int], int]], seed: int) -> Batch:
    return pack_parallel(rows, ck.tokenizer.vocab_size, seed)


def sequential_batch(ck, lengths: Sequence[int], seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, ck.tokenizer.vocab_size, n).tolist() for n in lengths]
    markers = [sorted(rng.choice(n, size=min(n, 1 + r % 4), replace=False).tolist())
               for r, n in enumerate(lengths)]
    return Batch.pack(rows, markers, rng.integers(0, 3, len(lengths)).tolist())


@pytest.mark.parametrize("precision,tol", [("f32", FP32), ("f16", FP16)])
def test_emulated_parallel_forward_matches_the_reference(checkpoint, emulated, precision, tol):
    backend = emulated(checkpoint, precision=precision, graphs=False)
    batch = parallel_batch(checkpoint, ROWS, 0)
    got = backend.run(batch)
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **tol.logits.kw)
    np.testing.assert_allclose(got.act, want.act, **tol.probs.kw)
    # The layout matters: the same ids in the sequential layout answer otherwise.
    plain = dataclasses.replace(batch, positions=None, option_ids=None)
    assert not np.allclose(ReferenceModel(checkpoint).run(plain).logits, want.logits,
                           **tol.logits.kw)


def test_parallel_graph_replay_matches_eager_runs(checkpoint, emulated):
    eager = emulated(checkpoint, graphs=False)
    graphed = emulated(checkpoint, graphs=True)
    seq = sequential_batch(checkpoint, [37, 1, 16, 90], 1)
    first = graphed.run(seq)
    seq_logits, seq_act = first.logits.copy(), first.act.copy()
    for seed, rows in enumerate([ROWS, ROWS[:2], ROWS[3:], ROWS[::-1]]):
        batch = parallel_batch(checkpoint, rows, seed)
        a = eager.run(batch)
        a_logits, a_act = a.logits.copy(), a.act.copy()
        b = graphed.run(batch)
        np.testing.assert_array_equal(a_logits, b.logits)
        np.testing.assert_array_equal(a_act, b.act)
    plan = graphed.plans[288]
    assert plan.parallel_graph is not None and plan.parallel_graph.launches == 3
    assert plan.parallel_graph_error is None
    again = graphed.run(seq)  # the sequential graph, after parallel batches ran in the plan
    np.testing.assert_array_equal(again.logits, seq_logits)
    np.testing.assert_array_equal(again.act, seq_act)
    assert plan.graph.launches == 1 and plan.graph_error is None
    assert plan.graph.recorded is not plan.parallel_graph.recorded


def test_a_parallel_row_alone_and_in_a_batch_agree(checkpoint, emulated):
    backend = emulated(checkpoint, graphs=False)
    batch = parallel_batch(checkpoint, ROWS, 2)
    together = backend.run(batch)
    logits, act = together.logits.copy(), together.act.copy()
    for r in range(batch.rows):
        alone = backend.run(sub_batch(batch, r, r + 1))
        assert alone.logits.shape == (int(batch.mcu[r + 1] - batch.mcu[r]),)
        np.testing.assert_allclose(alone.logits, logits[batch.mcu[r]:batch.mcu[r + 1]],
                                   **FP32.batch_logits.kw)
        np.testing.assert_allclose(alone.act[0], act[r], **FP32.batch_act.kw)


def test_sequential_batches_keep_their_bits_and_upload_beside_parallel_ones(checkpoint, emulated):
    """A plan that ran parallel batches answers a sequential batch with the bits of a backend
    that never saw one, and uploads the sequential metadata alone, in one copy per batch."""
    fresh = emulated(checkpoint, precision="f16", graphs=False)
    seq = sequential_batch(checkpoint, [37, 1, 16, 90, 5], 3)
    want = fresh.run(seq)
    want_logits, want_act = want.logits.copy(), want.act.copy()
    backend = emulated(checkpoint, precision="f16", graphs=False)
    copies: List[int] = []
    runtime = backend.cupy.cuda.runtime
    upload = runtime.memcpyAsync

    def counted(dst, src, size, kind, stream):
        if kind == runtime.memcpyHostToDevice:
            copies.append(size)
        upload(dst, src, size, kind, stream)
    runtime.memcpyAsync = staticmethod(counted)
    try:
        par = parallel_batch(checkpoint, ROWS, 3)
        backend.run(par)
        got = backend.run(seq)
    finally:
        runtime.memcpyAsync = staticmethod(upload)
    np.testing.assert_array_equal(got.logits, want_logits)
    np.testing.assert_array_equal(got.act, want_act)
    cap = 288
    assert copies == [4 * (10 * cap + 1), 4 * (7 * cap + 1)]


def test_out_of_memory_splits_a_parallel_batch(checkpoint, emulated):
    d = checkpoint.hidden
    limit = max(576 * d * 4, checkpoint.encoder.vocab * d * 4) + 1
    backend = emulated(checkpoint, graphs=False, limit=limit)
    rows = [(4, [40, 20, 10], 75), (2, [30, 30], 80), (3, [10, 50, 5], 50)]
    batch = parallel_batch(checkpoint, rows, 4)
    got = backend.run(batch)
    assert backend.oom_cap == 576 and set(backend.plans) == {288}
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **FP32.logits.kw)
    np.testing.assert_allclose(got.act, want.act, **FP32.probs.kw)


def test_a_parallel_checkpoint_warms_its_parallel_graph(checkpoint, emulated):
    ck = dataclasses.replace(checkpoint,
                             config=dataclasses.replace(checkpoint.config,
                                                        option_layout="parallel"))
    backend = emulated(ck)
    assert backend.parallel and backend.compiled.parallel_loaded
    backend.prepare(20)
    plan = backend.plans[288]
    assert plan.graph is not None and plan.parallel_graph is not None
    batch = parallel_batch(ck, ROWS[:3], 5)
    got = backend.run(batch)
    assert plan.parallel_graph.launches == 1  # replayed, not captured again
    want = ReferenceModel(ck).run(batch)
    np.testing.assert_allclose(got.logits, want.logits, **FP32.logits.kw)
    sequential = emulated(checkpoint)
    assert not sequential.parallel and not sequential.compiled.parallel_loaded
    sequential.prepare(20)
    assert sequential.plans[288].parallel_ops is None  # a sequential checkpoint never lowers it
