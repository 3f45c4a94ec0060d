"""`laya.calibrate`'s fitters and `laya.common.ece_score` under Laya's names, signatures,
results and refusals, over kime's NumPy fitters (`kime.jobs.fit`), so `import kime as laya;
laya.fit_temperature_map(records)` runs without torch.

A record is Laya's tuple `(qtype, logits, target[, k])`: logits and target one-dimensional
numeric vectors of one length, `k` (default: that length) the options that count, the target a
probability vector over them. Each record is checked as Laya checks it, with Laya's message; a
refusal is an `InvalidRequest` (a `ValueError`) whose problem names the record and the field.
Where Laya would fail with a raw `TypeError` or `AttributeError` from deep inside (records that
are not iterable, temperatures that are not numbers), kime refuses the argument by name instead.
"""
from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..calibration import TEMP_MAX, TEMP_MIN, clamp_temperature
from ..errors import InvalidArgument, InvalidRequest, problem
from ..laya.calibration import apply_binning_map
from ..render import QTYPE_NAMES
from . import fit
from .fit import BINS, MIN_ABSTAIN_BUCKET_N, MIN_BINNING_BUCKET_N, MIN_BUCKET_N, TARGET_ERROR

ECE_HOLDOUT_FRAC = 0.2
"""The share of each bucket `fit_temperature_map(compute_ece=True)` holds out to score ECE on."""

_K_RANGE = "k must be an integer between 1 and the vector length"


def _refused(loc: List[Any], msg: str, value: Any = None) -> InvalidRequest:
    return InvalidRequest([problem(loc, msg, "value_error", value)])


def _count(name: str, value: Any) -> int:
    """A count parameter: an integer >= 1 (not a bool), as a Python int."""
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise _refused([name], "%s must be a positive integer, got %r" % (name, value), value)
    return int(value)


def _vector(loc: List[Any], name: str, value: Any) -> np.ndarray:
    """A one-dimensional, finite, numeric (not bool) vector as float32."""
    msg = "%s must be a one-dimensional numeric vector" % name
    try:
        array = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise _refused(loc + [name], msg) from None
    if array.ndim != 1 or array.dtype.kind not in "iuf":
        raise _refused(loc + [name], msg)
    with np.errstate(over="ignore", invalid="ignore"):
        array = array.astype(np.float32)
    if not np.isfinite(array).all():
        raise _refused(loc + [name], "%s must contain only finite values" % name)
    return array


def _pair(loc: List[Any], logits: Any, target: Any, k: Any = None
          ) -> Tuple[np.ndarray, np.ndarray]:
    """(logits, target) checked in Laya's order and cut to their first `k` entries."""
    z = _vector(loc, "logits", logits)
    t = _vector(loc, "target", target)
    if len(z) != len(t):
        raise _refused(loc, "logits and target must have the same length")
    if k is None:
        k = len(z)
    if isinstance(k, bool) or not isinstance(k, Integral) or not 1 <= int(k) <= len(z):
        raise _refused(loc + ["k"], _K_RANGE, k)
    z, t = z[:int(k)], t[:int(k)]
    if (t < 0).any() or not np.isclose(t.sum(), 1.0, rtol=1e-5, atol=1e-6):
        raise _refused(loc + ["target"],
                       "target must be a nonnegative probability vector summing to 1")
    return z, t


def _iterate(name: str, items: Any) -> Iterable[Any]:
    if isinstance(items, (str, bytes, Mapping)) or not hasattr(items, "__iter__"):
        raise InvalidArgument([problem([name], "%s must be an iterable of %s, got %s" % (
            name, "(qtype, logits, target[, k]) tuples" if name == "records"
            else "(logits, target) pairs", type(items).__name__), "type_error", None)])
    return items


def records_from(records: Any) -> List[fit.Record]:
    """Laya's `(qtype, logits, target[, k])` tuples as kime's fit records, each checked."""
    out: List[fit.Record] = []
    for i, rec in enumerate(_iterate("records", records)):
        loc: List[Any] = ["records", i]
        if not isinstance(rec, (list, tuple)) or len(rec) not in (3, 4):
            raise _refused(loc, "record must be (qtype, logits, target[, k])")
        qtype, logits, target = rec[0], rec[1], rec[2]
        k = rec[3] if len(rec) == 4 else None
        if len(rec) == 4 and k is None:
            raise _refused(loc + ["k"], _K_RANGE)
        if (isinstance(qtype, bool) or not isinstance(qtype, Integral)
                or not 0 <= int(qtype) < len(QTYPE_NAMES)):
            raise _refused(loc + ["qtype"], "qtype must be an integer between 0 and %d"
                           % (len(QTYPE_NAMES) - 1), qtype)
        z, t = _pair(loc, logits, target, k)
        out.append(fit.Record(int(qtype), z, t))
    return out


