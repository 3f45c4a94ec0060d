"""A `kime score` run from start to end: open the input and the output (resuming it), start the
engine -- this process's, or a `Remote` such as actors on a Ray cluster (`kime.jobs.on_ray`,
picked by `jobs.cli` and handed down) -- and write the chunks it answers as they complete, with
a progress bar, until the input ends or a signal asks to stop.

Signals follow uvicorn's pattern: the first SIGINT or SIGTERM asks the run to stop, so the
chunks in flight finish and are written and the process exits with 128 + the signal's number;
a second one exits at once. Either way every chunk written before is on disk (fsynced), so
`--resume` carries on from there. The closing line is always printed on stdout:
`scored N rows (E errors) in T s: R rows/s`, where T runs from the first row submitted to the
engine to the last row written, so loading the model and starting a cluster are not counted.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional, TextIO

from ..request import validated_questions
from . import engines
from .options import EngineOptions, Produced, Remote, load_agent
from .score import RowScorer, chunked, pipelined
from .sink import Sink, Skip, open_sink
from .source import Source


class Stop:
    """SIGINT / SIGTERM handling for a run (only from the main thread, where Python delivers
    signals): `event` is set by the first signal, a second exits at once."""

    def __init__(self, err: TextIO, what: str):
        self.event = threading.Event()
        self.signum: Optional[int] = None
        self._err = err
        self._what = what
        self._saved: Dict[int, Any] = {}

    def __enter__(self) -> "Stop":
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._saved[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.event.is_set():
            os._exit(128 + signum)  # the second signal: what was written is already on disk
        self.signum = signum
        self.event.set()
        print("\n%s: %s: finishing the chunks in flight, then stopping (again to stop now)"
              % (self._what, signal.Signals(signum).name), file=self._err, flush=True)

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)


@dataclass
class Summary:
    """What a run wrote."""

    rows: int = 0
    errors: int = 0
    seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.rows / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        return "scored %d rows (%d errors) in %.2f s: %.1f rows/s" % (self.rows, self.errors,
                                                                      self.seconds, self.rate)


def progress_bar(total: Optional[int], err: TextIO, desc: str) -> Any:
    """tqdm's bar (rows, rows/s, ETA) on a terminal; nothing when stderr is not one."""
    from tqdm import tqdm

    return tqdm(total=total, unit="rows", desc=desc, file=err, disable=None, dynamic_ncols=True,
                smoothing=0.05)


def write_all(produced: Produced, sink: Sink, total: Optional[int], err: TextIO) -> Summary:
    """Write every chunk as it comes, durably, counting rows and errors."""
    summary = Summary()
    first: Optional[float] = None
    bar = progress_bar(total, err, "score")
    try:
        for scored, started in produced:
            sink.write(scored)
            first = started if first is None else min(first, started)
            summary.rows += len(scored)
            summary.errors += sum(1 for r in scored if r.error is not None)
            summary.seconds = time.time() - first
            bar.update(len(scored))
    finally:
        bar.close()
    return summary


def _local(opts: EngineOptions, questions: Optional[Dict[Any, Any]], source: Source,
           skip: Skip) -> Callable[[threading.Event], Produced]:
    scorer = RowScorer(load_agent(opts), questions)

    def produce(stop: threading.Event) -> Produced:
        rows = (r for r in source.rows() if not skip(r.id))
        return pipelined(scorer, chunked(rows, opts.batch_size), stop=stop)

    return produce


def score_job(opts: EngineOptions, questions: Optional[Dict[Any, Any]], input_path: str,
              output_path: str, resume: bool = False, out: TextIO = sys.stdout,
              err: TextIO = sys.stderr, remote: Optional[Remote] = None) -> int:
    """Run `kime score`; returns the exit status (0, or 128 + a signal that stopped it).
    `remote` answers the rows outside this process; None: the engine `opts.engine` names."""
    opts.check()
    if remote is None:
        remote = engines.remote(opts.engine)
    if questions is not None:
        validated_questions(questions)  # a bad question set fails the job, not every row
    source = Source(input_path)
    sink = open_sink(output_path, resume, source.id_is_int())
    skip = Skip(frozenset(sink.done), sink.ids)
    if sink.done:
        print("kime score: resuming %s: %d rows already there are skipped"
              % (output_path, len(sink.done)), file=err)
    try:
        total = max(0, source.count() - len(sink.done))
        if remote is None:
            produce = _local(opts, questions, source, skip)
        else:  # joins the cluster now, before the handlers
            produce = remote.score_chunks(opts, questions, source, skip)
        with Stop(err, "kime score") as stop:
            summary = write_all(produce(stop.event), sink, total, err)
    finally:
        sink.close()
    print(summary.line(), file=out, flush=True)
    if stop.signum is not None:
        print("kime score: stopped by %s with every finished chunk written; run again with "
              "--resume to carry on" % signal.Signals(stop.signum).name, file=err)
        return 128 + stop.signum
    return 0
