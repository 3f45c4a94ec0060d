"""Record what Laya 0.4.15's calibration fitters return on fixed records: `tests/goldens/fit.json`.

Run only with the oracle interpreter (the real laya + torch; kime never imports them):

    .oracle/bin/python tools/goldens_fit.py

`kime calibrate` fits what `laya.calibrate` fits, without PyTorch (`kime/jobs/fit.py`); this file
is the reference it is tested against (tests/jobs/test_jobs_fit.py, within 1e-3). The records are
synthetic and seeded -- logits drawn per bucket, labels drawn from a softmax at a known
temperature, so every fit has a real optimum to find -- and they are written into the golden
itself, rounded to 4 decimals, so the test feeds kime exactly the numbers Laya was fed.

Each case: `records` as `[qtype, logits, target]` (target: the label's index for a one-hot
target, else the distribution), then Laya's outputs: `fit_temperature_map` (`temperature`,
`temperature_by_options`, `n_by_bucket`, `temperature_clamped` as bucket -> {applied, bound}),
`fit_binning_map` on those temperatures, `fit_abstention_thresholds` with and without that map
(and with `target_error=0.2, conservative=False`), and `ece_score` on the calibrated
confidences. `ece` holds separate `ece_score` cases on confidences placed at bin edges.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

from laya import __version__ as laya_version
from laya.calibrate import (fit_abstention_thresholds, fit_binning_map, fit_temperature_map,
                            temp_bucket)
from laya.common import ece_score

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "goldens" / "fit.json"


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max())
    return e / e.sum()


def draw(rng: np.random.RandomState, qtype: int, ks: List[int], n: int, spread: float,
         true_t: float, soft_every: int = 0) -> List[List[Any]]:
    """`n` records of `qtype` with option counts from `ks`: logits ~ N(0, spread), the label drawn
    from softmax(logits / true_t); every `soft_every`-th one gets a two-option soft target."""
    out: List[List[Any]] = []
    for i in range(n):
        k = int(ks[i % len(ks)])
        z = np.round(rng.normal(0.0, spread, k), 4)
        label = int(rng.choice(k, p=_softmax(z / true_t)))
        if soft_every and i % soft_every == 0 and k > 1:
            other = (label + 1) % k
            target = [0.0] * k
            target[label], target[other] = 0.75, 0.25
            out.append([qtype, z.tolist(), target])
        else:
            out.append([qtype, z.tolist(), label])
    return out


def as_laya(records: List[List[Any]]) -> List[Any]:
    recs = []
    for qtype, z, t in records:
        k = len(z)
        target = np.eye(k, dtype=np.float32)[t] if isinstance(t, int) else np.asarray(t, np.float32)
        recs.append((qtype, np.asarray(z, dtype=np.float32), target, k))
    return recs


def calibrated(recs: List[Any], temperature: List[float], by_options: Dict[str, float]):
    conf, correct = [], []
    for qt, z, t, k in recs:
        scale = by_options.get(temp_bucket(qt, k), temperature[qt])
        x = np.asarray(z, dtype=np.float64) / max(1e-3, scale)
        p = np.exp(x - x.max())
        p /= p.sum()
        conf.append(float(p.max()))
        correct.append(float(int(p.argmax()) == int(np.argmax(t))))
    return np.asarray(conf), np.asarray(correct)


def record_case(name: str, records: List[List[Any]]) -> Dict[str, Any]:
    recs = as_laya(records)
    fitted = fit_temperature_map(recs)
    t, tb = fitted["temperature"], fitted["temperature_by_options"]
    binning = fit_binning_map(recs, t, tb)
    conf, correct = calibrated(recs, t, tb)
    return {
        "name": name,
        "records": records,
        "temperature": [float(x) for x in t],
        "temperature_by_options": {k: float(v) for k, v in tb.items()},
        "n_by_bucket": fitted["n_by_bucket"],
        "temperature_clamped": {k: {"applied": float(v["applied"]), "bound": v["bound"]}
                                for k, v in fitted["temperature_clamped"].items()},
        "binning_map": binning,
        "thresholds": fit_abstention_thresholds(recs, t, tb),
        "thresholds_binned": fit_abstention_thresholds(recs, t, tb, binning_map=binning),
        "thresholds_loose": fit_abstention_thresholds(recs, t, tb, target_error=0.2,
                                                      conservative=False, min_bucket_n=5),
        "ece": ece_score(conf, correct),
    }


def cases() -> List[Dict[str, Any]]:
    rng = np.random.RandomState(13)
    mixed = (draw(rng, 0, [3, 4, 5], 2100, 2.0, 2.0)          # overconfident: T near 2
             + draw(rng, 2, [2], 2050, 1.0, 0.6)               # underconfident: T near 0.6
             + draw(rng, 1, [5, 4], 400, 1.5, 1.3, soft_every=5)
             + draw(rng, 0, [12, 14], 300, 1.5, 3.0)
             + draw(rng, 0, [7], 150, 1.0, 1.0)
             + draw(rng, 0, [2], 6, 1.0, 1.0))
    # Separable and always right: the optimum is T -> 0, clamped to the minimum.
    sharp = [[0, [3.0 if j == i % 3 else 0.0 for j in range(3)], i % 3] for i in range(40)]
    # Large logits and labels that ignore them: T -> infinity, clamped to the maximum.
    noisy = [[2, np.round(rng.normal(0.0, 8.0, 2), 4).tolist(), int(rng.randint(2))]
             for _ in range(60)]
    flat = [[1, [0.0, 0.0, 0.0], i % 3] for i in range(20)]
    single = [[0, [float(np.round(rng.normal(), 4))], 0] for _ in range(15)]
    few = draw(rng, 1, [3], 9, 1.0, 1.0)
    ties = [[2, [0.0, 1.0], 1] for _ in range(70)] + [[2, [0.0, 1.0], 0] for _ in range(40)] \
        + [[2, [0.0, 3.0], 1] for _ in range(30)]
    return [record_case("mixed", mixed), record_case("clamp_min", sharp),
            record_case("clamp_max", noisy), record_case("flat", flat),
            record_case("single_option", single), record_case("few", few),
            record_case("ties", ties)]


def ece_cases() -> List[Dict[str, Any]]:
    edges = [0.0, 1 / 15, 2 / 15, 0.5, 14 / 15, 1.0, 0.3333, 0.9999]
    rng = np.random.RandomState(5)
    conf = rng.uniform(0, 1, 300).round(4).tolist()
    correct = (rng.uniform(0, 1, 300) < np.asarray(conf)).astype(float).tolist()
    out = [{"conf": edges, "correct": [1, 0, 1, 1, 0, 1, 0, 1]},
           {"conf": conf, "correct": correct},
           {"conf": [], "correct": []}]
    for c in out:
        c["ece"] = ece_score(np.asarray(c["conf"], dtype=float),
                             np.asarray(c["correct"], dtype=float))
    return out


def main() -> int:
    payload = {"laya_version": laya_version, "cases": cases(), "ece": ece_cases()}
    text = json.dumps(payload, separators=(",", ":"), allow_nan=True)
    OUT.write_text(text + "\n", encoding="utf-8")
    for c in payload["cases"]:
        print("%-14s T=%s by_options=%s clamped=%s binning=%s thresholds=%s"
              % (c["name"], [round(x, 4) for x in c["temperature"]],
                 {k: round(v, 4) for k, v in c["temperature_by_options"].items()},
                 sorted(c["temperature_clamped"]), sorted(c["binning_map"]),
                 {k: round(v, 4) for k, v in c["thresholds_binned"].items()}))
    print("wrote %s (%d bytes)" % (OUT, len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
