"""`kime gate`: the precision gate (`kime.precision_gate`) on the command line, INT8 or BF16
against FP32 on a request set; exit 0 when it passes, 5 when not."""
from __future__ import annotations

import argparse
import json
import sys

from .exits import EXIT_GATE


def _gate(args: argparse.Namespace) -> int:
    from ..precision_gate import gate, load_requests

    requests = load_requests(args.requests) if args.requests else None
    progress = None if args.json else (lambda msg: print("kime gate: " + msg, file=sys.stderr))
    report = gate(args.model, requests, threads=args.threads, threshold=args.threshold,
                  limit=args.limit, progress=progress, source=args.requests,
                  precision=args.precision)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.format())
    return 0 if report.passed else EXIT_GATE


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `gate` to `kime`'s subcommands (an argparse subparsers action)."""
    g = sub.add_parser("gate", help="compare INT8 or BF16 with FP32 on a request set; pass or "
                       "fail", description="Run a request set through the model in FP32 and in "
                       "INT8 (or BF16: --precision bf16) on the CPU and report the argmax "
                       "agreement per question type, the largest and mean probability "
                       "differences and, for labelled requests, accuracy and ECE under each "
                       "precision. Exit 0 when every question type agrees at the threshold or "
                       "better, 5 when not.")
    g.add_argument("model", help="alias, hf://org/repo[/sub], org/repo or a checkpoint directory")
    g.add_argument("--requests", default=None, help="JSON list or JSON lines of {state, "
                   "questions[, labels]} (default: a built-in varied set of 200 requests)")
    g.add_argument("--limit", type=int, default=None, help="use only the first N requests")
    g.add_argument("--threshold", type=float, default=0.995, help="argmax agreement needed per "
                   "question type (default 0.995)")
    g.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    g.add_argument("--precision", default="int8", choices=["int8", "bf16"], help="the precision "
                   "compared with FP32 (default int8; bf16 needs AVX512_BF16, or FEAT_BF16 on "
                   "aarch64)")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    g.set_defaults(run=_gate)
