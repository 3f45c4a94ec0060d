"""Laya 0.4.15's reliability probes (`laya.hooks.OptionStabilityHook`, its issue #635): ask each
choice question again with its options reordered and renamed, and report how often the answer
survives as `reliability`, with an optional accept / verify / escalate decision.

The spec is `laya/hooks.py` from `make_variants` to the end of `OptionStabilityHook`: the variant
names and their order, the CRC32-seeded shuffles, the duplicate rule, the probes chosen by the
checkpoint's `option_layout`, every refusal and its message, and the `reliability` dict's keys,
order and rounding. A hook, not a pipeline feature: `on_predict_start` adds the variants to
`ctx.questions` under `<qid>::rel<i>`, so the call pipeline lays them out with the original
questions and runs them in the same shared forward pass; `on_predict_end` folds their answers
into `reliability` and removes them. Plans are kept per `run_id` under a lock, so one hook can
serve concurrent calls.
"""
from __future__ import annotations

import math
import numbers
import random
import string
import threading
import warnings
import zlib
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from .context import BaseHook, PredictContext

_SEP = "::rel"
"""Between a question id and its variant's number; refused inside a caller's question ids."""

ALL_VARIANTS = ("reversed", "shuffle1", "shuffle2", "shuffle3", "letters", "letters_reversed",
                "letters_shuffle")
"""Every variant name `variants=` may list (`shuffleN` exists for N up to `n_shuffles`)."""

VARIANT_PRESETS: Dict[str, Optional[Tuple[str, ...]]] = {
    "full": None,
    "fast": ("reversed", "letters_reversed"),
}
"""`variants=` presets: None keeps every variant."""

PROBES = ("reorder", "rename")
Variant = Tuple[str, List[Any], bool]
"""(name, option order, whether the options are renamed to letters)."""


def make_variants(labels: Sequence[Any], seed_key: str, n_shuffles: int = 3, relabel: bool = True,
                  include: Optional[Sequence[str]] = None,
                  reorder: bool = True) -> List[Variant]:
    """The meaning-preserving rewrites of one choice question's options, the original first.

    One `random.Random` seeded with the CRC32 of `seed_key` draws every shuffle in turn (the
    reorder shuffles, then the lettered one), so the same question and state always get the
    same variants. Letters need at most 26 options. `include` keeps only the named variants
    (the original always). A rewrite identical to an earlier one (same order, same renaming)
    is dropped: scoring the same row twice would count one answer as two agreeing probes.
    """
    original = list(labels)
    draw = random.Random(zlib.crc32(seed_key.encode("utf-8")))

    def shuffled() -> List[Any]:
        order = list(original)
        draw.shuffle(order)
        return order

    candidates: List[Variant] = [("original", original, False)]
    if reorder:
        candidates.append(("reversed", original[::-1], False))
        candidates += [("shuffle%d" % (i + 1), shuffled(), False) for i in range(n_shuffles)]
    if relabel and len(original) <= 26:
        candidates += [("letters", original, True), ("letters_reversed", original[::-1], True),
                       ("letters_shuffle", shuffled(), True)]
    if include is not None:
        wanted = set(include)
        candidates = [c for c in candidates if c[0] == "original" or c[0] in wanted]
    kept: List[Variant] = []
    seen = set()
    for name, order, renamed in candidates:
        if (tuple(order), renamed) not in seen:
            seen.add((tuple(order), renamed))
            kept.append((name, order, renamed))
    return kept


def decide_reliability(soft_stability: float, accept: Optional[float],
                       escalate: Optional[float] = None) -> Optional[str]:
    """'ACCEPT' at or above `accept`, 'ESCALATE' below `escalate`, else 'VERIFY'; None without
    an `accept` threshold (an uncalibrated signal decides nothing)."""
    if accept is None:
        return None
    if soft_stability >= accept:
        return "ACCEPT"
    if escalate is not None and soft_stability < escalate:
        return "ESCALATE"
    return "VERIFY"


