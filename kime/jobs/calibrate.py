"""`kime calibrate`: labelled rows -> the model's raw logits -> the calibration Laya fits -> a
calibration file in Laya's format, and a report of what it changed.

The labelled file is JSONL (or Parquet) in Laya's fine-tuning schema: per row a `state`,
`questions` (or the job's `--questions`), and per question either `expected` (the right answer:
a choice label, a score level or a fractional level, a noul boolean) or `gold`
(`{"probabilities": {...}}`, a target distribution). The logits come from the same machinery
`kime score` uses (one process, or a `Remote` such as actors on Ray), before any temperature,
in the caller's option order; the fit is `kime.jobs.fit` (Laya's `fit_temperature_map`,
`fit_binning_map` and `fit_abstention_thresholds`, without PyTorch).

The file written is Laya's version-2 calibration payload (`kime.laya.calibration`), which
`kime.load(model, calibration=...)` and `laya.load(model, calibration=...)` both load, plus the
fitted per-bucket `abstention_thresholds` under their own key (both loaders ignore it; pass it
as `min_confidence=`).
"""
from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, TextIO, Tuple

import numpy as np

from ..answers import Response
from ..laya.agent import Agent
from ..laya.calibration import Calibration
from ..render import Question, noul_labels
from ..request import validated_questions
from . import engines, fit
from .job import Stop, progress_bar
from .options import EngineOptions, Remote, load_agent
from .report import HOLDOUT, Fitted, format_report, plot_reliability, report
from .score import RowScorer, chunked
from .source import InputRow, JobInputError, Source

QuestionLogits = List[Tuple[int, np.ndarray]]
"""One row's answers as (question type, raw logits), in its questions' order."""


class FittedCalibration(Calibration):
    """A calibration fitted for an agent's checkpoint: Laya's payload with the fitted
    temperatures and binning map, plus `abstention_thresholds` when any bucket had enough
    records for one."""

    def __init__(self, agent: Agent, fitted: Fitted):
        super().__init__(agent.engine, model_id_or_path=agent.model_id_or_path,
                         subfolder=agent.subfolder)
        self.temperature = list(fitted.temperature)
        self.temperature_by_options = dict(fitted.temperature_by_options)
        self.binning_map = fitted.binning_map
        self.thresholds = fitted.thresholds

    def payload(self) -> Dict[str, Any]:
        out = super().payload()
        if self.thresholds:
            out["abstention_thresholds"] = dict(self.thresholds)
        return out


# --- labels -> targets --------------------------------------------------------------------------

_TRUE = ("true", "1", "yes")
_FALSE = ("false", "0", "no")


def target_from_expected(q: Question, value: Any) -> List[float]:
    """A one-hot (or, for a fractional score level, two-level) target in the caller's option
    order, read as Laya's fine-tuning reads `expected`; `ValueError` naming what failed."""
    if q.qtype == "choice":
        keys = q.labels_out()
        for i, key in enumerate(keys):
            if key == value or str(key) == str(value):
                return [1.0 if j == i else 0.0 for j in range(len(keys))]
        raise ValueError("expected answer %r is not one of the choices %r" % (value, keys))
    if q.qtype == "noul":
        false_label, true_label = noul_labels(q.labels)
        if isinstance(value, bool):
            return [0.0, 1.0] if value else [1.0, 0.0]
        if isinstance(value, (int, float)) and value in (0, 1):
            return [0.0, 1.0] if value == 1 else [1.0, 0.0]
        if isinstance(value, str):
            word = value.strip().lower()
            if word in _TRUE or value.strip() == true_label:
                return [0.0, 1.0]
            if word in _FALSE or value.strip() == false_label:
                return [1.0, 0.0]
        raise ValueError("expected answer %r is not a noul boolean (true/false, 1/0, yes/no)"
                         % (value,))
    levels = len(q.levels())
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError("expected score %r is not a level between 0 and %d" % (value, levels - 1))
    if not 0 <= value <= levels - 1:
        raise ValueError("expected score %r is out of bounds [0, %d]" % (value, levels - 1))
    low = int(math.floor(value))
    target = [0.0] * levels
    if value == low:
        target[low] = 1.0
    else:
        target[low], target[low + 1] = 1.0 - (value - low), value - low
    return target


