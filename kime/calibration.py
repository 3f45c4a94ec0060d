"""A checkpoint's calibration: which temperature divides a question's logits.

`rl_agent_config.json` ships one temperature per question type and overrides per option-count
bucket (`type:2|3-5|6-10|11+`). Every value is clamped to [0.5, 5] and a value that is not a
number becomes 1.0, as Laya's `clamp_temperature` does; the checkpoint is told about each
replaced value once, at load, with a warning. The engine's probabilities use these, so they are
the model's, not a surface's: calibration files and per-language temperatures (Laya's surface)
build another `Temperatures` over the same rule.
"""
from __future__ import annotations

from typing import Any

from .errors import CheckpointError, warn_caller
from .render import QTYPE_NAMES

TEMP_MIN = 0.5
TEMP_MAX = 5.0


def clamp_temperature(t: Any, lo: float = TEMP_MIN, hi: float = TEMP_MAX) -> float:
    """A usable temperature: confined to [lo, hi], 1.0 for anything that is not a number."""
    if isinstance(t, bool):
        return 1.0
    try:
        t = float(t)
    except (TypeError, ValueError):
        return 1.0
    if t != t or t in (float("inf"), float("-inf")):
        return 1.0
    return min(hi, max(lo, t))


def temperature_rejected(raw: Any, applied: float) -> bool:
    """Whether `raw` is not the number that was applied (a bool is never a number here)."""
    if isinstance(raw, bool):
        return True
    try:
        value = float(raw)
    except (TypeError, ValueError):
        return True
    return value != applied


def temp_bucket(qtype: int, k: int) -> str:
    """The option-count bucket a question of `k` options falls in: `choice:3-5`, ..."""
    size = "2" if k <= 2 else "3-5" if k <= 5 else "6-10" if k <= 10 else "11+"
    return "%s:%s" % (QTYPE_NAMES[int(qtype)], size)


class Temperatures:
    """The checkpoint's calibration: one temperature per type, and overrides per option bucket."""

    def __init__(self, temperature: Any, by_options: Any, source: str = "checkpoint"):
        if not isinstance(temperature, (list, tuple)) or len(temperature) != 3:
            raise CheckpointError("Incompatible model: %s temperature must be a list of 3 floats, "
                                  "got %r" % (source, temperature))
        if by_options is None:
            by_options = {}
        if not isinstance(by_options, dict):
            raise CheckpointError("Incompatible model: %s temperature_by_options must be a mapping "
                                  "of bucket -> float, got %r" % (source, by_options))
        self.raw = list(temperature)
        self.raw_by_options = dict(by_options)
        self.by_type = [clamp_temperature(t) for t in temperature]
        self.by_options = {k: clamp_temperature(v) for k, v in by_options.items()}
        entries = [(k, v, self.by_options[k]) for k, v in by_options.items()]
        entries += [("temperature[%d]" % i, t, self.by_type[i]) for i, t in enumerate(temperature)]
        self.rejected = ["%s=%r -> %g" % (name, raw, applied) for name, raw, applied in entries
                         if temperature_rejected(raw, applied)]

    def warn(self) -> None:
        """Say which shipped values were replaced (Laya warns the same at load)."""
        if self.rejected:
            warn_caller(
                "kime: this checkpoint ships invalid temperatures or values outside [%g, %g]; "
                "using %s. Treat confidence from the affected entries as uncalibrated."
                % (TEMP_MIN, TEMP_MAX, ", ".join(self.rejected)))

    def for_question(self, qtype: int, k: int) -> float:
        return self.by_options.get(temp_bucket(qtype, k), self.by_type[qtype])

    def fingerprint(self) -> str:
        return repr((self.by_type, sorted(self.by_options.items())))
