"""`kime decide`: answer questions about one state and print Laya's result dict as JSON, or,
with `--batch`, answer a JSONL file of requests (`kime.cli.batch_lines`), one line each."""
from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any, Dict, Optional

from .exits import EXIT_USAGE, UsageError

if TYPE_CHECKING:
    from ..laya.confidence import MinConfidence


def _read_state(args: argparse.Namespace) -> Any:
    if args.state is not None and args.state_file is not None:
        raise UsageError("give the state with --state or --state-file, not both")
    if args.state_file is not None:
        text = (sys.stdin.read() if args.state_file == "-"
                else open(args.state_file, encoding="utf-8").read())
    elif args.state is not None:
        text = args.state
    else:
        if sys.stdin.isatty():
            raise UsageError("no state: pass --state TEXT, --state-file FILE, or pipe it on stdin")
        text = sys.stdin.read()
    if args.json_state:
        try:
            return json.loads(text)
        except ValueError as e:
            raise UsageError("--json-state: the state is not JSON: %s" % e) from e
    return text


def _read_questions(path: Optional[str]) -> Any:
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except OSError as e:
        raise UsageError("cannot read --questions %s: %s" % (path, e.strerror)) from e
    except ValueError as e:
        raise UsageError("--questions %s is not JSON: %s" % (path, e)) from e


def _routed(args: argparse.Namespace) -> bool:
    """`--model auto`: a Router picks each request's checkpoint, as Laya's CLI does. Without it,
    the flags that only choose a checkpoint have nothing to choose."""
    if args.model.strip().lower() == "auto":
        return True
    given = [flag for flag, value in (("--task", args.task), ("--lang-guess", args.lang_guess))
             if value is not None]
    if given:
        raise UsageError("%s choose among checkpoints: use them with --model auto"
                         % " and ".join(given))
    return False


def _decide(args: argparse.Namespace) -> int:
    questions = _read_questions(args.questions)
    if args.batch is None:
        if questions is None:
            raise UsageError("--questions is required (or give each request its own in --batch)")
        state = _read_state(args)
    elif args.state is not None or args.state_file is not None:
        raise UsageError("--batch reads its states from its lines: drop --state/--state-file")
    _check_narrowing(args)
    if _routed(args):
        from ..laya.router import Router

        answerer: Any = Router(device=args.device, agent_kwargs={
            "precision": args.precision, "threads": args.threads})
    else:
        from ..laya import load

        answerer = load(args.model, device=args.device, precision=args.precision,
                        threads=args.threads)
    from .batch_lines import CONTROLS

    defaults = {key: getattr(args, key) for key in CONTROLS if getattr(args, key) is not None}
    if args.batch is not None:
        return _decide_batch(args, answerer, questions, defaults)
    result = _predict(args, answerer, state, questions,
                      dict(defaults, min_confidence=args.min_confidence))
    json.dump(result, sys.stdout, ensure_ascii=False, indent=None if args.compact else 2)
    sys.stdout.write("\n")
    return 0


def _check_narrowing(args: argparse.Namespace) -> None:
    """`--shortlist-k` / `--tournament-group`: one of them, for one state; the shortlist embeds
    with the one checkpoint it loads, which `--model auto` has not chosen yet."""
    given = [flag for flag, value in (("--shortlist-k", args.shortlist_k),
                                      ("--tournament-group", args.tournament_group))
             if value is not None]
    if len(given) > 1:
        raise UsageError("--shortlist-k and --tournament-group narrow a choice two ways: give one")
    if given and args.batch is not None:
        raise UsageError("%s answers one state: drop --batch" % given[0])
    if args.shortlist_k is not None and args.model.strip().lower() == "auto":
        raise UsageError("--shortlist-k embeds with the checkpoint's own encoder: give --model "
                         "a checkpoint, not auto")


def _predict(args: argparse.Namespace, answerer: Any, state: Any, questions: Any,
             kwargs: Dict[str, Any]) -> Dict[str, Any]:
    """One state's result: `predict`, or Laya's shortlist or tournament around it."""
    if args.shortlist_k is not None:
        from ..laya.shortlist import embed_fn_from_agent, predict_shortlist

        return predict_shortlist(answerer, state, questions, embed_fn_from_agent(answerer),
                                 args.shortlist_k, **kwargs)
    if args.tournament_group is not None:
        from ..laya.shortlist import predict_tournament

        return predict_tournament(answerer, state, questions, args.tournament_group, **kwargs)
    result: Dict[str, Any] = answerer.predict(state, questions, **kwargs)
    return result


