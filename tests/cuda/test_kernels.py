"""Each kernel of kernels.cu against its float64 reference (tests/kernels/reference.py), in FP32
and FP16, on slot layouts with odd row lengths, one-token rows, windows wider than the row; slots
a launch must not touch hold sentinels that are checked afterwards. Needs a GPU; skips saying why
without one."""
from __future__ import annotations

import numpy as np
import pytest

from kime._cuda.kernels import Kernels
from kime._cuda.layout import Layout, aligned_tokens, buffer_ints, pick_cap
from kime.batch import Batch

from ..tolerances import FP16, FP32
from ..kernels import reference as ref

# Worst absolute error on O(1) values, scaled by max(1, |want|.max()).
TOL = {"f32": FP32.cuda_kernel.atol, "f16": FP16.kernel.atol}
SENTINEL = 12345.0
HEAD_DIMS = (32, 64, 96, 128)


@pytest.fixture(scope="module", params=["f32", "f16", "f16-simple"])
def kern(request, gpu, mma_ok):
    half = request.param.startswith("f16")
    k = Kernels(gpu, half, HEAD_DIMS, mma=request.param == "f16", mma_ok=mma_ok)
    k.precision = request.param.split("-")[0]  # type: ignore[attr-defined]
    return k


def _act(k):
    return np.float16 if k.half else np.float32


def _dev(gpu, a, dtype=np.float32):
    return gpu.asarray(np.ascontiguousarray(a, dtype=dtype))


def _host(gpu, a):
    return gpu.asnumpy(a).astype(np.float64)


def _run(gpu, launch):
    launch()
    gpu.cuda.runtime.deviceSynchronize()


def _close(kern, got, want):
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=TOL[kern.precision] * max(1.0, np.abs(want).max()))


def _layout(lengths, seed=0):
    rng = np.random.default_rng(seed)
    rows = [rng.integers(0, 50, n).tolist() for n in lengths]
    markers = [sorted(rng.choice(n, size=min(n, 1 + r % 3), replace=False).tolist())
               for r, n in enumerate(lengths)]
    batch = Batch.pack(rows, markers, rng.integers(0, 3, len(lengths)).tolist())
    cap = pick_cap(aligned_tokens(batch))
    lay = Layout(cap, np.zeros(buffer_ints(cap), dtype=np.int32))
    lay.fill(batch)
    real = np.zeros(cap, dtype=bool)
    for r, n in enumerate(lengths):
        real[lay.rfirst[r]:lay.rfirst[r] + n] = True
    return lay, real


@pytest.mark.parametrize("d", [1, 33, 768, 1024])
def test_embed_norm(gpu, kern, d):
    rng = np.random.default_rng(d)
    n, vocab = 37, 50
    table, w, b = rng.normal(size=(vocab, d)), rng.normal(size=d), rng.normal(size=d)
    ids = rng.integers(0, vocab, n)
    x = _dev(gpu, np.full((n + 3, d), SENTINEL))
    h = _dev(gpu, np.full((n + 3, d), SENTINEL), _act(kern))
    _run(gpu, kern.embed_norm(_dev(gpu, ids, np.int32), _dev(gpu, table, _act(kern)), _dev(gpu, w),
                              _dev(gpu, b), 1e-5, n, d, x, h))
    want = ref.embed_norm(ids, table.astype(_act(kern)), w, b, 1e-5)
    _close(kern, _host(gpu, x)[:n], want)
    _close(kern, _host(gpu, h)[:n], want)
    assert (_host(gpu, x)[n:] == SENTINEL).all() and (_host(gpu, h)[n:] == SENTINEL).all()


