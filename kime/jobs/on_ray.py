"""kime on Ray Data: `Scorer` maps batches of states to Laya's results in actors that each load
the model once, `score(ds, ...)` adds those columns to a Dataset, and `kime score --engine ray`
/ `kime calibrate --engine ray` run on a cluster through the same actors (`score_chunks` and
`logits_producer`, the `options.Remote` that `jobs.cli` hands the jobs). The only module that
imports ray (`pip install 'kime[ray]'`); `kime.ray` is its public face.

Ray does the distribution: a Dataset of the input's splits (`kime.jobs.source.Split`) is read
by Ray tasks on the workers, rows stream through a pool of actors (`map_batches` with an
`ActorPoolStrategy`), and the driver iterates the output batches and writes each as it comes,
so neither the input nor the output is ever held whole. Each actor asks Ray for `threads` CPUs
and runs the engine with that many threads, so actors x threads never exceed a node's cores;
the readers ask for none (they only parse JSON or Parquet, and would otherwise wait behind
actors that hold every core). Actors on one node share that node's Hugging Face download and
packed-weight cache (`kime convert`'s): both are written atomically (a temporary file renamed
into place), so actors loading together never see half a file.

An actor answers exactly what `kime.load(model).predict` answers (`kime.jobs.score.RowScorer`),
on the CPU: Ray's resources are CPUs here.
"""
from __future__ import annotations

import json
import logging
import math
import os
import pickle
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

try:
    import ray
    import ray.data
except ImportError as e:  # pragma: no cover - the extra is missing
    # name= keeps what is missing readable to callers that skip an absent extra
    raise ImportError("kime.ray needs Ray Data: pip install 'kime[ray]' (%s)" % e,
                      name=e.name) from e

from ..answers import Response
from ..errors import KimeError
from .options import EngineOptions, Produced, load_agent
from .score import RowScorer, error_body
from .sink import ScoredRow, Skip
from .source import InputRow, JobInputError, Source, Split, read_split, row_id

Batch = Dict[str, np.ndarray]


class Scorer:
    """A callable class for `Dataset.map_batches`: loads the model once per actor (on the CPU,
    with `threads` threads) and maps a batch with a `state` column (and optionally `id` and
    per-row `questions`, a dict or its JSON text) to the same batch plus `result` and `error`:
    `predict`'s result, or the row's error (`{"detail", "problems"}`), each as JSON text (their
    keys are question ids and labels, which differ between rows, so they are not columns).

    `output="logits"` gives `logits` instead of `result`: per question `[type, [raw logits]]`,
    before temperature, in the caller's option order (what `kime calibrate` fits on).

    A batch with an `input` column instead of `state` holds rows read by `kime score`'s Ray
    readers; it maps to `row`, `id` (JSON text), `result`/`logits`, `error` and `started` (when
    the actor took the batch, so a job's clock starts at its first row, not at cluster start)."""

    def __init__(self, model: str, questions: Optional[Dict[Any, Any]] = None, *,
                 threads: int = 0, precision: Optional[str] = None,
                 calibration: Optional[str] = None, output: str = "result"):
        if output not in ("result", "logits"):
            raise ValueError("output must be 'result' or 'logits', got %r" % (output,))
        opts = EngineOptions(model=model, precision=precision, threads=threads,
                             calibration=calibration)
        self.scorer = RowScorer(load_agent(opts, device="cpu"), questions)
        self.output = output

    def __call__(self, batch: Batch) -> Batch:
        started = time.time()
        if "input" in batch:
            rows = [pickle.loads(raw) for raw in batch["input"]]
            out = self._columns(rows)
            out["id"] = np.array([json.dumps(r.id, ensure_ascii=False) for r in rows],
                                 dtype=object)
            out["row"] = np.array([r.row for r in rows], dtype=np.int64)
            out["started"] = np.full(len(rows), started)
            return out
        return {**batch, **self._columns(_rows_of(batch))}

    def _columns(self, rows: List[InputRow]) -> Batch:
        if self.output == "result":
            scored = self.scorer.score(rows)
            return {"result": np.array([s.result for s in scored], dtype=object),
                    "error": np.array([s.error for s in scored], dtype=object)}
        logits: List[Optional[str]] = []
        errors: List[Optional[str]] = []
        for answer in self.scorer.responses(self.scorer.submit(rows)):
            if isinstance(answer, Response):
                logits.append(json.dumps([[a.question.type_index, [float(x) for x in a.logits]]
                                          for a in answer.answers.values()]))
                errors.append(None)
            else:
                logits.append(None)
                errors.append(json.dumps(error_body(answer) if isinstance(answer, KimeError)
                                         else {"detail": "answered without a forward pass",
                                               "problems": []}))
        return {"logits": np.array(logits, dtype=object), "error": np.array(errors, dtype=object)}


