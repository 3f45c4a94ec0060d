"""The compiled CPU forward pass on parallel-layout batches (laya's `parallel_layout`: position
ids and option ids per token) against the NumPy reference, in FP32, INT8 and BF16, and its bits:
a row's answer does not depend on its batch or the thread count, and a plan that ran a parallel
batch runs a sequential one with the sequential bits.

The checkpoints are synthetic (`kime.synthetic`); the backend takes the layout from the batch,
so the rows are laid out here by laya's rule (`kime.layout.parallel_layout`). The golden rows
Laya 0.4.15 itself ran (tests/goldens/parallel.json: its ids, markers, position and option ids,
raw logits and act probabilities) hold the backends to Laya."""
from __future__ import annotations

import json
import tracemalloc
import warnings
from typing import Any, Dict, List

import numpy as np
import pytest

from kime._cpu import _bgemm
from kime._cpu.backend import CpuBackend
from kime._cpu.reference import ReferenceModel
from kime.batch import Batch
from kime.buckets import pick_bucket
from kime.checkpoint import Checkpoint, load_checkpoint
from kime.layout import parallel_layout
from kime.synthetic import write_checkpoint

from ..paths import GOLDENS
from ..tolerances import BF16, FP32, INT8

needs_bf16 = pytest.mark.skipif(_bgemm.missing() is not None,
                                reason="BF16 does not run here (missing: %s)" % _bgemm.missing())