@pytest.mark.parametrize("with_bias,with_norm", [(True, True), (False, True), (True, False)])
def test_add_norm(gpu, kern, with_bias, with_norm):
    rng = np.random.default_rng(1)
    n, d = 45, 768
    x0, y = rng.normal(size=(n, d)), rng.normal(size=(n, d)).astype(_act(kern))
    ybias = rng.normal(size=d) if with_bias else None
    w, b = rng.normal(size=d), rng.normal(size=d)
    x = _dev(gpu, x0)
    h = _dev(gpu, np.full((n, d), SENTINEL), _act(kern))
    _run(gpu, kern.add_norm(x, _dev(gpu, y, _act(kern)),
                            None if ybias is None else _dev(gpu, ybias),
                            _dev(gpu, w) if with_norm else None,
                            _dev(gpu, b) if with_norm else None, 1e-5, n, d, h))
    s = ref.add(x0.astype(np.float32), y, ybias)
    _close(kern, _host(gpu, x), s)
    if with_norm:
        _close(kern, _host(gpu, h), ref.layer_norm(s, w, b, 1e-5))
    else:
        assert (_host(gpu, h) == SENTINEL).all()


@pytest.mark.parametrize("with_head", [True, False])
def test_final_norm(gpu, kern, with_head):
    rng = np.random.default_rng(2)
    n, d = 29, 128
    x0, y = rng.normal(size=(n, d)), rng.normal(size=(n, d)).astype(_act(kern))
    fw, fb, w1, b1 = (rng.normal(size=d) for _ in range(4))
    te, qtok = rng.normal(size=(3, d)), rng.integers(0, 3, n)
    x = _dev(gpu, x0)
    h = _dev(gpu, np.full((n, d), SENTINEL), _act(kern))
    _run(gpu, kern.final_norm(x, _dev(gpu, y, _act(kern)), None, _dev(gpu, fw), _dev(gpu, fb), 1e-5,
                              _dev(gpu, te), _dev(gpu, qtok, np.int32),
                              _dev(gpu, w1) if with_head else None,
                              _dev(gpu, b1) if with_head else None, 1e-5, n, d, h))
    xn, hn = ref.final_norm(x0.astype(np.float32), y, None, fw, fb, 1e-5, te, qtok,
                            w1 if with_head else None, b1, 1e-5)
    _close(kern, _host(gpu, x), xn)
    if with_head:
        _close(kern, _host(gpu, h), hn)
    else:
        assert (_host(gpu, h) == SENTINEL).all()


@pytest.mark.parametrize("inter,with_bias", [(7, True), (1152, False)])
def test_geglu(gpu, kern, inter, with_bias):
    rng = np.random.default_rng(inter)
    n = 19
    big = rng.normal(size=(n, 2 * inter)).astype(_act(kern))
    bias = rng.normal(size=2 * inter) if with_bias else None
    out = _dev(gpu, np.full(n * inter + 5, SENTINEL), _act(kern))
    _run(gpu, kern.geglu(_dev(gpu, big, _act(kern)), None if bias is None else _dev(gpu, bias), n,
                         inter, out))
    got = _host(gpu, out)
    _close(kern, got[:n * inter].reshape(n, inter), ref.geglu(big, bias, inter))
    assert (got[n * inter:] == SENTINEL).all()


@pytest.mark.parametrize("relu", [True, False])
def test_bias_act(gpu, kern, relu):
    rng = np.random.default_rng(3)
    n, width = 23, 300
    io0, bias = rng.normal(size=(n, width)).astype(_act(kern)), rng.normal(size=width)
    io = _dev(gpu, io0, _act(kern))
    _run(gpu, kern.bias_act(io, _dev(gpu, bias), n, width, relu))
    _close(kern, _host(gpu, io), ref.bias_act(io0, bias, relu))


