"""`kime` on the command line: arguments -> engine, answers -> JSON on stdout.

Errors are one line on stderr without a traceback (`--verbose` shows it), and the exit code
says what went wrong: 2 for a bad request or arguments, 3 for a model that is not found or does
not load, 4 for a device or feature this machine cannot run, 5 for a precision gate that fails,
1 for anything else.

This module holds the parser and `main`; each command lives in its own module with an
`add_commands(subparsers)` that declares its flags and handler (`decide`, `route`, `doctor`,
`pull`, `convert`, `serve`, `mcp`, `gate`, `shim` here; `score` and `calibrate` in `kime.jobs.cli`).
The benchmarks are not a command: they live in a source checkout's bench/ folder, which no wheel
carries (`python -m bench` there).
A command module imports what its handler runs only when it runs, so `kime --help` loads no
engine.
"""
from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from .._version import __version__
from . import convert, decide, doctor, gate, mcp, pull, route, serve, shim
from .exits import EXIT_DEVICE, EXIT_GATE, EXIT_MODEL, EXIT_OTHER, EXIT_USAGE, error_line, exit_code

__all__ = ["EXIT_DEVICE", "EXIT_GATE", "EXIT_MODEL", "EXIT_OTHER", "EXIT_USAGE", "build_parser",
           "main"]

_COMMANDS = (decide, route, doctor, pull, convert, serve, mcp, gate, shim)
"""The command modules, in the order `kime --help` lists them (the jobs' come last)."""


def build_parser() -> argparse.ArgumentParser:
    """`kime`'s parser: the global flags, then every command's subparser."""
    parser = argparse.ArgumentParser(prog="kime", description="Laya's decision models without "
                                     "PyTorch: typed questions about a state, calibrated answers.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    parser.add_argument("--version", action="version", version="kime " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for command in _COMMANDS:
        command.add_commands(sub)
    from ..jobs.cli import add_commands  # score and calibrate: the offline jobs own their flags

    add_commands(sub)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Run one `kime` command and return its exit code (the console script's entry point)."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "any_arguments", False):
        parser.error("unrecognized arguments: %s" % " ".join(unknown))
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line, and an exit code that says which kind of failure
        if args.verbose:
            raise
        print(error_line(e), file=sys.stderr)
        return exit_code(e)
