"""Fitting a calibration from labelled logits, without PyTorch: what Laya 0.4.15's
`laya.calibrate` fits (`fit_temperature_map`, `fit_binning_map`, `fit_abstention_thresholds`)
and the ECE it reports (`laya.common.ece_score`), on the same records and with the same floors,
clamps and bucket keys, so the numbers agree with Laya's within 1e-3 (tests/goldens/fit.json).

A record is one answered question: its type, its raw option logits (before temperature, in the
caller's option order) and its target distribution over those options. Laya fits log T with
PyTorch's L-BFGS; the objective is so flat near its minimum that where the optimiser stops, not
where the exact minimum lies, decides the third decimal, so the same iteration runs here on
NumPy in float32 (`fit_unclamped_temperature`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from ..calibration import TEMP_MAX, TEMP_MIN, clamp_temperature, temp_bucket
from ..render import QTYPE_NAMES

MIN_BUCKET_N = 2000
"""Records a bucket needs for its own temperature; smaller buckets use their type's."""
MIN_TYPE_N = 10
"""Records a question type needs for its temperature; fewer leave it at 1.0."""
MIN_BINNING_BUCKET_N = 200
"""Records a bucket needs for a histogram-binning entry (each of its bins needs a sample)."""
MIN_ABSTAIN_BUCKET_N = 100
"""Records a bucket needs for an abstention threshold (one order statistic)."""
BINS = 15
"""Bins of the histogram map and of ECE, Laya's defaults."""
TARGET_ERROR = 0.10
"""The error an abstention threshold keeps among the answers it accepts, Laya's default."""
LOG_T_MARGIN = 10.0
"""How far (in e-folds) past [TEMP_MIN, TEMP_MAX] Laya's search for log T may go; the optimum is
confined to that band too, so an unbounded fit reports the same bound Laya's does."""

_LOG_LO = math.log(TEMP_MIN) - LOG_T_MARGIN
_LOG_HI = math.log(TEMP_MAX) + LOG_T_MARGIN


@dataclass(frozen=True)
class Record:
    """One labelled answer: question type (0 choice, 1 score, 2 noul), raw logits and the target
    distribution, both in the caller's option order."""

    qtype: int
    logits: np.ndarray
    target: np.ndarray

    @property
    def k(self) -> int:
        return int(self.logits.shape[0])

    @property
    def bucket(self) -> str:
        return temp_bucket(self.qtype, self.k)

    @property
    def label(self) -> int:
        """The option the target puts most mass on (the first, on a tie): what counts as right."""
        return int(np.argmax(self.target))


def make_record(qtype: int, logits: Union[Sequence[float], np.ndarray],
                target: Union[Sequence[float], np.ndarray]) -> Record:
    """A record from plain numbers, as float32 (the engine's logits are float32, and so are
    Laya's records), refusing what Laya's fitter refuses: mismatched lengths, non-finite values,
    and a target that is not a probability vector."""
    z = np.asarray(logits, dtype=np.float32).reshape(-1)
    t = np.asarray(target, dtype=np.float32).reshape(-1)
    if z.shape != t.shape or z.shape[0] < 1:
        raise ValueError("logits and target must be non-empty and of the same length, got %d "
                         "and %d" % (z.shape[0], t.shape[0]))
    if not (np.isfinite(z).all() and np.isfinite(t).all()):
        raise ValueError("logits and target must be finite")
    if (t < 0).any() or not np.isclose(float(t.sum()), 1.0, rtol=1e-5, atol=1e-6):
        raise ValueError("target must be a non-negative probability vector summing to 1")
    if isinstance(qtype, bool) or int(qtype) not in QTYPE_NAMES:
        raise ValueError("qtype must be 0 (choice), 1 (score) or 2 (noul), got %r" % (qtype,))
    return Record(int(qtype), z, t)


def softmax(z: np.ndarray, temperature: float) -> np.ndarray:
    """Softmax of z / T in float64, T floored at 1e-3 (Laya's fitter's `_softmax`)."""
    x = np.asarray(z, dtype=np.float64) / max(1e-3, float(temperature))
    x = x - x.max()
    p = np.exp(x)
    return p / p.sum()


