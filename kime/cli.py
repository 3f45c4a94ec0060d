"""`kime` on the command line: arguments -> engine, answers -> JSON on stdout.

Errors are one line on stderr without a traceback (`--verbose` shows it), and the exit code
says what went wrong: 2 for a bad request or arguments, 3 for a model that is not found or does
not load, 4 for a device or feature this machine cannot run, 1 for anything else.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, List, Optional

from .errors import CheckpointError, InvalidRequest, KimeError, ModelNotFound, Unsupported

EXIT_USAGE, EXIT_MODEL, EXIT_DEVICE, EXIT_OTHER = 2, 3, 4, 1


def _read_state(args: argparse.Namespace) -> Any:
    if args.state is not None and args.state_file is not None:
        raise _Usage("give the state with --state or --state-file, not both")
    if args.state_file is not None:
        text = sys.stdin.read() if args.state_file == "-" else open(args.state_file, encoding="utf-8").read()
    elif args.state is not None:
        text = args.state
    else:
        if sys.stdin.isatty():
            raise _Usage("no state: pass --state TEXT, --state-file FILE, or pipe it on stdin")
        text = sys.stdin.read()
    if args.json_state:
        try:
            return json.loads(text)
        except ValueError as e:
            raise _Usage("--json-state: the state is not JSON: %s" % e) from e
    return text


class _Usage(Exception):
    pass


def _decide(args: argparse.Namespace) -> int:
    from .laya import load

    try:
        with open(args.questions, encoding="utf-8") as f:
            questions = json.load(f)
    except OSError as e:
        raise _Usage("cannot read --questions %s: %s" % (args.questions, e.strerror)) from e
    except ValueError as e:
        raise _Usage("--questions %s is not JSON: %s" % (args.questions, e)) from e
    state = _read_state(args)
    agent = load(args.model, device=args.device, precision=args.precision, threads=args.threads)
    result = agent.predict(state, questions, max_len=args.max_len, head_max_len=args.head_max_len)
    json.dump(result, sys.stdout, ensure_ascii=False, indent=None if args.compact else 2)
    sys.stdout.write("\n")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kime", description="Laya's decision models without "
                                     "PyTorch: typed questions about a state, calibrated answers.")
    parser.add_argument("--verbose", action="store_true", help="show tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    d = sub.add_parser("decide", help="answer questions about one state; prints Laya's JSON",
                       description="Answer the questions in a JSON file about one state and print "
                       "Laya's result dict as JSON.")
    d.add_argument("--model", "-m", default="laya", help="alias, hf://org/repo[/sub], or a "
                   "checkpoint directory (default: laya)")
    d.add_argument("--state", "-s", help="the state text")
    d.add_argument("--state-file", help="read the state from this file ('-' for stdin)")
    d.add_argument("--json-state", action="store_true", help="parse the state as JSON (a dict or "
                   "a conversation list)")
    d.add_argument("--questions", "-q", required=True, help="JSON file: {id: question, ...}")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--precision", default=None, help="f16, f32 or int8")
    d.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    d.add_argument("--max-len", type=int, default=None, help="override the checkpoint's max_len")
    d.add_argument("--head-max-len", type=int, default=None, help="override head_max_len")
    d.add_argument("--compact", action="store_true", help="print JSON on one line")
    d.set_defaults(run=_decide)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # one line, and an exit code that says which kind of failure
        if args.verbose:
            raise
        if isinstance(e, (_Usage, InvalidRequest)):
            code = EXIT_USAGE
        elif isinstance(e, (ModelNotFound, CheckpointError)):
            code = EXIT_MODEL
        elif isinstance(e, Unsupported):
            code = EXIT_DEVICE
        else:
            code = EXIT_OTHER
        name = "error" if isinstance(e, (_Usage, KimeError)) else type(e).__name__
        print("kime: %s: %s" % (name, str(e).replace("\n", "; ")), file=sys.stderr)
        return code


if __name__ == "__main__":
    sys.exit(main())
