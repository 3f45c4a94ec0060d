"""How an offline job's engine is chosen and sized, shared by `kime score`, `kime calibrate`
and the Ray actors (`kime.jobs.on_ray`), which all load the model through `load_agent`; and
`Remote`, what a job needs from an engine that answers its rows outside this process."""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Protocol, Tuple

from ..laya.agent import Agent, load
from .sink import ScoredRow, Skip
from .source import JobInputError, Source

Produced = Iterator[Tuple[List[ScoredRow], float]]
"""Completed chunks, each with the wall-clock time its first row was submitted."""
Logits = Iterator[Tuple[int, Any]]
"""(row number, its answers as [(question type, logits)], or its error as text), every row."""


class Remote(Protocol):
    """An engine that answers a job's rows elsewhere (`kime.jobs.on_ray`: actors on a Ray
    cluster). Each call joins the engine at once, before the job installs its signal handlers
    (`ray.init` installs its own), and returns the producer the job then drives with its stop
    event. `jobs.engines.remote` picks one for `--engine`; the jobs are handed it."""

    def score_chunks(self, opts: "EngineOptions", questions: Optional[Dict[Any, Any]],
                     source: Source, skip: Skip) -> Callable[[threading.Event], Produced]:
        """`kime score`: the producer of scored chunks, less the rows `skip` says are done."""
        ...

    def logits_producer(self, opts: "EngineOptions", questions: Optional[Dict[Any, Any]],
                        source: Source) -> Callable[[threading.Event], Logits]:
        """`kime calibrate`: the producer of every row's raw logits (or its error)."""
        ...


@dataclass
class EngineOptions:
    """Which engine answers and how it is sized. `threads` is per actor (0: all of a local
    machine's cores, or each Ray node's); `actors` is for Ray only (None: one per node)."""

    model: str
    engine: str = "local"
    precision: Optional[str] = None
    threads: int = 0
    actors: Optional[int] = None
    batch_size: int = 256
    calibration: Optional[str] = None
    ray_address: Optional[str] = None

    def check(self) -> None:
        if self.engine not in ("local", "ray"):
            raise JobInputError("--engine must be 'local' or 'ray', got %r" % self.engine)
        if self.batch_size < 1:
            raise JobInputError("--batch-size must be at least 1, got %d" % self.batch_size)
        if self.threads < 0:
            raise JobInputError("--threads-per-actor must be 0 (all cores) or more, got %d"
                                % self.threads)
        if self.actors is not None:
            if self.engine != "ray":
                raise JobInputError("--actors sizes a Ray run (--engine ray); a local run is one "
                                    "process: size it with --threads-per-actor")
            if self.actors < 1:
                raise JobInputError("--actors must be at least 1, got %d" % self.actors)


def load_agent(opts: EngineOptions, device: Optional[str] = None) -> Agent:
    """The agent a job answers with: the model at the job's precision, threads and calibration."""
    return load(opts.model, device=device, precision=opts.precision, threads=opts.threads,
                calibration=opts.calibration)