@pytest.mark.parametrize("d,hd,with_bias", [(128, 32, False), (1024, 64, True), (96, 96, False)])
def test_rope(gpu, kern, d, hd, with_bias):
    from kime.graph import rope_half_tables

    rng = np.random.default_rng(d)
    lay, _ = _layout([17, 1, 40])
    n = lay.cap
    qkv0 = rng.normal(size=(n, 3 * d)).astype(_act(kern))
    bias = rng.normal(size=3 * d) if with_bias else None
    cos, sin = rope_half_tables(n, hd, 10000.0)
    qkv = _dev(gpu, qkv0, _act(kern))
    _run(gpu, kern.rope(qkv, None if bias is None else _dev(gpu, bias), _dev(gpu, cos),
                        _dev(gpu, sin), _dev(gpu, lay.lo, np.int32), n, d, hd))
    _close(kern, _host(gpu, qkv), ref.rope(qkv0, bias, cos, sin, lay.lo, d, hd))


ATTENTION_CASES = [
    # lengths, d, heads, half window (None: global)
    ([1], 128, 4, None),
    ([17, 1, 33, 16], 128, 4, 8),
    ([200, 5], 1024, 16, 64),
    ([40, 3], 1024, 16, 1000),  # a window wider than the rows
    ([130, 16, 1, 77], 768, 12, None),
    ([50], 96, 1, None),
    ([31, 64], 256, 2, 4),
]


@pytest.mark.parametrize("lengths,d,heads,hw", ATTENTION_CASES)
def test_attention(gpu, kern, lengths, d, heads, hw):
    """Gap and padding slots hold NaN: nothing from them may reach a real row."""
    rng = np.random.default_rng(len(lengths) * d)
    lay, real = _layout(lengths)
    n = lay.cap
    qkv0 = rng.normal(size=(n + 64, 3 * d)).astype(_act(kern))
    qkv0[:n][~real] = np.nan
    qkv0[n:] = 0.0  # the arena's slack rows are zeros
    out = _dev(gpu, np.full((n, d), SENTINEL), _act(kern))
    _run(gpu, kern.attention(_dev(gpu, qkv0, _act(kern)), _dev(gpu, lay.lo, np.int32),
                             _dev(gpu, lay.hi, np.int32), n, d, heads, hw, out))
    got = _host(gpu, out)[real]
    want = ref.attention(np.nan_to_num(qkv0[:n]), lay.lo, lay.hi, d, heads, hw)[real]
    assert np.isfinite(got).all()
    _close(kern, got, want)


def test_attention_bits_do_not_depend_on_the_neighbours(gpu, kern):
    """The same row alone, after another row, and before one: identical bits."""
    rng = np.random.default_rng(7)
    d, heads, n_row = 1024, 16, 77
    row = rng.normal(size=(n_row, 3 * d)).astype(_act(kern))
    outs = []
    for before, after in [(0, 0), (37, 0), (0, 120), (200, 5)]:
        lengths = [x for x in (before, n_row, after) if x]
        lay, _ = _layout(lengths)
        start = lay.rfirst[1 if before else 0]
        qkv0 = rng.normal(size=(lay.cap + 64, 3 * d)).astype(_act(kern))
        qkv0[start:start + n_row] = row
        for hw in (None, 64):
            out = _dev(gpu, np.zeros((lay.cap, d)), _act(kern))
            _run(gpu, kern.attention(_dev(gpu, qkv0, _act(kern)), _dev(gpu, lay.lo, np.int32),
                                     _dev(gpu, lay.hi, np.int32), lay.cap, d, heads, hw, out))
            outs.append(gpu.asnumpy(out)[start:start + n_row])
    for i in range(2, len(outs)):
        np.testing.assert_array_equal(outs[i], outs[i % 2])