def _decide_batch(args: argparse.Namespace, answerer: Any, questions: Any,
                  defaults: Dict[str, Any]) -> int:
    from .batch_lines import answer_lines

    if args.batch_size < 1:
        raise UsageError("--batch-size must be a positive integer, got %d" % args.batch_size)
    try:
        handle = sys.stdin if args.batch == "-" else open(args.batch, encoding="utf-8")
    except OSError as e:
        raise UsageError("cannot read --batch %s: %s" % (args.batch, e.strerror)) from e
    with handle:
        failed = answer_lines(handle, answerer, questions, defaults, args.batch_size,
                              args.min_confidence, sys.stdout)
    if failed:
        print("kime: error: %d request(s) failed, on line(s) %s" % (
            len(failed), ", ".join(map(str, failed))), file=sys.stderr)
        return EXIT_USAGE
    return 0


def _min_confidence(value: str) -> MinConfidence:
    """`--min-confidence`: a number the confidence gate accepts (its range, its message)."""
    from ..laya.confidence import check_min_confidence

    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("expected a number in [0.0, 1.0], got %r"
                                         % value) from None
    try:
        return check_min_confidence(number)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `decide` to `kime`'s subcommands (an argparse subparsers action)."""
    d = sub.add_parser("decide", help="answer questions about one state; prints Laya's JSON",
                       description="Answer the questions in a JSON file about one state and print "
                       "Laya's result dict as JSON; or, with --batch, answer a JSONL file of "
                       "requests and print one JSON line per request.")
    d.add_argument("--model", "-m", default="laya", help="alias, hf://org/repo[/sub], or a "
                   "checkpoint directory (default: laya); auto: route each request to english, "
                   "multilingual or typed-decisions as Laya's Router does (results carry "
                   "`routing`)")
    d.add_argument("--lang", default=None, help="the state's language code (e.g. de): picks "
                   "the checkpoint's per-language temperatures, and with --model auto routes")
    d.add_argument("--lang-guess", dest="lang_guess", default=None, metavar="CODE",
                   help="with --model auto: a soft language hint, checked after --lang and "
                   "before detection")
    d.add_argument("--task", default=None, help="with --model auto: route to this checkpoint's "
                   "task (typed-decisions)")
    d.add_argument("--min-confidence", dest="min_confidence", type=_min_confidence, default=None,
                   metavar="P", help="mark answers whose confidence is below P (0.0-1.0) "
                   "low_confidence, with Laya's abstention fields; the answers are kept")
    d.add_argument("--batch", default=None, metavar="FILE", help="JSONL requests ('-': stdin), "
                   "one JSON object per line: state, and optionally questions (default: "
                   "--questions), model (with --model auto), task, lang, lang_guess, max_len, "
                   "head_max_len (default: the flags). Prints one JSON line per request, in "
                   "order; a line that fails prints {\"line\": N, \"error\": {...}} and the "
                   "run goes on (exit 2 at the end)")
    d.add_argument("--batch-size", dest="batch_size", type=int, default=64, metavar="N",
                   help="--batch requests answered together, in shared forward passes "
                   "(default 64)")
    d.add_argument("--shortlist-k", dest="shortlist_k", type=int, default=None, metavar="K",
                   help="narrow each choice to the K labels closest to the state (cosine of the "
                   "checkpoint encoder's mean-pooled embeddings), then answer, as Laya's "
                   "predict_shortlist; the result carries `shortlist`")
    d.add_argument("--tournament-group", dest="tournament_group", type=int, default=None,
                   metavar="G", help="answer each choice of more than G labels by elimination "
                   "in groups of at most G, one shared forward pass a round, as Laya's "
                   "predict_tournament; the result carries `tournament`")
    d.add_argument("--state", "-s", help="the state text")
    d.add_argument("--state-file", help="read the state from this file ('-' for stdin)")
    d.add_argument("--json-state", action="store_true", help="parse the state as JSON (a dict or "
                   "a conversation list)")
    d.add_argument("--questions", "-q", default=None, help="JSON file: {id: question, ...} "
                   "(required without --batch)")
    d.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    d.add_argument("--precision", default="auto", help="auto (default: f16 on a GPU, f32 on the "
                   "CPU), f16, f32, int8, bf16 (CPU with AVX512_BF16, or FEAT_BF16 on "
                   "aarch64) or mixed (after `kime gate --mixed`)")
    d.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    d.add_argument("--max-len", type=int, default=None, help="override the checkpoint's max_len")
    d.add_argument("--head-max-len", type=int, default=None, help="override head_max_len")
    d.add_argument("--compact", action="store_true", help="print JSON on one line")
    d.set_defaults(run=_decide)