def _calibration(recs: Sequence[fit.Record], temperature: Any, temperature_by_options: Any
                 ) -> Tuple[List[float], Dict[str, float]]:
    """The temperatures records are scaled by: three numbers and a bucket -> number map (only
    read when there are records, as in Laya)."""
    if not recs:
        return [1.0] * len(QTYPE_NAMES), {}
    if (isinstance(temperature, (str, bytes, Mapping)) or not hasattr(temperature, "__len__")
            or len(temperature) != len(QTYPE_NAMES)
            or not all(isinstance(x, Real) for x in temperature)):
        raise InvalidArgument([problem(["temperature"], "temperature must be 3 numbers (choice, "
                                       "score, noul), got %r" % (temperature,), "type_error",
                                       None)])
    if (not isinstance(temperature_by_options, Mapping)
            or not all(isinstance(v, Real) for v in temperature_by_options.values())):
        raise InvalidArgument([problem(["temperature_by_options"], "temperature_by_options must "
                                       "be a dict of bucket -> number, got %r"
                                       % (temperature_by_options,), "type_error", None)])
    return [float(x) for x in temperature], {str(k): float(v)
                                             for k, v in temperature_by_options.items()}


def fit_one_temperature(pairs: Sequence[Any], min_n: Optional[int] = None) -> float:
    """One temperature for `(logits, target)` pairs by Laya's optimiser (NLL of softmax(z / T),
    L-BFGS on log T), clamped to [TEMP_MIN, TEMP_MAX]; 1.0 with fewer than `min_n` pairs
    (default `MIN_BUCKET_N`, the per-bucket floor)."""
    if min_n is None:
        min_n = MIN_BUCKET_N
    if isinstance(min_n, bool) or not isinstance(min_n, Integral) or min_n < 1:
        raise _refused(["min_n"], "min_n must be a positive integer", min_n)
    recs: List[fit.Record] = []
    for i, pair in enumerate(_iterate("pairs", pairs)):
        try:
            logits, target = pair
        except (TypeError, ValueError):
            raise _refused(["pairs", i], "pair must be (logits, target)") from None
        z, t = _pair(["pairs", i], logits, target)
        recs.append(fit.Record(0, z, t))
    if len(recs) < min_n:
        return 1.0
    return clamp_temperature(fit.fit_unclamped_temperature(recs), TEMP_MIN, TEMP_MAX)


def ece_holdout(recs: Sequence[fit.Record], seed: Optional[int]
             ) -> Tuple[List[fit.Record], List[fit.Record], List[str]]:
    """(fit records, held-out records, buckets not split): `ECE_HOLDOUT_FRAC` of each bucket
    held out by a seeded permutation, in bucket-name order; a bucket whose fitting side would
    fall under `MIN_BUCKET_N` is fitted whole and named instead."""
    rng = np.random.RandomState(seed)
    fit_idx: List[int] = []
    held_idx: List[int] = []
    excluded: List[str] = []
    for key, idx in sorted(fit.by_bucket(recs).items()):
        n_held = int(round(len(idx) * ECE_HOLDOUT_FRAC))
        if len(idx) - n_held < MIN_BUCKET_N:
            fit_idx.extend(idx)
            excluded.append(key)
            continue
        order = rng.permutation(len(idx))
        held_idx.extend(idx[int(j)] for j in order[:n_held])
        fit_idx.extend(idx[int(j)] for j in order[n_held:])
    return ([recs[i] for i in sorted(fit_idx)], [recs[i] for i in sorted(held_idx)], excluded)


def ece_report(held: Sequence[fit.Record], temperature: List[float],
                temperature_by_options: Dict[str, float]) -> Dict[str, Any]:
    """ECE on the held-out records before (T = 1) and after these temperatures."""
    before = fit.confidences(held, [1.0] * len(QTYPE_NAMES), {})
    after = fit.confidences(held, temperature, temperature_by_options)
    return {"ece_before": fit.ece(*before), "ece_after": fit.ece(*after)}


