"""Rows -> results, packed into the engine's shared batches: what `kime score` runs on one
machine and what every Ray actor runs (`on_ray.Scorer`, public as `kime.ray.Scorer`).

A row's `result` is exactly what `kime.load(model).predict(state, questions)` returns, built
the way `predict` builds it: the same validated request, laid out by the engine (the state is
tokenized once and sliced for every question), run by the engine's scheduler, answered with the
agent's temperatures and binning map, and rounded by `kime.laya.wire`. What differs is only the
batching: a chunk of rows is laid out row by row -- so one bad row fails alone -- and all the
chunk's question rows go to the scheduler in one submission, which packs them into batches with
whatever else is queued. A row that does not lay out is handed to `predict` itself, so its error
is the one `predict` raises, word for word.

Submitting returns at once (`Pending`): the caller lays out the next chunk while the scheduler's
thread runs this one, since the forward pass releases the GIL.
"""
from __future__ import annotations

import json
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from ..answers import Response
from ..cache import LRU
from ..engine import Kime
from ..errors import InvalidRequest, KimeError, NonFiniteLogits, problem
from ..executor import RowOutput
from ..laya import wire
from ..laya.agent import Agent
from ..layout import Job
from ..request import Questions, Request, validated_questions
from .sink import ScoredRow
from .source import InputRow

_QUESTION_SETS = 256
"""Distinct per-row question sets kept validated (rows of one job usually share a few)."""


def error_body(exc: KimeError) -> Dict[str, Any]:
    """A failed row's `error`: the server's 422 body, `{"detail": str(exc), "problems": [...]}`,
    with one problem naming the error's type when it is not a validation error."""
    if isinstance(exc, InvalidRequest):
        return {"detail": str(exc), "problems": list(exc.problems)}
    return {"detail": str(exc), "problems": [problem([], str(exc),
                                                     "kime_error." + type(exc).__name__, None)]}


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


@dataclass
class Pending:
    """A chunk on its way through the engine: per row, its laid-out job, a finished result, or
    the error it gets; and the scheduler's future for the rows of every job."""

    rows: List[InputRow]
    outcomes: List[Union[Job, Dict[str, Any], KimeError]]
    future: "Future[Tuple[List[RowOutput], int]]"
    submitted: float = field(default_factory=time.time)


class RowScorer:
    """One agent answering input rows. `questions` are the job's (a row's own override them);
    they are validated here, so a job with a bad question set fails before its first row."""

    def __init__(self, agent: Agent, questions: Optional[Dict[Any, Any]] = None):
        self.agent = agent
        self.engine: Kime = agent.engine
        self.questions = questions
        self._checked = None if questions is None else validated_questions(questions)
        self._sets: LRU[Questions] = LRU(_QUESTION_SETS)

    def _checked_for(self, row: InputRow) -> Questions:
        """A row's questions (its own, else the job's), validated; raises as `predict` would."""
        if row.questions is None and self._checked is not None:
            return self._checked
        given = self.questions if row.questions is None else row.questions
        try:
            key: Optional[str] = _json(given) if isinstance(given, dict) else None
        except (TypeError, ValueError):
            key = None  # not JSON: validated below, where it is refused
        checked = self._sets.get(key) if key is not None else None
        if checked is None:
            checked = validated_questions(given)
            if key is not None:
                self._sets.put(key, checked)
        return checked

    def _predicted(self, row: InputRow) -> Union[Dict[str, Any], KimeError]:
        """What `predict` gives for a row that did not lay out: its error (or, were it ever to
        accept the row, its result)."""
        questions: Any = row.questions if row.questions is not None else self.questions
        try:
            return self.agent.predict(row.state, questions)
        except KimeError as exc:
            return exc

    def submit(self, rows: Sequence[InputRow]) -> Pending:
        """Lay out every row and hand all their question rows to the scheduler at once."""
        outcomes: List[Union[Job, Dict[str, Any], KimeError]] = []
        for row in rows:
            if row.problems:
                outcomes.append(InvalidRequest(row.problems))
                continue
            try:
                checked = self._checked_for(row)
                outcomes.append(self.engine.lay_out([Request(state=row.state,
                                                             questions=checked)])[0])
            except InvalidRequest:
                outcomes.append(self._predicted(row))
        jobs = [o for o in outcomes if isinstance(o, Job)]
        future = _submit(self.engine, jobs)
        return Pending(list(rows), outcomes, future)

    def responses(self, pending: Pending) -> List[Union[Response, Dict[str, Any], KimeError]]:
        """Each row's engine response (or finished result, or error), once its rows ran."""
        outputs, _ = pending.future.result()
        temps = self.agent.calibration.temperatures(None)
        out: List[Union[Response, Dict[str, Any], KimeError]] = []
        at = 0
        for outcome in pending.outcomes:
            if not isinstance(outcome, Job):
                out.append(outcome)
                continue
            mine = outputs[at:at + len(outcome.rows)]
            at += len(outcome.rows)
            try:
                out.append(self.engine.respond(outcome, mine, temps))
            except NonFiniteLogits as exc:
                out.append(exc)
        return out

    def finish(self, pending: Pending) -> List[ScoredRow]:
        """The chunk's output rows: `predict`'s result or the row's error, as JSON text."""
        conf = self.agent.calibration.answer_conf(None)
        scored = []
        for row, answer in zip(pending.rows, self.responses(pending)):
            if isinstance(answer, KimeError):
                scored.append(ScoredRow(row.id, error=_json(error_body(answer))))
            elif isinstance(answer, Response):
                scored.append(ScoredRow(row.id, result=_json(wire.result(answer, conf))))
            else:
                scored.append(ScoredRow(row.id, result=_json(answer)))
        return scored

    def score(self, rows: Sequence[InputRow]) -> List[ScoredRow]:
        """`submit` then `finish`: one chunk, start to end."""
        return self.finish(self.submit(rows))


def _submit(engine: Kime, jobs: List[Job]) -> "Future[Tuple[List[RowOutput], int]]":
    rows = [r for job in jobs for r in job.rows]
    if not rows:
        done: "Future[Tuple[List[RowOutput], int]]" = Future()
        done.set_result(([], 0))
        return done
    return engine.scheduler.submit(rows, [q.type_index for job in jobs for q in job.questions])


def chunked(rows: Iterator[InputRow], size: int) -> Iterator[List[InputRow]]:
    """Consecutive lists of `size` rows (the last may be shorter)."""
    chunk: List[InputRow] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def pipelined(scorer: RowScorer, chunks: Iterator[List[InputRow]], depth: int = 2,
              stop: Any = None) -> Iterator[Tuple[List[ScoredRow], float]]:
    """(output rows, submission time) per chunk, in order, with up to `depth` chunks in the
    engine at once, so laying out and writing overlap the forward pass. Once `stop` (an Event)
    is set no new chunk is read; those in flight still finish."""
    in_flight: List[Pending] = []
    for chunk in chunks:
        in_flight.append(scorer.submit(chunk))
        if len(in_flight) >= depth:
            done = in_flight.pop(0)
            yield scorer.finish(done), done.submitted
        if stop is not None and stop.is_set():
            break
    for done in in_flight:
        yield scorer.finish(done), done.submitted
