"""`kime gate`: the precision gate (`kime.precision_gate`) on the command line, INT8 or BF16
against FP32 on a request set; exit 0 when it passes, 5 when not. With `--mixed`, the per-layer
choice (`kime.mixed_precision`): a precision per layer, written for `precision="mixed"`."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, List, Optional

from .exits import EXIT_GATE, UsageError

Progress = Optional[Callable[[str], None]]


def _gate(args: argparse.Namespace) -> int:
    from ..precision_gate import THRESHOLD, gate, load_requests

    requests = load_requests(args.requests) if args.requests else None
    progress: Progress = None if args.json else (
        lambda msg: print("kime gate: " + msg, file=sys.stderr))
    if args.mixed:
        return _mixed(args, requests, progress)
    for flag, value in (("--max-int8-deviation", args.max_int8_deviation),
                        ("--max-bf16-deviation", args.max_bf16_deviation),
                        ("--no-write", args.no_write or None)):
        if value is not None:
            raise UsageError("%s goes with --mixed" % flag)
    report = gate(args.model, requests, threads=args.threads,
                  threshold=THRESHOLD if args.threshold is None else args.threshold,
                  limit=args.limit, progress=progress, source=args.requests,
                  precision=args.precision or "int8")
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.format())
    return 0 if report.passed else EXIT_GATE


def _mixed(args: argparse.Namespace, requests: Optional[List[Dict[str, Any]]],
           progress: Progress) -> int:
    from ..mixed_precision import AGREEMENT, BF16_DEVIATION, INT8_DEVIATION, mixed_gate

    if args.precision is not None:
        raise UsageError("--mixed chooses each layer's precision; leave out --precision")
    report = mixed_gate(
        args.model, requests,
        threads=args.threads, threshold=AGREEMENT if args.threshold is None else args.threshold,
        int8_deviation=(INT8_DEVIATION if args.max_int8_deviation is None
                        else args.max_int8_deviation),
        bf16_deviation=(BF16_DEVIATION if args.max_bf16_deviation is None
                        else args.max_bf16_deviation),
        limit=args.limit, write=not args.no_write, progress=progress,
        source=args.requests)
    if args.json:
        json.dump(report.to_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(report.format())
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `gate` to `kime`'s subcommands (an argparse subparsers action)."""
    g = sub.add_parser("gate", help="compare INT8 or BF16 with FP32 on a request set; pass or "
                       "fail; or choose each layer's precision (--mixed)",
                       description="Run a request set through the model in FP32 and in "
                       "INT8 (or BF16: --precision bf16) on the CPU and report the argmax "
                       "agreement per question type, the largest and mean probability "
                       "differences and, for labelled requests, accuracy and ECE under each "
                       "precision. Exit 0 when every question type agrees at the threshold or "
                       "better, 5 when not. With --mixed, choose for each layer the lowest "
                       "precision (INT8, then BF16, then FP32) at which the whole model keeps "
                       "the threshold's share of FP32's answers and moves no probability past "
                       "the precision contract's bound, and write the choice beside the "
                       "checkpoint (or in kime's cache) for precision=\"mixed\"; exit 0.")
    g.add_argument("model", help="alias, hf://org/repo[/sub], org/repo or a checkpoint directory")
    g.add_argument("--requests", default=None, help="JSON list or JSON lines of {state, "
                   "questions[, labels]} (default: a built-in varied set of 200 requests)")
    g.add_argument("--limit", type=int, default=None, help="use only the first N requests")
    g.add_argument("--threshold", type=float, default=None, help="argmax agreement needed per "
                   "question type (default 0.995; 0.999 with --mixed)")
    g.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    g.add_argument("--precision", default=None, choices=["int8", "bf16"], help="the precision "
                   "compared with FP32 (default int8; bf16 needs AVX512_BF16, or FEAT_BF16 on "
                   "aarch64)")
    g.add_argument("--mixed", action="store_true", help="choose a precision per layer and write "
                   "the choice for precision=\"mixed\"")
    g.add_argument("--max-int8-deviation", type=float, default=None, help="with --mixed: the "
                   "largest probability change a mix with INT8 layers may make (default 0.071, "
                   "ONNX Runtime's quantize_dynamic INT8 on the contract's checkpoint)")
    g.add_argument("--max-bf16-deviation", type=float, default=None, help="with --mixed: the "
                   "largest probability change a mix of BF16 and FP32 layers may make (default "
                   "0.012, Laya's CPU autocast)")
    g.add_argument("--no-write", action="store_true", help="with --mixed: report the choice "
                   "without writing it")
    g.add_argument("--json", action="store_true", help="print the report as JSON")
    g.set_defaults(run=_gate)
