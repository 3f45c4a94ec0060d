"""What a failed command prints and the exit code it returns, shared by every command module.

An error is one line on stderr, `kime: error: ...` (or the exception's type for what is not a
kime error), and the code says which kind of failure it was, so scripts can tell a bad request
from a missing model from a machine that cannot run the precision.
"""
from __future__ import annotations

from ..errors import (BadOption, CheckpointError, InvalidRequest, KimeError, ModelNotFound,
                      Unsupported)

EXIT_USAGE, EXIT_MODEL, EXIT_DEVICE, EXIT_OTHER, EXIT_GATE = 2, 3, 4, 1, 5


class UsageError(Exception):
    """Arguments that do not make a command (exit 2), raised by the commands' own checks that
    argparse cannot express (two flags given together, a file that does not read)."""


def exit_code(error: BaseException) -> int:
    """The exit code for an exception a command raised."""
    if isinstance(error, (UsageError, InvalidRequest, BadOption)):
        return EXIT_USAGE
    if isinstance(error, (ModelNotFound, CheckpointError)):
        return EXIT_MODEL
    if isinstance(error, Unsupported):
        return EXIT_DEVICE
    return EXIT_OTHER


def error_line(error: BaseException) -> str:
    """The one line of stderr for an exception: `kime: error: ...` for a usage or kime error,
    `kime: <Type>: ...` for anything else."""
    name = "error" if isinstance(error, (UsageError, KimeError)) else type(error).__name__
    return "kime: %s: %s" % (name, one_line(str(error)))


def one_line(text: str) -> str:
    """A multi-line message (a heading, then one problem per line) as one line of stderr:
    `3 problems in the request: first; second; third`."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if not lines:
        return text
    head, rest = lines[0], [line[2:] if line.startswith("- ") else line for line in lines[1:]]
    if head.endswith(":") and rest:
        return head + " " + "; ".join(rest)
    return "; ".join([head] + rest)