def test_gather_norm_score_and_act_head(gpu, kern):
    rng = np.random.default_rng(4)
    lay, _ = _layout([30, 1, 17, 64])
    n, d, hidden, n_act = lay.cap, 96, 256, 3
    x0 = rng.normal(size=(n, d))
    w, b = rng.normal(size=d), rng.normal(size=d)
    x = _dev(gpu, x0)
    mtok = _dev(gpu, lay.mtok, np.int32)
    gathered = _dev(gpu, np.zeros((n, d)), _act(kern))
    _run(gpu, kern.gather_norm(x, mtok, _dev(gpu, w), _dev(gpu, b), 1e-5, n, d, gathered))
    _close(kern, _host(gpu, gathered), ref.gather_norm(x0.astype(np.float32), lay.mtok, w, b, 1e-5))

    s1 = rng.normal(size=(n, d)).astype(_act(kern))
    b1, w3, b3 = rng.normal(size=d), rng.normal(size=(1, d)), rng.normal(size=1)
    logits = _dev(gpu, np.zeros(n))
    _run(gpu, kern.score(_dev(gpu, s1, _act(kern)), _dev(gpu, b1), _dev(gpu, w3), _dev(gpu, b3), n,
                         d, logits))
    want_logits = ref.score(s1, b1, w3, b3)
    _close(kern, _host(gpu, logits), want_logits)

    w0t, b0 = rng.normal(size=(d + 4, hidden)) / np.sqrt(d), rng.normal(size=hidden)
    w2, b2 = rng.normal(size=(n_act, hidden)) / 16, rng.normal(size=n_act)
    act = _dev(gpu, np.full((n, n_act), SENTINEL))
    _run(gpu, kern.act_head(x, logits, _dev(gpu, lay.mcu, np.int32),
                            _dev(gpu, lay.rfirst, np.int32), _dev(gpu, w0t), _dev(gpu, b0),
                            _dev(gpu, w2), _dev(gpu, b2), n, d, hidden, n_act, act))
    got = _host(gpu, act)
    want = ref.act_head(x0.astype(np.float32), _host(gpu, logits), lay.mcu, lay.rfirst, w0t, b0,
                        w2, b2)
    rows = 4
    np.testing.assert_allclose(got[:rows], want[:rows], rtol=0, atol=TOL["f32"])
    assert (got[rows:] == SENTINEL).all()  # slots of rows without markers are never written


@pytest.mark.parametrize("seed", range(4))
def test_mean_pool(gpu, kern, seed):
    """Each row's mean over its real slots, against float64 in the row layout; x is FP32 in both
    precisions (the residual stream), so FP32's bound holds for both."""
    rng = np.random.default_rng(40 + seed)
    lengths = rng.integers(1, 90, int(rng.integers(1, 9))).tolist()
    lay, real = _layout(lengths, seed)
    n, d = lay.cap, int(rng.choice([1, 33, 96, 768, 1030]))
    rows = n // 16
    x0 = rng.normal(size=(n, d)).astype(np.float32)
    out = _dev(gpu, np.full((rows, d), SENTINEL))
    rfirst, hi = _dev(gpu, lay.rfirst, np.int32), _dev(gpu, lay.hi, np.int32)
    _run(gpu, kern.mean_pool(_dev(gpu, x0), rfirst, hi, rows, n, d, out))
    got = _host(gpu, out)
    want = ref.mean_pool_rows(x0[real], np.concatenate([[0], np.cumsum(lengths)]))
    np.testing.assert_allclose(got[:len(lengths)], want, rtol=0,
                               atol=FP32.cuda_kernel.atol * max(1.0, np.abs(want).max()))
    assert np.array_equal(got[len(lengths):], np.repeat(got[:1], rows - len(lengths), axis=0))
    # A row starting at the plan's end (an empty last row of a full plan) reads nothing: zeros.
    _run(gpu, kern.mean_pool(_dev(gpu, x0), _dev(gpu, np.full(n, n), np.int32), hi, rows, n, d,
                             out))
    assert not _host(gpu, out).any()


# --- the parallel option layout (issue 26): rope_pos and the _par attention ---------------------

PARALLEL_CASES = [
    # rows (tokens before the first marker, option slot lengths, state), d, heads, half window
    ([(3, [5, 2, 7], 10)], 128, 4, 8),
    ([(1, [1], 0), (4, [20, 3], 30)], 128, 4, None),
    ([(2, [6] * 5, 40), (5, [2, 30, 4], 9)], 1024, 16, 64),
    ([(1, [40, 1], 2), (2, [3], 100), (1, [1] * 12, 0)], 768, 12, 4),  # a short last slot
    ([(8, [50, 60, 20], 120)], 96, 1, 1000),
    ([(2, [10] * 10, 50)], 256, 2, 0),
]