def target_from_gold(q: Question, gold: Any) -> List[float]:
    """A target from `{"probabilities": {label: p}}` (choice labels, `false`/`true`, or level
    indices), normalised; all zeros reads as uniform, as Laya's fine-tuning reads it."""
    if not isinstance(gold, dict) or not isinstance(gold.get("probabilities"), dict):
        raise ValueError("gold must be {\"probabilities\": {option: p, ...}}, got %r" % (gold,))
    probs = gold["probabilities"]

    def get(key: Any, default: float) -> float:
        return float(probs.get(key, probs.get(str(key), default)))

    if q.qtype == "choice":
        target = [get(k, 0.0) for k in q.labels_out()]
    elif q.qtype == "noul":
        target = [get("false", 0.5), get("true", 0.5)]
    else:
        target = [get(str(i), 0.0) for i in range(len(q.levels()))]
    if any(not math.isfinite(v) or v < 0 for v in target):
        raise ValueError("gold probabilities must be finite and non-negative, got %r" % target)
    total = sum(target)
    return [v / total for v in target] if total > 0 else [1.0 / len(target)] * len(target)


@dataclass
class Collected:
    """The records a labelled file gave, and what was left out (reason -> count)."""

    records: List[fit.Record] = field(default_factory=list)
    skipped: Dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str, n: int = 1) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + n


def records_of(row: InputRow, questions: Sequence[Question], answers: QuestionLogits,
               into: Collected) -> None:
    """A row's labelled questions as records (unlabelled ones are not records, and not counted)."""
    expected = row.expected if isinstance(row.expected, dict) else {}
    gold = row.gold if isinstance(row.gold, dict) else {}
    for q, (qtype, logits) in zip(questions, answers):
        label = _lookup(gold, q.id)
        try:
            if label is not None:
                target = target_from_gold(q, label)
            else:
                label = _lookup(expected, q.id)
                if label is None:
                    continue
                target = target_from_expected(q, label)
            into.records.append(fit.make_record(qtype, logits, target))
        except ValueError:
            into.skip("invalid label")


def _lookup(labels: Dict[Any, Any], qid: Any) -> Any:
    """A question's label, keyed by its id (or its id as text, as JSON spells an int id)."""
    return labels.get(qid, labels.get(str(qid)))


# --- collecting logits ----------------------------------------------------------------------


def local_logits(agent: Agent, opts: EngineOptions, questions: Optional[Dict[Any, Any]],
                 rows: Iterator[InputRow], stop: Any) -> Iterator[Tuple[InputRow, Any]]:
    """(row, its answers' logits or the error it got), scored in this process."""
    scorer = RowScorer(agent, questions)
    for chunk in chunked(rows, opts.batch_size):
        if stop.is_set():
            return
        for row, answer in zip(chunk, scorer.responses(scorer.submit(chunk))):
            if isinstance(answer, Response):
                yield row, [(a.question.type_index, a.logits) for a in answer.answers.values()]
            else:
                yield row, answer


def collect(agent: Agent, opts: EngineOptions, questions: Optional[Dict[Any, Any]],
            source: Source, err: TextIO,
            remote: Optional[Remote] = None) -> Tuple[Collected, Optional[int]]:
    """Every labelled question's record, through the chosen engine (`agent` answers a local
    run; a `remote`'s workers load their own), and the signal that stopped it early, if any."""
    rows = {r.row: r for r in source.rows()}
    if remote is None:
        def produce(stop: Any) -> Iterator[Tuple[InputRow, Any]]:
            return local_logits(agent, opts, questions, iter(rows.values()), stop)
    else:
        by_number = remote.logits_producer(opts, questions, source)  # joins before the handlers

        def produce(stop: Any) -> Iterator[Tuple[InputRow, Any]]:
            return ((rows[n], got) for n, got in by_number(stop))
    with Stop(err, "kime calibrate") as stop:
        return _records(produce(stop.event), questions, len(rows), err), stop.signum