def fit_temperature_map(records: Iterable[Any], compute_ece: bool = False, seed: int = 0
                        ) -> Dict[str, Any]:
    """Laya's calibration fit: a temperature per question type (from `MIN_TYPE_N` records) and
    per option bucket (from `MIN_BUCKET_N`), clamped, with `n_by_bucket` (every record counted)
    and `temperature_clamped` (each fit the clamp moved: `fitted`, `applied`, `bound`).

    `compute_ece=True` fits on all but a seeded, per-bucket `ECE_HOLDOUT_FRAC` of the records
    and adds a `report` of the ECE before and after on the held-out ones (`n`, `n_eval`,
    `buckets_excluded_from_eval`); `seed` is None or an integer in [0, 2**32-1]."""
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, Integral)
                             or not 0 <= seed < 2 ** 32):
        raise _refused(["seed"], "seed must be None or an integer in [0, 2**32-1], got %r"
                       % (seed,), seed)
    recs = records_from(records)
    n_by_bucket = {key: len(idx) for key, idx in fit.by_bucket(recs).items()}
    fit_recs, held, excluded = ece_holdout(recs, seed) if compute_ece else (recs, [], [])
    fitted = fit.fit_temperature_map(fit_recs)
    out: Dict[str, Any] = {
        "temperature": [float(x) for x in fitted.temperature],
        "temperature_by_options": dict(fitted.temperature_by_options),
        "n_by_bucket": n_by_bucket,
        "temperature_clamped": dict(fitted.temperature_clamped),
    }
    if compute_ece:
        report = ece_report(held, out["temperature"], out["temperature_by_options"])
        report.update(n=float(len(recs)), n_eval=float(len(held)),
                      buckets_excluded_from_eval=excluded)
        out["report"] = report
    return out


fit_temperatures = fit_temperature_map
"""Laya's other name for `fit_temperature_map` (the same function)."""


def fit_binning_map(records: Iterable[Any], temperature: Sequence[float],
                    temperature_by_options: Dict[str, float], *, bins: int = BINS,
                    min_bucket_n: int = MIN_BINNING_BUCKET_N) -> Dict[str, Dict[str, Any]]:
    """A histogram-binning map per bucket with at least `min_bucket_n` records: `bins`
    equal-width bins of the calibrated confidence (after these temperatures), each mapped to the
    accuracy in it, or to its centre when empty (`{bucket: {"bins", "values"}}`)."""
    bins = _count("bins", bins)
    min_bucket_n = _count("min_bucket_n", min_bucket_n)
    recs = records_from(records)
    t, tb = _calibration(recs, temperature, temperature_by_options)
    return fit.fit_binning_map(recs, t, tb, bins=bins, min_bucket_n=min_bucket_n)


def fit_abstention_thresholds(records: Iterable[Any], temperature: Sequence[float],
                              temperature_by_options: Dict[str, float], *,
                              binning_map: Optional[Dict[str, Dict[str, Any]]] = None,
                              target_error: float = TARGET_ERROR,
                              min_bucket_n: int = MIN_ABSTAIN_BUCKET_N,
                              conservative: bool = True) -> Dict[str, float]:
    """A `min_confidence` map: per bucket with at least `min_bucket_n` records, the lowest
    confidence cut whose accepted answers keep their error at `target_error`, on the confidence
    the runtime reports (temperature, then `binning_map`, rounded to 4 decimals); 1.0 where no
    cut does. Smaller buckets are left out, so too few records give `{}`."""
    bad_error = "target_error must be in [0.0, 1.0], got %r" % (target_error,)
    if isinstance(target_error, bool) or not isinstance(target_error, Real):
        raise InvalidArgument([problem(["target_error"], bad_error, "type_error", None)])
    if not 0.0 <= target_error <= 1.0:
        raise _refused(["target_error"], bad_error)
    min_bucket_n = _count("min_bucket_n", min_bucket_n)
    recs = records_from(records)
    t, tb = _calibration(recs, temperature, temperature_by_options)
    return fit.fit_abstention_thresholds(recs, t, tb, binning_map or None,
                                         target_error=float(target_error),
                                         min_bucket_n=min_bucket_n, conservative=conservative)


def ece_score(conf: Any, correct: Any, bins: int = BINS) -> float:
    """Expected calibration error of confidences against 0/1 correctness over `bins`
    equal-width bins (an integer of at least 1); NaN when there is nothing to score."""
    if isinstance(bins, bool) or not isinstance(bins, Integral) or bins < 1:
        raise _refused(["bins"], "bins must be an integer of at least 1, got %r" % (bins,), None)
    try:
        c, y = np.asarray(conf, dtype=np.float64), np.asarray(correct, dtype=np.float64)
    except (TypeError, ValueError):
        raise _refused(["conf"], "conf and correct must be numeric vectors") from None
    if c.ndim != 1 or c.shape != y.shape:
        raise _refused(["correct"], "conf and correct must be vectors of one length, got %s "
                       "and %s" % (c.shape, y.shape))
    return fit.ece(c, y, int(bins)) if len(c) else math.nan


__all__ = ["apply_binning_map", "ece_holdout", "ece_report", "ece_score",
           "fit_abstention_thresholds", "fit_binning_map", "fit_one_temperature",
           "fit_temperature_map", "fit_temperatures", "records_from"]