def _rows_of(batch: Batch) -> List[InputRow]:
    """A user's batch as input rows: `state`, optional `id` and `questions`."""
    if "state" not in batch:
        raise JobInputError("kime.ray.Scorer maps batches with a 'state' column; this one has "
                            "%s" % ", ".join(sorted(batch)))
    n = len(batch["state"])
    ids = batch.get("id")
    questions = batch.get("questions")
    rows = []
    for i in range(n):
        rid, problems = row_id(_plain(ids[i]) if ids is not None else None, i + 1)
        qs = _plain(questions[i]) if questions is not None else None
        if isinstance(qs, str):
            try:
                qs = json.loads(qs)
            except ValueError as e:
                problems = problems + [{"loc": ["questions"], "msg": "questions is not JSON: %s"
                                        % e, "type": "value_error.json", "input": qs[:200]}]
        rows.append(InputRow(i + 1, rid, _plain(batch["state"][i]), qs, problems or None))
    return rows


def _plain(value: Any) -> Any:
    """A NumPy scalar or array from a batch as the plain Python value `predict` is given (a
    null arrives as None or, in a block where the whole column is null, as NaN)."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


# --- sizing ---------------------------------------------------------------------------------


def connect(address: Optional[str] = None) -> bool:
    """Join the cluster at `address` (or $RAY_ADDRESS), start a local one sized to this machine,
    or use the one this process already joined. Returns whether this call started Ray."""
    if ray.is_initialized():
        return False
    ray.init(address=address, include_dashboard=False, logging_level=logging.WARNING,
             log_to_driver=True)
    return True


def plan(actors: Optional[int], threads: int) -> Tuple[int, int]:
    """(actors, threads per actor) for the cluster: by default one actor per node with threads =
    the node's CPUs (the smallest node's, so every actor gets as many); refused when the actors
    asked for do not fit the nodes at that many threads each, since they would share cores."""
    cpus = sorted(int(n["Resources"].get("CPU", 0)) for n in ray.nodes()
                  if n.get("Alive") and n["Resources"].get("CPU", 0) >= 1)
    if not cpus:
        raise JobInputError("the Ray cluster has no node with a CPU to run an actor on")
    if threads == 0:
        threads = cpus[0] if actors is None else max(1, min(cpus[-1], sum(cpus) // actors))
    fits = sum(c // threads for c in cpus)
    if actors is None:
        actors = fits
    if actors < 1 or actors > fits:
        raise JobInputError("%d actors x %d threads do not fit this cluster without sharing "
                            "cores (CPUs per node: %s); ask for fewer actors or threads"
                            % (actors, threads, ", ".join(map(str, cpus))))
    return actors, threads


def score(ds: "ray.data.Dataset", model: str, questions: Optional[Dict[Any, Any]] = None, *,
          actors: Optional[int] = None, threads_per_actor: int = 0, batch_size: int = 256,
          precision: Optional[str] = None, calibration: Optional[str] = None,
          output: str = "result") -> "ray.data.Dataset":
    """`ds` (with a `state` column) with `result` and `error` added by a pool of `Scorer` actors:
    by default one per node with threads = its CPUs (see `plan`). Lazy, like every Dataset."""
    connect()
    actors, threads = plan(actors, threads_per_actor)
    return ds.map_batches(Scorer, batch_size=batch_size, batch_format="numpy",
                          compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=threads,
                          fn_constructor_kwargs=dict(model=model, questions=questions,
                                                     threads=threads, precision=precision,
                                                     calibration=calibration, output=output))


# --- kime score / kime calibrate on Ray -----------------------------------------------------


_skips: Dict[str, Skip] = {}
"""The resumed ids a reader process has fetched, by object id: fetched once, not per split."""


def _read(batch: Batch, skip: List[Any]) -> Batch:
    """A reader task: each split's rows (less those already written), pickled for the actors."""
    done = None
    if skip:
        key = skip[0].hex()
        if key not in _skips:
            _skips.clear()
            _skips[key] = ray.get(skip[0])
        done = _skips[key]
    rows: List[InputRow] = []
    for i in range(len(batch["path"])):
        split = Split(str(batch["path"][i]), str(batch["kind"][i]), int(batch["start"][i]),
                      int(batch["size"][i]), int(batch["first_row"][i]))
        rows.extend(read_split(split, done))
    return {"input": np.array([pickle.dumps(r, protocol=pickle.HIGHEST_PROTOCOL) for r in rows],
                              dtype=object)}


