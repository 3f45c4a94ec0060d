"""The slot layout of a plan (kime/_cuda/layout.py), on the host: no GPU needed."""
from __future__ import annotations

import numpy as np
import pytest

from kime._cuda.layout import ALIGN, Layout, aligned_tokens, buffer_ints, pick_cap, plan_caps, span
from kime.batch import Batch


def _batch(lengths, seed=0):
    rng = np.random.default_rng(seed)
    rows = [list(rng.integers(5, 1000, n)) for n in lengths]
    markers = [sorted(rng.choice(n, size=min(n, 3), replace=False).tolist()) for n in lengths]
    return Batch.pack(rows, markers, [int(q) for q in rng.integers(0, 3, len(lengths))])


def _layout(cap):
    return Layout(cap, np.full(buffer_ints(cap), -7, dtype=np.int32))


def test_caps_hold_a_full_bucket_of_long_rows():
    assert plan_caps() == (288, 576, 1152, 2304, 4608)
    assert pick_cap(1) == 288 and pick_cap(288) == 288 and pick_cap(289) == 576
    assert pick_cap(5000) == 9216
    assert all(cap % ALIGN == 0 for cap in plan_caps())
    assert span(0) == 0 and span(1) == 16 and span(16) == 16 and span(17) == 32


@pytest.mark.parametrize("lengths", [[1], [16], [17, 1, 33], [5, 40, 100, 3, 16], [288]])
def test_rows_start_aligned_and_every_slot_is_a_valid_row(lengths):
    batch = _batch(lengths)
    cap = pick_cap(aligned_tokens(batch))
    lay = _layout(cap)
    markers, rows = lay.fill(batch)
    assert (markers, rows) == (int(batch.mcu[-1]), batch.rows)
    at = 0
    for r, n in enumerate(lengths):
        a = int(batch.cu[r])
        assert lay.rfirst[r] == at and at % ALIGN == 0
        np.testing.assert_array_equal(lay.ids[at:at + n], batch.ids[a:a + n])
        assert (lay.lo[at:at + n] == at).all() and (lay.hi[at:at + n] == at + n).all()
        assert (lay.qtok[at:at + n] == batch.qtype[r]).all()
        for m in range(int(batch.mcu[r]), int(batch.mcu[r + 1])):
            assert lay.mtok[m] == at + batch.markers[m]
        gap = np.arange(at + n, at + span(n))
        np.testing.assert_array_equal(lay.lo[gap], gap)  # a gap slot is a row of one
        np.testing.assert_array_equal(lay.hi[gap], gap + 1)
        at += span(n)
    # Padding: 16-slot rows of copies of row 0's first token, up to cap.
    pad = np.arange(at, cap)
    np.testing.assert_array_equal(lay.lo[pad], pad & ~(ALIGN - 1))
    np.testing.assert_array_equal(lay.hi[pad], (pad & ~(ALIGN - 1)) + ALIGN)
    assert (lay.ids[at:] == batch.ids[0]).all()
    # Every slot sees itself, and only slots inside its own bounds.
    slots = np.arange(cap)
    assert ((lay.lo <= slots) & (slots < lay.hi)).all()
    assert ((lay.hi - lay.lo) <= max(ALIGN, max(lengths))).all()
    # Marker slots past the batch repeat marker 0; rows past it have no markers.
    assert (lay.mtok[markers:] == lay.mtok[0]).all()
    np.testing.assert_array_equal(lay.mcu[:rows + 1], batch.mcu)
    assert (lay.mcu[rows + 1:] == markers).all()


def test_a_group_of_16_slots_starts_with_a_real_token_of_its_row():
    """attention takes a 16-slot group's key range from its first slot."""
    batch = _batch([17, 1, 31, 16, 2])
    lay = _layout(pick_cap(aligned_tokens(batch)))
    lay.fill(batch)
    for q0 in range(0, lay.cap, ALIGN):
        lo, hi = lay.lo[q0], lay.hi[q0]
        assert lo == q0 or (lo % ALIGN == 0 and lo <= q0 < hi)
        assert hi - lo >= 1


def test_refill_is_the_same_whatever_was_there_before():
    first, second = _batch([100, 7, 50], seed=1), _batch([3], seed=2)
    cap = pick_cap(aligned_tokens(first))
    used, fresh = _layout(cap), _layout(cap)
    used.fill(first)
    used.fill(second)
    fresh.fill(second)
    np.testing.assert_array_equal(used.buffer, fresh.buffer)


