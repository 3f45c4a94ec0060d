"""What `kime calibrate` fitted and what it changed: the fitted calibration, its per-bucket
report and the reliability diagram.

Measured on the fitting data, a histogram map is calibrated by construction (each bin maps to
its own accuracy, so ECE is 0) and would report nothing. So the report holds out a fifth of each
bucket (seeded, so a rerun splits the same way), fits a second calibration on the rest, and
compares on the held-out answers the calibration the model had ("before") with that fit
("after"); the file written is fitted on every answer, as Laya fits it, and its temperatures
are the `T after` column.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import fit
from .source import JobInputError

HOLDOUT = 0.2
"""The share of each bucket the report holds out."""
SEED = 0


@dataclass
class Fitted:
    """A calibration: per-type and per-bucket temperatures, a binning map (maybe empty) and
    abstention thresholds, fitted on records the way Laya fits them."""

    temperature: List[float]
    temperature_by_options: Dict[str, float]
    binning_map: Optional[Dict[str, Dict[str, Any]]]
    thresholds: Dict[str, float]
    clamped: Dict[str, Dict[str, Any]]
    n_by_bucket: Dict[str, int]

    @classmethod
    def on(cls, records: Sequence[fit.Record], target_error: float = fit.TARGET_ERROR
           ) -> "Fitted":
        t = fit.fit_temperature_map(records)
        binning = fit.fit_binning_map(records, t.temperature, t.temperature_by_options)
        thresholds = fit.fit_abstention_thresholds(records, t.temperature,
                                                   t.temperature_by_options, binning,
                                                   target_error=target_error)
        return cls(t.temperature, t.temperature_by_options, binning, thresholds,
                   t.temperature_clamped, t.n_by_bucket)

    def confidences(self, records: Sequence[fit.Record]) -> np.ndarray:
        """`answer_confidence` under this calibration."""
        return fit.reported_confidences(records, self.temperature, self.temperature_by_options,
                                        self.binning_map)

    def temperature_of(self, record: fit.Record) -> float:
        return fit.temperature_for(record, self.temperature, self.temperature_by_options)


def holdout(records: Sequence[fit.Record], share: float = HOLDOUT, seed: int = SEED
            ) -> Tuple[List[int], List[int]]:
    """(fit indices, held-out indices): `share` of each bucket held out, drawn by a seeded
    permutation; a bucket too small to spare one keeps all of its records for fitting."""
    rng = np.random.RandomState(seed)
    fit_part: List[int] = []
    held: List[int] = []
    for _, idx in sorted(fit.by_bucket(records).items()):
        n_held = int(round(len(idx) * share))
        order = rng.permutation(len(idx))
        held.extend(idx[j] for j in order[:n_held])
        fit_part.extend(idx[j] for j in order[n_held:])
    return sorted(fit_part), sorted(held)


@dataclass
class BucketReport:
    """One bucket's (or `all`'s) numbers on the held-out answers."""

    bucket: str
    n: int
    held_out: int
    accuracy: float
    ece_before: float
    ece_after: float
    temperature_before: Optional[float] = None
    temperature_after: Optional[float] = None
    threshold: Optional[float] = None
    coverage: Optional[float] = None
    accepted_accuracy: Optional[float] = None


def report(records: Sequence[fit.Record], before: Fitted, final: Fitted,
           target_error: float = fit.TARGET_ERROR) -> List[BucketReport]:
    """Per bucket and over all: accuracy, and ECE (on `answer_confidence`, 15 bins) under the
    calibration the model had and under one fitted without the held-out answers, measured on
    them; the final fit's temperatures; and the held-out fit's threshold with its coverage and
    the accuracy of what it accepts. Calibration never changes an answer's argmax, so accuracy
    is one number."""
    fit_part, held = holdout(records)
    held_recs = [records[i] for i in held]
    after = Fitted.on([records[i] for i in fit_part], target_error)
    conf_before = before.confidences(held_recs)
    conf_after = after.confidences(held_recs)
    _, correct = fit.confidences(held_recs, after.temperature, after.temperature_by_options)
    groups = {"all": (list(range(len(held_recs))), len(records))}
    sizes = {key: len(idx) for key, idx in fit.by_bucket(records).items()}
    for key, idx in sorted(fit.by_bucket(held_recs).items()):
        groups[key] = (idx, sizes[key])
    for key in sorted(set(sizes) - set(groups)):
        groups[key] = ([], sizes[key])
    out = []
    for name, (idx, n) in groups.items():
        c, k = correct[idx], np.asarray(idx, dtype=int)
        r = BucketReport(name, n, len(idx), float(c.mean()) if len(idx) else math.nan,
                         fit.ece(conf_before[k], c), fit.ece(conf_after[k], c))
        if name != "all":
            sample = next(rec for rec in records if rec.bucket == name)
            r.temperature_before = before.temperature_of(sample)
            r.temperature_after = final.temperature_of(sample)
            if name in after.thresholds and len(idx):
                r.threshold = after.thresholds[name]
                accepted = np.round(conf_after[k], 4) >= r.threshold
                r.coverage = float(accepted.mean())
                if accepted.any():
                    r.accepted_accuracy = float(c[accepted].mean())
        out.append(r)
    return out


def _fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None or math.isnan(value):
        return "-"
    return "%.*f" % (digits, value)


def format_report(rows: Sequence[BucketReport]) -> str:
    """The report as an aligned table."""
    head = ("bucket", "n", "held out", "accuracy", "ECE before", "ECE after", "T before",
            "T after", "threshold", "coverage", "acc. kept")
    lines = [head] + [(r.bucket, str(r.n), str(r.held_out), _fmt(r.accuracy),
                       _fmt(r.ece_before, 4), _fmt(r.ece_after, 4), _fmt(r.temperature_before),
                       _fmt(r.temperature_after), _fmt(r.threshold, 4), _fmt(r.coverage),
                       _fmt(r.accepted_accuracy)) for r in rows]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) if i == 0 else cell.rjust(w)
                               for i, (cell, w) in enumerate(zip(line, widths)))
                     for line in lines)


def plot_reliability(path: str, records: Sequence[fit.Record], before: Fitted,
                     target_error: float = fit.TARGET_ERROR) -> None:
    """A reliability diagram per bucket and over all, on the held-out answers: accuracy against
    answer confidence in 15 bins, before and after, beside the diagonal a calibrated model
    follows."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise JobInputError("--plot needs matplotlib: pip install 'kime[plot]' (%s)" % e) from e
    fit_part, held = holdout(records)
    held_recs = [records[i] for i in held]
    after = Fitted.on([records[i] for i in fit_part], target_error)
    _, correct = fit.confidences(held_recs, after.temperature, after.temperature_by_options)
    curves = {"before": before.confidences(held_recs), "after": after.confidences(held_recs)}
    groups = {"all": list(range(len(held_recs)))}
    groups.update(sorted(fit.by_bucket(held_recs).items()))
    cols = min(3, len(groups))
    rows = (len(groups) + cols - 1) // cols
    figure, axes = plt.subplots(rows, cols, figsize=(4 * cols, 4 * rows), squeeze=False)
    edges = np.linspace(0.0, 1.0, fit.BINS + 1)
    for ax, (name, idx) in zip(axes.flat, groups.items()):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        for label, style in (("before", "--"), ("after", "-")):
            conf, hit = curves[label][idx], correct[idx]
            slot = np.clip(np.searchsorted(edges, conf, side="left") - 1, 0, fit.BINS - 1)
            used = [b for b in range(fit.BINS) if (slot == b).any()]
            ax.plot([conf[slot == b].mean() for b in used], [hit[slot == b].mean() for b in used],
                    style, marker="o", markersize=3,
                    label="%s (ECE %.3f)" % (label, fit.ece(conf, hit)))
        ax.set_title("%s (%d held out)" % (name, len(idx)))
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("answer confidence")
        ax.set_ylabel("accuracy")
        ax.legend(loc="upper left", fontsize=8)
    for ax in list(axes.flat)[len(groups):]:
        ax.axis("off")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
