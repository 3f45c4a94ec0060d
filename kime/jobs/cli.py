"""`kime score` and `kime calibrate`: their flags, and the handlers `kime.cli` runs.

`kime.cli` adds these with `add_commands(sub)`; what a handler raises is mapped to an exit code
there (a bad input, output or flag is a `JobInputError`, exit 2). The handlers pick the engine
`--engine` names (`engines.remote`: this process, or Ray's actors) and hand it to the job.
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any, Dict, Optional

from .source import JobInputError


def _questions(path: Optional[str]) -> Optional[Dict[Any, Any]]:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            questions = json.load(f)
    except OSError as e:
        raise JobInputError("cannot read --questions %s: %s" % (path, e.strerror)) from e
    except ValueError as e:
        raise JobInputError("--questions %s is not JSON: %s" % (path, e)) from e
    if not isinstance(questions, dict):
        raise JobInputError("--questions %s must hold an object of question id -> question, "
                            "got %s" % (path, type(questions).__name__))
    return questions


def _engine(args: argparse.Namespace) -> Any:
    from .options import EngineOptions

    return EngineOptions(model=args.model, engine=args.engine, precision=args.precision,
                         threads=args.threads_per_actor, actors=args.actors,
                         batch_size=args.batch_size, calibration=args.calibration,
                         ray_address=args.ray_address or os.environ.get("RAY_ADDRESS") or None)


def _score(args: argparse.Namespace) -> int:
    from .engines import remote
    from .job import score_job

    return score_job(_engine(args), _questions(args.questions), args.input, args.output,
                     resume=args.resume, remote=remote(args.engine))


def _calibrate(args: argparse.Namespace) -> int:
    from .calibrate import calibrate_job
    from .engines import remote

    return calibrate_job(_engine(args), _questions(args.questions), args.labeled, args.output,
                         plot=args.plot, target_error=args.target_error,
                         remote=remote(args.engine))


def _engine_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", "-m", default="laya", help="alias, hf://org/repo[/sub], or a "
                   "checkpoint directory (default: laya)")
    p.add_argument("--engine", default="local", choices=["local", "ray"],
                   help="local: this process; ray: actors on a Ray cluster (needs kime[ray])")
    p.add_argument("--ray-address", default=None, help="the cluster to join (default: "
                   "$RAY_ADDRESS, else a local cluster sized to this machine)")
    p.add_argument("--actors", type=int, default=None, help="Ray actors (default: one per node, "
                   "each with threads = the node's cores)")
    p.add_argument("--threads-per-actor", type=int, default=0, help="CPU threads per actor, or "
                   "for the local engine (0: every core; Ray: the node's cores / actors)")
    p.add_argument("--batch-size", type=int, default=256, help="rows per chunk: written, fsynced "
                   "and sent to an actor together (default 256)")
    p.add_argument("--precision", default=None, help="auto (default), f32, int8, bf16 or mixed "
                   "(after `kime gate --mixed`) on the CPU, f16 or f32 on a GPU")
    p.add_argument("--calibration", default=None, help="a calibration file to answer with")
    p.add_argument("--questions", "-q", default=None, help="JSON file {id: question}: the "
                   "questions for rows that bring none")


def add_commands(sub: Any) -> None:
    """Add `score` and `calibrate` to `kime`'s subcommands (an argparse subparsers action)."""
    s = sub.add_parser(
        "score", help="answer questions about every row of a JSONL or Parquet file",
        description="Score every row of IN ({state, id?, questions?} per JSONL line, or a Parquet "
        "file with a 'state' column) and write one row per input row to OUT (.jsonl or a "
        ".parquet directory): {id, result} with predict()'s result, or {id, error}. Chunks are "
        "appended and fsynced as they complete; SIGINT/SIGTERM finish the chunks in flight and "
        "stop; --resume skips the ids OUT already holds.")
    _engine_arguments(s)
    s.add_argument("--input", "-i", required=True, help="JSONL file, or Parquet file/directory")
    s.add_argument("--output", "-o", required=True, help=".jsonl file, or .parquet directory")
    s.add_argument("--resume", action="store_true", help="continue OUT: skip the ids already "
                   "there, cut a torn last line")
    s.set_defaults(run=_score)

    c = sub.add_parser(
        "calibrate", help="fit a calibration file on labelled rows",
        description="Score the labelled rows of FILE (JSONL: {state, questions, expected: {qid: "
        "answer}} or gold: {qid: {probabilities}}), fit what Laya fits -- a temperature per "
        "question type and per option bucket, a histogram-binning map and abstention "
        "thresholds -- and write Laya's calibration file (kime.load(..., calibration=) and "
        "laya load it). Prints ECE and accuracy before and after, per bucket.")
    _engine_arguments(c)
    c.add_argument("--labeled", required=True, help="labelled JSONL (or Parquet) file")
    c.add_argument("--output", "-o", required=True, help="the calibration JSON to write")
    c.add_argument("--plot", default=None, help="also draw a reliability diagram to this PNG "
                   "(needs kime[plot])")
    c.add_argument("--target-error", type=float, default=0.10, help="error the abstention "
                   "thresholds keep among accepted answers (default 0.10)")
    c.set_defaults(run=_calibrate)