def test_a_batch_that_does_not_fit_is_refused():
    batch = _batch([100, 100, 100])
    with pytest.raises(ValueError, match="does not fit"):
        _layout(288).fill(batch)


# --- the parallel layout's fields -----------------------------------------------------------------

def _parallel(spec, seed=0):
    from .parallel_reference import pack_parallel

    return pack_parallel(spec, 1000, seed, low=5)


SPECS = [[(3, [5, 2, 7], 10)], [(1, [1], 0), (4, [20, 3], 30)],
         [(2, [6] * 5, 40), (5, [2, 30, 4], 9)], [(1, [40, 1], 2), (2, [3], 100), (1, [1] * 12, 0)]]


@pytest.mark.parametrize("spec", SPECS)
def test_parallel_fields_and_the_reach_of_each_row(spec):
    batch = _parallel(spec)
    lay = _layout(pick_cap(aligned_tokens(batch)))
    lay.fill(batch)
    assert batch.positions is not None and batch.option_ids is not None
    covered = np.zeros(lay.cap, dtype=bool)
    for r in range(batch.rows):
        a, b, at = int(batch.cu[r]), int(batch.cu[r + 1]), int(lay.rfirst[r])
        n = b - a
        np.testing.assert_array_equal(lay.pos[at:at + n], batch.positions[a:b])
        np.testing.assert_array_equal(lay.opt[at:at + n], batch.option_ids[a:b])
        behind = np.arange(n) - batch.positions[a:b]
        assert (behind >= 0).all()  # Laya's layout never runs ahead of the index
        assert (lay.shift[at:at + n] == behind.max()).all()
        # The reach is the slots' total less the last slot, never less than total - longest.
        prefix, slots, _ = spec[r]
        assert behind.max() == sum(slots) - slots[-1] >= 0
        covered[at:at + n] = True
    # Gap and padding slots: their index in their own row, no option, no reach.
    rest = ~covered
    np.testing.assert_array_equal(lay.pos[rest], (np.arange(lay.cap) - lay.lo)[rest])
    assert not lay.opt[rest].any() and not lay.shift[rest].any()


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("half_window", [0, 1, 4, 8, 64, None])
def test_the_widened_key_range_covers_every_key_the_mask_allows(spec, half_window):
    """kernels.cu's parallel key range (modelled by parallel_reference.key_ranges) visits every
    key a query may see."""
    from .parallel_reference import allowed, key_ranges

    batch = _parallel(spec)
    lay = _layout(pick_cap(aligned_tokens(batch)))
    lay.fill(batch)
    seen = allowed(lay.lo, lay.hi, lay.pos, lay.opt, half_window)
    assert not (seen & ~key_ranges(lay.lo, lay.hi, lay.shift, half_window)).any()


def test_a_reach_of_total_less_longest_slot_misses_keys():
    """Why the reach is the slots' total less the LAST slot: a short last option's tokens sit
    40 slots after the instruction they are 1 position id away from."""
    from .parallel_reference import allowed, key_ranges

    batch = _parallel([(1, [40, 1], 2)])
    lay = _layout(288)
    lay.fill(batch)
    assert lay.shift[0] == 40
    seen = allowed(lay.lo, lay.hi, lay.pos, lay.opt, 4)
    short = np.where(lay.shift > 0, 41 - 40, 0).astype(np.int32)
    assert (seen & ~key_ranges(lay.lo, lay.hi, short, 4)).any()


def test_a_sequential_fill_leaves_the_parallel_fields_and_uploads_less():
    from kime._cuda.layout import offsets, used_ints

    cap = 288
    assert used_ints(cap, False) == 7 * cap + 1 == offsets(cap)["pos"]
    assert buffer_ints(cap) == used_ints(cap, True) == offsets(cap)["shift"] + cap
    lay = _layout(cap)
    lay.fill(_batch([17, 1, 33]))
    assert (lay.buffer[used_ints(cap, False):] == -7).all()


@pytest.mark.parametrize("bad,match", [
    ({"positions": [[0, 1, 400]]}, "positions must lie in"),
    ({"positions": [[0, -1, 2]]}, "positions must lie in"),
    ({"option_ids": [[0, -2, 1]]}, "option_ids must be 0 or more"),
])
def test_a_parallel_batch_out_of_range_is_refused(bad, match):
    fields = {"positions": [[0, 1, 2]], "option_ids": [[0, 1, 1]]}
    fields.update(bad)
    batch = Batch.pack([[5, 6, 7]], [[1]], [0], **fields)
    with pytest.raises(ValueError, match=match):
        _layout(288).fill(batch)