def temperature_for(record: Record, temperature: Sequence[float],
                    temperature_by_options: Dict[str, float]) -> float:
    """The temperature a record's answer is scaled by: its bucket's, else its type's."""
    return float(temperature_by_options.get(record.bucket, temperature[record.qtype]))


# --- one temperature ----------------------------------------------------------------------------


def _width_groups(records: Sequence[Record]) -> List[Tuple[np.ndarray, np.ndarray]]:
    """(logits, targets) float32 matrices, one per option count: rows of different widths never
    share a softmax, so no padding value competes for probability mass."""
    groups: Dict[int, List[Record]] = {}
    for r in records:
        groups.setdefault(r.k, []).append(r)
    return [(np.stack([r.logits for r in rs]), np.stack([r.target for r in rs]))
            for _, rs in sorted(groups.items())]


def _objective(groups: List[Tuple[np.ndarray, np.ndarray]], log_t: np.float32, n: int
               ) -> Tuple[float, np.float32]:
    """The mean NLL of softmax(z / T) against the targets at log T (confined to the search band),
    and its derivative in log T (zero outside the band, where the confinement holds it), in
    float32 as Laya computes them: the stopping rule below compares these float32 losses."""
    inside = _LOG_LO <= float(log_t) <= _LOG_HI
    scale = np.exp(np.float32(min(max(float(log_t), _LOG_LO), _LOG_HI)), dtype=np.float32)
    loss = np.float32(0.0)
    slope = np.float32(0.0)
    for z, t in groups:
        u = z / scale
        top = u.max(axis=1, keepdims=True)
        log_p = u - (top + np.log(np.exp(u - top).sum(axis=1, keepdims=True)))
        loss += (-(t * log_p)).sum(axis=1).sum()
        slope += ((t - np.exp(log_p)) * u).sum()
    return float(loss / np.float32(n)), (slope / np.float32(n) if inside else np.float32(0.0))


def fit_unclamped_temperature(records: Sequence[Record]) -> float:
    """T by Laya's optimiser: PyTorch's L-BFGS on log T from 0 (T = 1), step 0.1, no line
    search, at most 100 iterations, stopping when the float32 loss stops changing (1e-9), the
    gradient falls under 1e-7, or the step under 1e-9.

    On one parameter L-BFGS's two-loop recursion reduces to a secant step, -g * s / y with the
    newest stored (s, y) pair (a pair is stored when y.s > 1e-10), so that is what runs here.
    Followed step for step rather than solved exactly because the objective is flat near its
    minimum: Laya stops where the float32 loss stops moving, up to a few 1e-3 from the exact
    optimum, and a calibration must give Laya's numbers."""
    groups = _width_groups(records)
    n = len(records)
    log_t = np.float32(0.0)
    loss, grad = _objective(groups, log_t, n)
    if abs(grad) <= 1e-7:
        return 1.0
    secant: Optional[float] = None  # s / y of the newest stored pair
    step = np.float32(0.0)
    prev_grad = grad
    for it in range(1, 101):
        if it > 1:
            y = grad - prev_grad
            if y * step > 1e-10:
                secant = float(step / y)
        direction = np.float32(-grad * (secant if secant is not None else 1.0))
        prev_grad, prev_loss = grad, loss
        lr = np.float32(min(1.0, 1.0 / abs(float(grad))) * 0.1) if it == 1 else np.float32(0.1)
        if grad * direction > -1e-9:
            break
        step = np.float32(direction * lr)
        log_t = np.float32(log_t + step)
        if it == 100:
            break
        loss, grad = _objective(groups, log_t, n)
        if abs(grad) <= 1e-7 or abs(step) <= 1e-9 or abs(loss - prev_loss) < 1e-9:
            break
    return math.exp(min(max(float(log_t), _LOG_LO), _LOG_HI))


