"""The exception the integrations share: `LayaLowConfidenceError` (laya 0.4.15's `_errors`)."""
from __future__ import annotations

from typing import Any, Dict


class LayaLowConfidenceError(ValueError):
    """A routing or selection decision below the caller's confidence threshold.

    Raised only when asked for (`raise_on_low_confidence=True`, or no fallback to absorb it);
    carries the decision's `confidence`, the `threshold` it missed and the `raw_decision`.
    """

    def __init__(self, message: str, confidence: float, threshold: float,
                 raw_decision: Dict[str, Any]) -> None:
        super().__init__(message)
        self.confidence = confidence
        self.threshold = threshold
        self.raw_decision = raw_decision