@pytest.fixture(scope="module", params=["tiny", "multilingual-tiny"])
def checkpoint(request, tmp_path_factory) -> Checkpoint:
    path = write_checkpoint(tmp_path_factory.mktemp("ck") / request.param, request.param, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return load_checkpoint(str(path))


def parallel_rows(seed: int, n: int, vocab: int = 1500) -> Batch:
    """n rows laid out by laya's rule: an instruction, 1 to 8 option slots of uneven lengths
    (each opened by its marker), the head's [SEP], a state; one row in four cut short."""
    rng = np.random.default_rng(seed)
    ids: List[List[int]] = []
    markers: List[List[int]] = []
    positions: List[List[int]] = []
    options: List[List[int]] = []
    for _ in range(n):
        start = int(rng.integers(2, 15))
        spans = [int(s) for s in rng.integers(1, 14, size=int(rng.integers(1, 9)))]
        marks = [start + sum(spans[:s]) for s in range(len(spans))]
        head_len = start + sum(spans) + 1
        length = head_len + int(rng.integers(0, 60))
        pos, opt = parallel_layout(marks, head_len, length)
        cut = length if rng.random() < 0.75 else int(rng.integers(marks[0] + 1, length + 1))
        ids.append([int(t) for t in rng.integers(5, vocab, size=cut)])
        markers.append([m for m in marks if m < cut])
        positions.append(list(pos[:cut]))
        options.append(list(opt[:cut]))
    qtypes = [int(q) for q in rng.integers(0, 3, size=n)]
    return Batch.pack(ids, markers, qtypes, positions=positions, option_ids=options)


def sequential(batch: Batch) -> Batch:
    return Batch(ids=batch.ids, cu=batch.cu, markers=batch.markers, mcu=batch.mcu,
                 qtype=batch.qtype)


def row_of(batch: Batch, r: int) -> Batch:
    a, b = int(batch.cu[r]), int(batch.cu[r + 1])
    ma, mb = int(batch.mcu[r]), int(batch.mcu[r + 1])
    assert batch.positions is not None and batch.option_ids is not None
    return Batch.pack([batch.ids[a:b].tolist()], [batch.markers[ma:mb].tolist()],
                      [int(batch.qtype[r])], positions=[batch.positions[a:b].tolist()],
                      option_ids=[batch.option_ids[a:b].tolist()])


def run(backend, batch: Batch):
    out = backend.run(batch)
    return out.logits.copy(), out.act.copy()


def row_softmax(logits: np.ndarray, mcu: np.ndarray) -> np.ndarray:
    out = np.empty_like(logits, dtype=np.float64)
    for a, b in zip(mcu[:-1], mcu[1:]):
        z = logits[a:b].astype(np.float64)
        e = np.exp(z - z.max())
        out[a:b] = e / e.sum()
    return out


def test_fp32_matches_the_reference(checkpoint):
    batch = parallel_rows(0, 5)
    backend = CpuBackend(checkpoint, 2, use_cache=False)
    logits, act = run(backend, batch)
    want = ReferenceModel(checkpoint).run(batch)
    np.testing.assert_allclose(logits, want.logits, **FP32.logits.kw)
    np.testing.assert_allclose(act, want.act, **FP32.probs.kw)
    # The layout is really read: the same ids laid out sequentially answer otherwise, and the
    # reference follows the compiled pass there too.
    seq_logits, _ = run(backend, sequential(batch))
    assert np.abs(seq_logits - logits).max() > 100 * FP32.logits.atol
    np.testing.assert_allclose(seq_logits, ReferenceModel(checkpoint).run(sequential(batch)).logits,
                               **FP32.logits.kw)
    backend.close()


@pytest.mark.parametrize("precision", ["f32", "int8", pytest.param("bf16", marks=needs_bf16)])
def test_bits_independent_of_batch_and_threads(checkpoint, precision):
    batch = parallel_rows(1, 5)
    two = CpuBackend(checkpoint, 2, precision=precision, use_cache=False)
    one = CpuBackend(checkpoint, 1, precision=precision, use_cache=False)
    logits, act = run(two, batch)
    np.testing.assert_array_equal(run(one, batch)[0], logits)
    for r in range(batch.rows):
        alone_logits, alone_act = run(one, row_of(batch, r))
        ma, mb = int(batch.mcu[r]), int(batch.mcu[r + 1])
        np.testing.assert_array_equal(alone_logits, logits[ma:mb])
        np.testing.assert_array_equal(alone_act[0], act[r])
    two.close()
    one.close()


def test_int8_is_close_to_fp32(checkpoint):
    batch = parallel_rows(2, 8)
    f32 = CpuBackend(checkpoint, 2, use_cache=False)
    int8 = CpuBackend(checkpoint, 2, precision="int8", use_cache=False)
    fl, fa = run(f32, batch)
    il, ia = run(int8, batch)
    assert fl.tobytes() != il.tobytes()  # it really is INT8
    probs_f, probs_i = row_softmax(fl, batch.mcu), row_softmax(il, batch.mcu)
    assert np.abs(probs_f - probs_i).max() <= INT8.probs.atol
    assert np.abs(fa - ia).max() <= INT8.probs.atol
    f32.close()
    int8.close()


@needs_bf16
def test_bf16_is_close_to_fp32(checkpoint):
    batch = parallel_rows(3, 8)
    f32 = CpuBackend(checkpoint, 2, use_cache=False)
    bf16 = CpuBackend(checkpoint, 2, precision="bf16", use_cache=False)
    fl, fa = run(f32, batch)
    bl, ba = run(bf16, batch)
    assert fl.tobytes() != bl.tobytes()
    np.testing.assert_allclose(bl, fl, **BF16.logits.kw)
    np.testing.assert_allclose(row_softmax(bl, batch.mcu), row_softmax(fl, batch.mcu),
                               **BF16.probs.kw)
    np.testing.assert_allclose(ba, fa, **BF16.probs.kw)
    f32.close()
    bf16.close()


def test_a_plan_switches_layouts_without_residue(checkpoint):
    """One plan runs sequential, parallel, sequential batches: each gets its own layout's bits."""
    batch = parallel_rows(4, 3)
    backend = CpuBackend(checkpoint, 2, use_cache=False)
    seq = run(backend, sequential(batch))
    par = run(backend, batch)
    assert backend.plans.keys() == {pick_bucket(batch.tokens)}
    np.testing.assert_array_equal(run(backend, sequential(batch))[0], seq[0])
    np.testing.assert_array_equal(run(backend, batch)[0], par[0])
    fresh = CpuBackend(checkpoint, 2, use_cache=False)
    np.testing.assert_array_equal(run(fresh, sequential(batch))[0], seq[0])
    backend.close()
    fresh.close()


def test_warm_plan_allocates_nothing(checkpoint):
    batch = parallel_rows(5, 4)
    backend = CpuBackend(checkpoint, 1, use_cache=False)
    backend.prepare(batch.tokens)
    plan = backend.plans[pick_bucket(batch.tokens)]
    plan.run(batch)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        plan.run(batch)
        _, peak = tracemalloc.get_traced_memory()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert peak < min(16384, batch.tokens * checkpoint.hidden), peak
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    assert grown < 4096, grown
    backend.close()


def test_a_position_outside_the_tables_is_refused(checkpoint):
    batch = parallel_rows(6, 2)
    assert batch.positions is not None
    backend = CpuBackend(checkpoint, 1, use_cache=False)
    bad = Batch(ids=batch.ids, cu=batch.cu, markers=batch.markers, mcu=batch.mcu,
                qtype=batch.qtype, positions=batch.positions.copy(),
                option_ids=batch.option_ids)
    bad.positions[3] = backend.spec.max_pos
    with pytest.raises(ValueError, match="position id is outside"):
        backend.run(bad)
    backend.close()


def test_the_reference_refuses_half_a_layout(checkpoint):
    ids = np.arange(5, 15, dtype=np.int64)
    with pytest.raises(ValueError, match="go together"):
        ReferenceModel(checkpoint).row(ids, np.array([2]), 0, positions=np.arange(10))


def _golden_checkpoint(name: str, info: Dict[str, Any], tmp_path) -> Checkpoint:
    """The checkpoint a parallel.json case ran on: committed, or rewritten by kime's writer."""
    if "path" in info:
        path = GOLDENS / info["path"]
    else:
        path = write_checkpoint(tmp_path / name, info["shape"], seed=info["seed"],
                                odd_temperatures=info["odd_temperatures"],
                                option_layout=info["option_layout"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return load_checkpoint(str(path))


GOLDEN = json.loads((GOLDENS / "parallel.json").read_text(encoding="utf-8"))


@pytest.mark.slow  # 481 rows through the compiled pass, some through the NumPy reference
@pytest.mark.parametrize("name", sorted(GOLDEN["checkpoints"]))
def test_golden_rows_match_laya(name, tmp_path):
    """Every row Laya ran on a parallel checkpoint: the compiled FP32 pass and the reference give
    Laya's raw logits and act probabilities; INT8 stays within its table of them."""
    rows = [r for c in GOLDEN["cases"] if c["checkpoint"] == name for r in c["rows"] or ()]
    assert rows
    ck = _golden_checkpoint(name, GOLDEN["checkpoints"][name], tmp_path)

    def pack(part):
        return Batch.pack([r["ids"] for r in part], [r["markers"] for r in part],
                          [r["qtype"] for r in part], positions=[r["position_ids"] for r in part],
                          option_ids=[r["option_ids"] for r in part])

    batch = pack(rows)
    want_logits = np.concatenate([r["logits"] for r in rows]).astype(np.float32)
    want_act = np.array([r["act"] for r in rows], dtype=np.float32)
    f32 = CpuBackend(ck, 2, use_cache=False)
    logits, act = run(f32, batch)
    np.testing.assert_allclose(logits, want_logits, **FP32.logits.kw)
    np.testing.assert_allclose(act, want_act, **FP32.probs.kw)
    some = rows[::max(1, len(rows) // 24)]
    ref = ReferenceModel(ck).run(pack(some))
    np.testing.assert_allclose(ref.logits, np.concatenate([r["logits"] for r in some]),
                               **FP32.logits.kw)
    np.testing.assert_allclose(ref.act, np.array([r["act"] for r in some]), **FP32.probs.kw)
    int8 = CpuBackend(ck, 2, precision="int8", use_cache=False)
    q_logits, q_act = run(int8, batch)
    assert np.abs(row_softmax(q_logits, batch.mcu)
                  - row_softmax(want_logits, batch.mcu)).max() <= INT8.probs.atol
    assert np.abs(q_act - want_act).max() <= INT8.probs.atol
    f32.close()
    int8.close()
    if _bgemm.missing() is None:  # BF16 where its kernels run (AVX512_BF16)
        bf16 = CpuBackend(ck, 2, precision="bf16", use_cache=False)
        b_logits, b_act = run(bf16, batch)
        np.testing.assert_allclose(b_logits, want_logits, **BF16.logits.kw)
        np.testing.assert_allclose(b_act, want_act, **BF16.probs.kw)
        bf16.close()