def _records(answered: Iterator[Tuple[InputRow, Any]], questions: Optional[Dict[Any, Any]],
             total: int, err: TextIO) -> Collected:
    got = Collected()
    checked: Dict[str, Any] = {}
    bar = progress_bar(total, err, "logits")
    try:
        for row, answers in answered:
            bar.update(1)
            if not isinstance(answers, list) or row.problems:
                got.skip("row not scored")
                continue
            given = row.questions if row.questions is not None else questions
            key = repr(given)
            if key not in checked:
                checked[key] = validated_questions(given).items
            records_of(row, checked[key], answers, got)
    finally:
        bar.close()
    return got


# --- the command ----------------------------------------------------------------------------


def calibrate_job(opts: EngineOptions, questions: Optional[Dict[Any, Any]], labeled: str,
                  output: str, plot: Optional[str] = None,
                  target_error: float = fit.TARGET_ERROR, out: TextIO = sys.stdout,
                  err: TextIO = sys.stderr, remote: Optional[Remote] = None) -> int:
    """Run `kime calibrate`; returns the exit status. `remote` scores the rows outside this
    process; None: the engine `opts.engine` names."""
    opts.check()
    if remote is None:
        remote = engines.remote(opts.engine)
    if questions is not None:
        validated_questions(questions)
    if not 0.0 <= target_error <= 1.0:
        raise JobInputError("--target-error must be in [0, 1], got %r" % target_error)
    source = Source(labeled)
    # A remote's workers answer on the CPU; this agent's calibration must be the one they load.
    agent = load_agent(opts, device="cpu" if remote is not None else None)
    got, signum = collect(agent, opts, questions, source, err, remote)
    if signum is not None:
        print("kime calibrate: stopped before every row was scored; nothing was written",
              file=err)
        return 128 + signum
    if not got.records:
        raise JobInputError("%s gave no labelled answers to fit on (each row needs 'expected' "
                            "or 'gold' for its questions)%s" % (labeled, _skipped(got)))
    records = got.records
    final = Fitted.on(records, target_error)
    temps = agent.calibration.temperatures(None)
    before = Fitted(list(temps.by_type), dict(temps.by_options), agent.binning_map, {}, {}, {})
    FittedCalibration(agent, final).save(output)
    print("kime calibrate: %d labelled answers from %s%s" % (len(records), labeled,
                                                            _skipped(got)), file=out)
    print(format_report(report(records, before, final, target_error)), file=out)
    print("(ECE before / after and the threshold's coverage: on %d%% of each bucket held out "
          "from a second fit; T after and the file: fitted on every answer)"
          % round(100 * HOLDOUT), file=out)
    for name, entry in sorted(final.clamped.items()):
        print("note: %s's fitted temperature %.4g is outside [0.5, 5]; %g is applied"
              % (name, entry["fitted"], entry["applied"]), file=out)
    small = sorted(k for k, n in final.n_by_bucket.items() if n < fit.MIN_BUCKET_N)
    if small:
        print("note: fewer than %d answers in %s: those use their type's temperature"
              % (fit.MIN_BUCKET_N, ", ".join(small)), file=out)
    if plot:
        plot_reliability(plot, records, before, target_error)
        print("wrote %s" % plot, file=out)
    print("wrote %s: temperature %s, %d bucket temperatures, %d binned buckets, %d thresholds"
          % (output, [round(t, 4) for t in final.temperature],
             len(final.temperature_by_options), len(final.binning_map or {}),
             len(final.thresholds)), file=out)
    return 0


def _skipped(got: Collected) -> str:
    if not got.skipped:
        return ""
    return " (left out: %s)" % ", ".join("%d %s" % (n, why)
                                         for why, n in sorted(got.skipped.items()))


__all__ = ["FittedCalibration", "calibrate_job", "target_from_expected", "target_from_gold"]