def _dataset(opts: EngineOptions, questions: Optional[Dict[Any, Any]], source: Source,
             skip: Optional[Skip], output: str) -> "ray.data.Dataset":
    actors, threads = plan(opts.actors, opts.threads)
    # The job draws its own progress bar; Ray Data's bars and per-run INFO lines would interleave.
    ray.data.DataContext.get_current().enable_progress_bars = False
    logging.getLogger("ray.data").setLevel(logging.WARNING)
    # Several splits per actor, so a slow one does not hold the last rows back; at most 4 MiB each.
    per_split = max(64 << 10, min(4 << 20, os.path.getsize(source.files[0]) // (4 * actors)))
    splits = [dict(path=s.path, kind=s.kind, start=s.start, size=s.size, first_row=s.first_row)
              for s in source.splits(per_split)]
    skip_ref = [ray.put(skip)] if skip is not None and skip.done else []
    reader: Any = _read  # its `skip` comes from fn_kwargs, which Ray's signature cannot express
    reads = ray.data.from_items(splits, override_num_blocks=max(1, len(splits))).map_batches(
        reader, batch_size=1, batch_format="numpy", num_cpus=0, fn_kwargs={"skip": skip_ref})
    return reads.map_batches(Scorer, batch_size=opts.batch_size, batch_format="numpy",
                             compute=ray.data.ActorPoolStrategy(size=actors), num_cpus=threads,
                             fn_constructor_kwargs=dict(model=opts.model, questions=questions,
                                                        threads=threads,
                                                        precision=opts.precision,
                                                        calibration=opts.calibration,
                                                        output=output))


def _batches(opts: EngineOptions, questions: Optional[Dict[Any, Any]], source: Source,
             skip: Optional[Skip], output: str, started_here: bool,
             stop: threading.Event) -> Iterator[Batch]:
    try:
        ds = _dataset(opts, questions, source, skip, output)
        for batch in ds.iter_batches(batch_size=None, batch_format="numpy"):
            yield batch
            if stop.is_set():
                return
    except Exception:
        if stop.is_set():
            return  # a terminal's Ctrl-C reaches the actors too; what was written stands
        raise
    finally:
        if started_here:
            ray.shutdown()


def score_chunks(opts: EngineOptions, questions: Optional[Dict[Any, Any]], source: Source,
                 skip: Skip) -> Callable[[threading.Event], Produced]:
    """`kime score --engine ray`: joins or starts the cluster now (before the job installs its
    signal handlers, since `ray.init` installs its own), and returns the producer of chunks."""
    started_here = connect(opts.ray_address)

    def produce(stop: threading.Event) -> Produced:
        for batch in _batches(opts, questions, source, skip, "result", started_here, stop):
            rows = [ScoredRow(json.loads(i), _plain(r), _plain(e))
                    for i, r, e in zip(batch["id"], batch["result"], batch["error"])]
            yield rows, float(batch["started"].min())

    return produce


def logits_producer(opts: EngineOptions, questions: Optional[Dict[Any, Any]],
                    source: Source) -> Callable[[threading.Event], Iterator[Tuple[int, Any]]]:
    """`kime calibrate --engine ray`: joins or starts the cluster now, and returns the producer
    of (row number, its answers as (type, logits), or its error as text) for every row."""
    started_here = connect(opts.ray_address)

    def produce(stop: threading.Event) -> Iterator[Tuple[int, Any]]:
        for batch in _batches(opts, questions, source, None, "logits", started_here, stop):
            for row, logits, error in zip(batch["row"], batch["logits"], batch["error"]):
                logits = _plain(logits)
                if logits is None:
                    yield int(row), str(error)
                else:
                    yield int(row), [(int(t), np.asarray(z, dtype=np.float32))
                                     for t, z in json.loads(logits)]

    return produce


__all__ = ["Scorer", "connect", "logits_producer", "plan", "score", "score_chunks"]