def _is_unit_number(value: Any) -> bool:
    """A finite real in [0, 1]; NumPy scalars count, booleans (NumPy's too) do not."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        return False
    number: Any = value  # any Real compares with floats; `numbers.Real` does not say so
    return 0.0 <= number <= 1.0 and math.isfinite(number)


def calibrate_reliability(soft_scores: Sequence[float], correct: Sequence[bool],
                          target_accuracy: float = 0.90,
                          max_escalate_accuracy: float = 1 / 3) -> Tuple[float, float]:
    """(accept, escalate) thresholds from labelled examples' `soft_stability` scores.

    `accept` is the lowest observed score whose answers at or above it are `target_accuracy`
    accurate (1.01, accepting nothing, when none is); `escalate` the highest score below
    `accept` whose answers below it are at most `max_escalate_accuracy` accurate (else 0.0).
    Equal scores fall on the same side. Both lists must be sized, of equal nonzero length; the
    scores and targets finite reals in [0, 1] (not bools), the labels bools (NumPy's included):
    anything else is refused, never filtered. Plain floats come back, ready for JSON.
    """
    if len(soft_scores) != len(correct):
        raise ValueError("soft_scores and correct must have the same length")
    if len(soft_scores) == 0:
        raise ValueError("cannot calibrate reliability on empty scores/correct pairs")
    for name, value in (("target_accuracy", target_accuracy),
                        ("max_escalate_accuracy", max_escalate_accuracy)):
        if not _is_unit_number(value):
            raise ValueError("%s must be a finite number in [0, 1], got %r" % (name, value))
    for i, score in enumerate(soft_scores):
        if not _is_unit_number(score):
            raise ValueError("soft_scores[%d] must be a finite number in [0, 1], got %r"
                             % (i, score))
    for i, label in enumerate(correct):
        if not isinstance(label, (bool, np.bool_)):
            raise TypeError("correct[%d] must be a bool, got %r" % (i, label))
    pairs = list(zip(soft_scores, correct))
    cutoffs = sorted({score for score, _ in pairs})

    def accuracy(labels: List[Any]) -> Optional[float]:
        return sum(labels) / len(labels) if labels else None

    accept = 1.01
    for cut in cutoffs:
        above = accuracy([ok for score, ok in pairs if score >= cut])
        if above is not None and above >= target_accuracy:
            accept = cut
            break
    escalate = 0.0
    for cut in cutoffs:
        if cut >= accept:
            break
        below = accuracy([ok for score, ok in pairs if score < cut])
        if below is not None and below <= max_escalate_accuracy:
            escalate = cut
    return float(accept), float(escalate)


def _seed_of(state: Any) -> str:
    """A state as the text its shuffles are seeded from."""
    return state if isinstance(state, str) else repr(state)


def _has_semantic_description(val: Any) -> bool:
    """Whether an option's description says something (not None, empty or blank)."""
    if val is None or val == "":
        return False
    return not (isinstance(val, str) and not val.strip())


def _threshold(name: str, value: Any, top: float) -> Optional[float]:
    """`accept` / `escalate` as a float in [0, top], or None."""
    if value is None:
        return None
    if (isinstance(value, bool) or not isinstance(value, (int, float))
            or not math.isfinite(value) or not 0.0 <= value <= top):
        raise ValueError("%s must be a float in [0.0, %s], got %r" % (name, top, value))
    return float(value)


def _probes_arg(probes: Any) -> Optional[Tuple[str, ...]]:
    """`probes=` as the probes to run, or None for 'auto' (chosen by the layout)."""
    if probes is None:
        return None
    if isinstance(probes, str):
        if probes == "auto":
            return None
        if probes == "all":
            return PROBES
        if probes in PROBES:
            return (probes,)
        raise ValueError("unknown probe type %r; choose from 'auto', 'reorder', 'rename', 'all'"
                         % (probes,))
    if not isinstance(probes, (list, tuple, set)):
        raise TypeError("probes must be a string or sequence of probe names, got %s"
                        % type(probes).__name__)
    names = list(probes)
    if not names:
        raise ValueError("probes list must not be empty; choose from 'reorder', 'rename'")
    unknown = [p for p in names if p not in PROBES]
    if unknown:
        raise ValueError("unknown probe types %r; choose from 'reorder', 'rename'" % (unknown,))
    return tuple(dict.fromkeys(names))


def _count(name: str, value: Any, least: int, rule: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError("%s must be %s, got %r" % (name, rule, value))
    return value



def _variants_arg(variants: Any) -> Optional[List[str]]:
    """`variants=` as the variant names to keep, or None for all of them."""
    if variants is None:
        return None
    if isinstance(variants, str):
        if variants not in VARIANT_PRESETS:
            raise ValueError("unknown variants preset %r; use one of %s or a sequence from %s"
                             % (variants, sorted(VARIANT_PRESETS), list(ALL_VARIANTS)))
        preset = VARIANT_PRESETS[variants]
        return None if preset is None else list(preset)
    if not isinstance(variants, (list, tuple, set)):
        raise TypeError("variants must be a string preset or sequence of names, got %s"
                        % type(variants).__name__)
    names = list(variants)
    unknown = [n for n in names if n not in ALL_VARIANTS]
    if unknown:
        raise ValueError("unknown variant names %r; choose from %s" % (unknown, list(ALL_VARIANTS)))
    if not names:
        raise ValueError("variants list is empty: nothing to compare the original against")
    return names


Plan = Dict[str, Any]
"""One question's probes: `layout`, `variants` [(name, question id, shown -> caller label,
renamed)], the original first, and `probes_ran`."""


class OptionStabilityHook(BaseHook):
    """Laya's reliability signal: each choice question is also asked with its options reordered
    (`reversed`, `shuffle1..n_shuffles`) and renamed to letters (`letters`, `letters_reversed`,
    `letters_shuffle`), in the same forward pass, and every choice answer gains `reliability`:
    which probes ran, the share of variants that kept the answer (`stability`, and per probe),
    the mean probability the variants give it (`soft_stability`) and a `decision` against
    `accept` / `escalate` (required keywords: cutoffs depend on the domain; None for none).

    `probes` is 'auto' (None), 'reorder', 'rename', 'all' or a list of the two. 'auto' reads
    `option_layout` from `ctx.agent.config`: on a parallel checkpoint options do not see each
    other, so reordering agrees by construction and only renaming runs. Renaming needs at most
    `rename_max_options` options (and 26). `variants` is a preset ('full', 'fast') or names
    from `ALL_VARIANTS`; `seed` fixes the shuffles, else a single state's text seeds them (a
    batch uses 'batch'). A question id must not contain '::rel'.
    """

    def __init__(self, *, accept: Optional[float], escalate: Optional[float],
                 probes: Optional[Union[str, Sequence[str]]] = None, n_shuffles: int = 3,
                 relabel: bool = True, rename_max_options: int = 20,
                 variants: Union[str, Sequence[str], None] = "full",
                 seed: Optional[str] = None):
        self.probes = _probes_arg(probes)
        self.n_shuffles = _count("n_shuffles", n_shuffles, 0, "a non-negative integer")
        if not isinstance(relabel, bool):
            raise TypeError("relabel must be a bool, got %r" % (relabel,))
        self.relabel = relabel
        self.rename_max_options = _count("rename_max_options", rename_max_options, 2,
                                         "an integer >= 2")
        self.variants = variants
        self._include = self._resolve_variants(variants)
        self.accept = _threshold("accept", accept, 1.01)
        self.escalate = _threshold("escalate", escalate, 1.0)
        if self.accept is not None and self.escalate is not None and self.escalate > self.accept:
            raise ValueError("escalate (%r) must not be greater than accept (%r)"
                             % (escalate, accept))
        self.seed = None if seed is None else str(seed)
        self._plans: Dict[str, Dict[str, Plan]] = {}
        self._lock = threading.Lock()

    _resolve_variants = staticmethod(_variants_arg)

    @staticmethod
    def _detect_layout(ctx: PredictContext) -> str:
        """'parallel' or 'sequential', from the agent's `config["option_layout"]`; anything
        else there warns and reads as sequential, the layout of every Laya checkpoint."""
        config = getattr(getattr(ctx, "agent", None), "config", None)
        raw = config.get("option_layout") if isinstance(config, dict) else None
        if not isinstance(raw, str):
            return "sequential"
        layout = raw.strip().lower()
        if layout in ("parallel", "sequential"):
            return layout
        warnings.warn("kime: unknown option_layout %r in agent config; defaulting to "
                      "'sequential'" % (raw,), RuntimeWarning, stacklevel=2)
        return "sequential"

    @staticmethod
    def _variant_question(q: Dict[str, Any], order: List[Any], relabel: bool
                          ) -> Tuple[Dict[str, Any], Dict[Any, Any]]:
        """The question with its options in `order` (as letters when `relabel`), and the map
        from the options shown back to the caller's labels. A renamed option keeps its meaning
        as its description: its own, or its label when it has none (Laya's #1285)."""
        shown = list(string.ascii_uppercase[:len(order)]) if relabel else list(order)
        variant = dict(q)
        criteria = q.get("criteria")
        if isinstance(criteria, dict):
            variant["criteria"] = {
                s: (criteria[label] if not relabel or _has_semantic_description(criteria[label])
                    else label) for s, label in zip(shown, order)}
        elif isinstance(criteria, (list, tuple)):
            variant["criteria"] = dict(zip(shown, order)) if relabel else list(order)
        return variant, dict(zip(shown, order))

    def _probes_for(self, layout: str) -> set:
        if self.probes is not None:
            return set(self.probes)
        if layout == "parallel":
            return {"rename"} if self.relabel else set()
        return {"reorder", "rename"} if self.relabel else {"reorder"}

    def on_predict_start(self, ctx: PredictContext) -> None:
        """Add every choice question's variants to `ctx.questions` and keep the plan."""
        if not ctx.questions:
            return
        for qid in ctx.questions:
            if _SEP in qid:
                raise ValueError("question id %r must not contain %r" % (qid, _SEP))
        layout = self._detect_layout(ctx)
        probes = self._probes_for(layout)
        if self.seed is not None:
            base_seed = self.seed
        elif ctx.states and len(ctx.states) == 1:
            base_seed = _seed_of(ctx.states[0])
        else:
            base_seed = "batch"
        plans: Dict[str, Plan] = {}
        questions = dict(ctx.questions)
        for qid, q in ctx.questions.items():
            if not isinstance(q, dict) or q.get("type") != "choice":
                continue
            criteria = q.get("criteria")
            if not isinstance(criteria, (dict, list, tuple)):
                continue
            labels = list(criteria)
            alone = [("original", qid, {k: k for k in labels}, False)]
            plans[qid] = {"layout": layout, "variants": alone, "probes_ran": []}
            reorder = "reorder" in probes
            rename = "rename" in probes and len(labels) <= self.rename_max_options
            if len(labels) < 2 or not (reorder or rename):
                continue
            made = make_variants(labels, "%s|%s" % (base_seed, qid), self.n_shuffles,
                                 relabel=rename, include=self._include, reorder=reorder)
            ran = [probe for probe, renamed in (("reorder", False), ("rename", True))
                   if any(r == renamed for _, _, r in made[1:])]
            for i, (name, order, renamed) in enumerate(made[1:], 1):
                key = "%s%s%d" % (qid, _SEP, i)
                questions[key], back = self._variant_question(q, order, renamed)
                alone.append((name, key, back, renamed))
            plans[qid]["probes_ran"] = ran
        if plans:
            ctx.questions = questions
            with self._lock:
                self._plans[ctx.run_id] = plans

    def on_predict_end(self, ctx: PredictContext) -> None:
        """Fold the variants' answers into each choice answer's `reliability`, then remove
        them from the answers and from `usage`."""
        with self._lock:
            plans = self._plans.pop(ctx.run_id, None)
        if not plans or not ctx.results:
            return
        added = {key for plan in plans.values() for _, key, _, _ in plan["variants"][1:]}
        for result in ctx.results:
            answers = result.get("answers") if isinstance(result, dict) else None
            if not isinstance(answers, dict):
                continue
            for qid, plan in plans.items():
                answer = answers.get(qid)
                if (isinstance(answer, dict) and answer.get("type") == "choice"
                        and all(key in answers for _, key, _, _ in plan["variants"])):
                    answer["reliability"] = self._reliability(plan, answer, answers)
            for key in added:
                answers.pop(key, None)
            usage = result.get("usage")
            if isinstance(usage, dict):
                if isinstance(usage.get("truncated_questions"), list):
                    usage["truncated_questions"] = [q for q in usage["truncated_questions"]
                                                    if _SEP not in q]
                if isinstance(usage.get("options"), dict):
                    usage["options"] = {k: v for k, v in usage["options"].items()
                                        if _SEP not in k}

    def _reliability(self, plan: Plan, answer: Dict[str, Any], answers: Dict[Any, Any]
                     ) -> Dict[str, Any]:
        """Laya's `reliability` dict for one answer; its signals are None when nothing ran."""
        choice = answer.get("choice")
        seen = []
        for name, key, back, renamed in plan["variants"]:
            got = answers[key]
            probs = {back.get(k, k): v for k, v in (got.get("probabilities") or {}).items()}
            picked = got.get("choice")
            seen.append((name, back.get(picked, picked), probs, renamed))
        others = seen[1:]
        probed = bool(others and plan["probes_ran"])

        def kept(group: List[Any]) -> Optional[float]:
            return round(sum(c == choice for _, c, _, _ in group) / len(group), 4) \
                if probed and group else None

        soft = sum(p.get(choice, 0.0) for _, _, p, _ in seen) / len(seen) if probed else None
        return {
            "probes": list(plan["probes_ran"]) if probed else [],
            "option_layout": plan["layout"],
            "decision": (decide_reliability(soft, self.accept, self.escalate)
                         if soft is not None else None),
            "soft_stability": soft,
            "stability": kept(others),
            "rename_stability": kept([s for s in others if s[3]]),
            "reorder_stability": kept([s for s in others if not s[3]]),
            "n_variants": len(seen),
            "distinct_choices": sorted({c for _, c, _, _ in seen if c is not None}),
            "variant_choices": {name: c for name, c, _, _ in seen},
            "variant_support": {name: round(p.get(choice, 0.0), 4) for name, _, p, _ in seen},
        }

    def on_error(self, ctx: PredictContext) -> None:
        """Forget the failed call's plan."""
        with self._lock:
            self._plans.pop(ctx.run_id, None)


__all__ = ["ALL_VARIANTS", "OptionStabilityHook", "VARIANT_PRESETS", "calibrate_reliability",
           "decide_reliability", "make_variants"]