@dataclass
class TemperatureFit:
    """What `fit_temperature_map` returns (Laya's keys): the per-type temperatures, the per-bucket
    ones for buckets with at least `MIN_BUCKET_N` records, the records per bucket, and every fit
    the clamp moved (`{name: {"fitted", "applied", "bound"}}`, by bucket or type name)."""

    temperature: List[float]
    temperature_by_options: Dict[str, float]
    n_by_bucket: Dict[str, int]
    temperature_clamped: Dict[str, Dict[str, Any]] = field(default_factory=dict)


def _clamped(raw: float, applied: float) -> Optional[Dict[str, Any]]:
    if not math.isfinite(raw) or TEMP_MIN <= raw <= TEMP_MAX:
        return None
    return {"fitted": raw, "applied": applied, "bound": "min" if raw < TEMP_MIN else "max"}


def fit_temperature_map(records: Iterable[Record]) -> TemperatureFit:
    """A temperature per question type (from `MIN_TYPE_N` records) and per option bucket (from
    `MIN_BUCKET_N`), each clamped to [TEMP_MIN, TEMP_MAX] as every temperature kime applies is."""
    recs = list(records)
    by_type: Dict[int, List[Record]] = {qt: [] for qt in QTYPE_NAMES}
    by_bucket: Dict[str, List[Record]] = {}
    for r in recs:
        by_type[r.qtype].append(r)
        by_bucket.setdefault(r.bucket, []).append(r)
    fit = TemperatureFit([1.0] * len(QTYPE_NAMES), {},
                         {key: len(rs) for key, rs in by_bucket.items()})
    for qt, rs in by_type.items():
        if len(rs) >= MIN_TYPE_N:
            raw = fit_unclamped_temperature(rs)
            fit.temperature[qt] = clamp_temperature(raw)
            entry = _clamped(raw, fit.temperature[qt])
            if entry:
                fit.temperature_clamped[QTYPE_NAMES[qt]] = entry
    for key, rs in by_bucket.items():
        if len(rs) >= MIN_BUCKET_N:
            raw = fit_unclamped_temperature(rs)
            fit.temperature_by_options[key] = clamp_temperature(raw)
            entry = _clamped(raw, fit.temperature_by_options[key])
            if entry:
                fit.temperature_clamped[key] = entry
    return fit


# --- confidences, binning, thresholds -----------------------------------------------------------


def confidences(records: Sequence[Record], temperature: Sequence[float],
                temperature_by_options: Dict[str, float]) -> Tuple[np.ndarray, np.ndarray]:
    """Each record's calibrated confidence (max p after its temperature) and whether its argmax
    is its label (1.0 or 0.0)."""
    conf = np.empty(len(records))
    correct = np.empty(len(records))
    for i, r in enumerate(records):
        p = softmax(r.logits, temperature_for(r, temperature, temperature_by_options))
        conf[i] = p.max()
        correct[i] = float(int(p.argmax()) == r.label)
    return conf, correct


def by_bucket(records: Sequence[Record]) -> Dict[str, List[int]]:
    """Record indices per bucket, in order of first appearance."""
    out: Dict[str, List[int]] = {}
    for i, r in enumerate(records):
        out.setdefault(r.bucket, []).append(i)
    return out


def fit_binning_map(records: Sequence[Record], temperature: Sequence[float],
                    temperature_by_options: Dict[str, float], bins: int = BINS,
                    min_bucket_n: int = MIN_BINNING_BUCKET_N) -> Dict[str, Dict[str, Any]]:
    """Per bucket (with at least `min_bucket_n` records): `bins` equal-width bins over the
    calibrated confidence, each mapped to the accuracy of the records in it, or to its centre
    when none fell there (so an unseen confidence moves by at most half a bin)."""
    recs = list(records)
    conf, correct = confidences(recs, temperature, temperature_by_options)
    out: Dict[str, Dict[str, Any]] = {}
    for key, idx in by_bucket(recs).items():
        if len(idx) < min_bucket_n:
            continue
        slot = np.clip((conf[idx] * bins).astype(int), 0, bins - 1)
        hits = correct[idx]
        values = [float(hits[slot == b].mean()) if (slot == b).any() else (b + 0.5) / bins
                  for b in range(bins)]
        out[key] = {"bins": bins, "values": values}
    return out


