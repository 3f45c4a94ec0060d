"""`kime bench`: run the benchmarks of a source checkout's bench/ folder, which the installed
package does not carry."""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys

from .exits import UsageError

WHAT = ("", "gemm", "attention", "qgemm", "bgemm", "load", "reference")
"""The benches `--what` picks ("": end to end)."""


def _bench(args: argparse.Namespace) -> int:
    import subprocess

    module = "bench" + ("." + args.what if args.what else "")
    if importlib.util.find_spec("bench") is None or importlib.util.find_spec(module) is None:
        raise UsageError("the benches live in a kime source checkout (its bench/ folder); run "
                         "`kime bench` from the checkout's root")
    # The machine notes: OpenBLAS's CORETYPE and L2 overrides slow a current numpy, so the
    # benches run without them (the end-to-end bench also re-executes itself for the same reason).
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    rest = [a for a in args.rest if a != "--"]
    return subprocess.call([sys.executable, "-m", module] + rest, env=env)


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `bench` to `kime`'s subcommands (an argparse subparsers action)."""
    b = sub.add_parser("bench", help="run the benchmarks in a source checkout's bench/ folder",
                       description="Run `python -m bench` (end to end, beside Laya when it is "
                       "importable), or `--what gemm|attention|qgemm|bgemm|load|reference`; every "
                       "other argument goes to that bench. The benches live in the source tree, "
                       "not in the installed package.", add_help=True)
    b.add_argument("--what", default="", choices=list(WHAT), help="which bench (default: "
                   "end to end)")
    b.add_argument("rest", nargs=argparse.REMAINDER, help="arguments for the bench")
    b.set_defaults(run=_bench)