def _parallel_layout(spec, seed=0):
    from kime._cuda.layout import Layout, aligned_tokens, buffer_ints, pick_cap

    from .parallel_reference import pack_parallel

    batch = pack_parallel(spec, 50, seed)
    cap = pick_cap(aligned_tokens(batch))
    lay = Layout(cap, np.zeros(buffer_ints(cap), dtype=np.int32))
    lay.fill(batch)
    real = np.zeros(cap, dtype=bool)
    for r in range(batch.rows):
        real[lay.rfirst[r]:lay.rfirst[r] + int(batch.cu[r + 1] - batch.cu[r])] = True
    return lay, real


def _fields(gpu, lay):
    from kime._cuda.kernels import Parallel

    return Parallel(*(_dev(gpu, a, np.int32) for a in (lay.pos, lay.opt, lay.shift)))


def _random_cases():
    from .parallel_reference import random_spec

    rng = np.random.default_rng(26)
    cases = []
    for _ in range(6):
        d, heads = [(128, 4), (1024, 16), (768, 12), (96, 1), (256, 2)][int(rng.integers(0, 5))]
        hw = [None, 0, 1, 4, 8, 64][int(rng.integers(0, 6))]
        cases.append((random_spec(rng, int(rng.integers(1, 4))), d, heads, hw))
    return cases


@pytest.mark.parametrize("spec,d,heads,hw", PARALLEL_CASES + _random_cases())
def test_parallel_attention(gpu, kern, spec, d, heads, hw):
    """Against float64 with the option mask and the window in position ids; gap and padding
    slots hold NaN, and masked keys must get exactly nothing."""
    rng = np.random.default_rng(len(spec) * d)
    lay, real = _parallel_layout(spec)
    n = lay.cap
    qkv0 = rng.normal(size=(n + 64, 3 * d)).astype(_act(kern))
    qkv0[:n][~real] = np.nan
    qkv0[n:] = 0.0
    out = _dev(gpu, np.full((n, d), SENTINEL), _act(kern))
    _run(gpu, kern.attention(_dev(gpu, qkv0, _act(kern)), _dev(gpu, lay.lo, np.int32),
                             _dev(gpu, lay.hi, np.int32), n, d, heads, hw, out,
                             _fields(gpu, lay)))
    got = _host(gpu, out)[real]
    want = ref.attention(np.nan_to_num(qkv0[:n]), lay.lo, lay.hi, d, heads, hw,
                         lay.pos, lay.opt)[real]
    assert np.isfinite(got).all()
    _close(kern, got, want)


def test_a_masked_key_gets_exactly_nothing(gpu, kern):
    """Huge values in another option's V cannot leak into a slot's output, not even by 1 ulp:
    the output is the same bits with those V rows zeroed."""
    spec = [(3, [8, 8, 8], 20)]
    lay, real = _parallel_layout(spec)
    n, d, heads = lay.cap, 128, 4
    rng = np.random.default_rng(5)
    qkv0 = rng.normal(size=(n + 64, 3 * d)).astype(_act(kern))
    qkv0[n:] = 0.0
    outs = []
    for scale in (0.0, 1000.0):
        q = qkv0.copy()
        q[:n][lay.opt == 2, 2 * d:] = scale  # option 2's values
        out = _dev(gpu, np.zeros((n, d)), _act(kern))
        _run(gpu, kern.attention(_dev(gpu, q, _act(kern)), _dev(gpu, lay.lo, np.int32),
                                 _dev(gpu, lay.hi, np.int32), n, d, heads, None, out,
                                 _fields(gpu, lay)))
        outs.append(gpu.asnumpy(out)[(lay.opt == 1) | (lay.opt == 3)])
    np.testing.assert_array_equal(outs[0], outs[1])


