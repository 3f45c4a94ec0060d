"""`laya.confidence` at kime's path (`from kime.confidence import check_min_confidence`): the
`min_confidence` gate and its helpers, from `kime.laya.confidence`."""
from .laya.confidence import (BUCKET_QTYPES, BUCKET_SIZES, DEFAULT_BUCKET_KEY, GATE_ABSTAINED,
                              GATE_PASSED, GATE_STATES, GATE_UNEVALUATED, answer_confidence_value,
                              apply_confidence_gate, bucket_keys, check_min_confidence,
                              check_min_confidence_map, flag_low_confidence, jev_confidence,
                              resolve_min_confidence)

__all__ = ["BUCKET_QTYPES", "BUCKET_SIZES", "DEFAULT_BUCKET_KEY", "GATE_ABSTAINED", "GATE_PASSED",
           "GATE_STATES", "GATE_UNEVALUATED", "answer_confidence_value", "apply_confidence_gate",
           "bucket_keys", "check_min_confidence", "check_min_confidence_map",
           "flag_low_confidence", "jev_confidence", "resolve_min_confidence"]