def apply_binning(conf: float, bucket: str, binning_map: Optional[Dict[str, Dict[str, Any]]]
                  ) -> float:
    """A confidence through its bucket's histogram (unchanged when the bucket has no entry)."""
    entry = (binning_map or {}).get(bucket)
    if not entry:
        return float(conf)
    n = int(entry["bins"])
    return float(entry["values"][min(n - 1, max(0, int(float(conf) * n)))])


def reported_confidences(records: Sequence[Record], temperature: Sequence[float],
                         temperature_by_options: Dict[str, float],
                         binning_map: Optional[Dict[str, Dict[str, Any]]] = None) -> np.ndarray:
    """What an answer reports as `answer_confidence` under a calibration: max p after the
    temperature, through the binning map when there is one."""
    conf, _ = confidences(records, temperature, temperature_by_options)
    return np.asarray([apply_binning(c, r.bucket, binning_map) for c, r in zip(conf, records)])


def select_threshold(conf: np.ndarray, correct: np.ndarray, target_error: float,
                     conservative: bool = True) -> float:
    """The lowest confidence cut whose accepted answers (conf >= cut) keep their error rate at or
    under `target_error`; 1.0 when no cut does. Every answer tied at a level is counted before
    the level is judged, because a cut accepts all of them. `conservative` counts one more
    error than seen, so a short lucky run does not pass."""
    order = np.argsort(-conf, kind="stable")
    conf, wrong = conf[order], 1.0 - correct[order]
    best = None
    accepted = errors = 0.0
    i, n = 0, len(conf)
    while i < n:
        level = conf[i]
        while i < n and conf[i] >= level:
            accepted += 1
            errors += wrong[i]
            i += 1
        rate = (errors + 1.0) / (accepted + 1.0) if conservative else errors / accepted
        if rate <= target_error:
            best = float(level)
    return 1.0 if best is None else min(1.0, max(0.0, best))


def fit_abstention_thresholds(records: Sequence[Record], temperature: Sequence[float],
                              temperature_by_options: Dict[str, float],
                              binning_map: Optional[Dict[str, Dict[str, Any]]] = None,
                              target_error: float = TARGET_ERROR,
                              min_bucket_n: int = MIN_ABSTAIN_BUCKET_N,
                              conservative: bool = True) -> Dict[str, float]:
    """A `min_confidence` per bucket (with at least `min_bucket_n` records) that keeps the error
    among accepted answers at `target_error`, on the confidence the runtime reports: after the
    temperature, through the binning map, rounded to 4 decimals as Laya's answers are."""
    if isinstance(target_error, bool) or not 0.0 <= float(target_error) <= 1.0:
        raise ValueError("target_error must be in [0.0, 1.0], got %r" % (target_error,))
    recs = list(records)
    reported = np.round(reported_confidences(recs, temperature, temperature_by_options,
                                             binning_map), 4)
    _, correct = confidences(recs, temperature, temperature_by_options)
    out: Dict[str, float] = {}
    for key, idx in by_bucket(recs).items():
        if len(idx) >= min_bucket_n:
            out[key] = select_threshold(reported[idx], correct[idx], float(target_error),
                                        conservative)
    return out


def ece(conf: np.ndarray, correct: np.ndarray, bins: int = BINS) -> float:
    """Expected calibration error over `bins` equal-width bins (the first closed at 0, the rest
    open below), NaN with nothing to measure: Laya's `ece_score`."""
    conf = np.asarray(conf, dtype=np.float64)
    correct = np.asarray(correct, dtype=np.float64)
    if conf.shape[0] == 0:
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    total = 0.0
    for i in range(bins):
        lo, hi = edges[i], edges[i + 1]
        sel = ((conf >= lo) if i == 0 else (conf > lo)) & (conf <= hi)
        if sel.any():
            total += sel.mean() * abs(conf[sel].mean() - correct[sel].mean())
    return float(total)