def test_parallel_attention_on_a_sequential_layout_is_the_sequential_kernel(gpu, kern):
    """Positions equal to the index and no options: the _par instance visits the same keys in
    the same chunks as the sequential one, so it gives the same bits."""
    rng = np.random.default_rng(11)
    lay, real = _layout([130, 16, 1, 77])
    lay.pos[:] = np.arange(lay.cap) - lay.lo
    lay.opt[:] = 0
    lay.shift[:] = 0
    d, heads, n = 768, 12, lay.cap
    qkv = _dev(gpu, rng.normal(size=(n + 64, 3 * d)), _act(kern))
    for hw in (None, 8):
        a = _dev(gpu, np.zeros((n, d)), _act(kern))
        b = _dev(gpu, np.zeros((n, d)), _act(kern))
        lo, hi = _dev(gpu, lay.lo, np.int32), _dev(gpu, lay.hi, np.int32)
        _run(gpu, kern.attention(qkv, lo, hi, n, d, heads, hw, a))
        _run(gpu, kern.attention(qkv, lo, hi, n, d, heads, hw, b, _fields(gpu, lay)))
        np.testing.assert_array_equal(gpu.asnumpy(a)[real], gpu.asnumpy(b)[real])


def test_parallel_attention_bits_do_not_depend_on_the_neighbours(gpu, kern):
    rng = np.random.default_rng(8)
    d, heads = 1024, 16
    row_spec = (4, [20, 3, 9], 30)
    outs = []
    for before, after in [(None, None), ((2, [5, 5], 20), None), (None, (1, [50], 90)),
                          ((3, [60, 2], 140), (1, [2], 3))]:
        spec = [s for s in (before, row_spec, after) if s is not None]
        lay, _ = _parallel_layout(spec)
        start = int(lay.rfirst[1 if before else 0])
        n_row = 4 + 32 + 1 + 30
        qkv0 = rng.normal(size=(lay.cap + 64, 3 * d)).astype(_act(kern))
        qkv0[start:start + n_row] = np.random.default_rng(9).normal(size=(n_row, 3 * d))
        for hw in (None, 8):
            out = _dev(gpu, np.zeros((lay.cap, d)), _act(kern))
            _run(gpu, kern.attention(_dev(gpu, qkv0, _act(kern)), _dev(gpu, lay.lo, np.int32),
                                     _dev(gpu, lay.hi, np.int32), lay.cap, d, heads, hw, out,
                                     _fields(gpu, lay)))
            outs.append(gpu.asnumpy(out)[start:start + n_row])
    for i in range(2, len(outs)):
        np.testing.assert_array_equal(outs[i], outs[i % 2])


@pytest.mark.parametrize("d,hd,with_bias", [(128, 32, False), (1024, 64, True), (96, 96, False)])
def test_rope_pos(gpu, kern, d, hd, with_bias):
    from kime.graph import rope_half_tables

    rng = np.random.default_rng(d + 1)
    lay, _ = _parallel_layout([(3, [5, 2, 7], 10), (1, [40, 1], 2)])
    n = lay.cap
    qkv0 = rng.normal(size=(n, 3 * d)).astype(_act(kern))
    bias = rng.normal(size=3 * d) if with_bias else None
    cos, sin = rope_half_tables(n, hd, 160000.0)
    qkv = _dev(gpu, qkv0, _act(kern))
    _run(gpu, kern.rope(qkv, None if bias is None else _dev(gpu, bias), _dev(gpu, cos),
                        _dev(gpu, sin), _dev(gpu, lay.lo, np.int32), n, d, hd,
                        _fields(gpu, lay)))
    _close(kern, _host(gpu, qkv), ref.rope(qkv0, bias, cos, sin, lay.lo, d, hd, lay.pos))
