"""`laya`, laya 0.4.15's command line, on kime: the `laya` console script of the shim
distribution (`kime shim`) and `laya.cli` under kime's laya paths.

Laya's arguments, output and exit codes, over a kime Router built as laya's CLI builds its own
(`Router(device=..., preload=False)`): a text is routed (nothing loads; `--explain` adds the
detector's reasons), `--predict` answers `router_questions()` about it, `--preset NAME` a preset,
`--questions FILE` a question set of the caller's; `--batch FILE` (or `-`) answers a file of
requests, one a line, in shared forward passes; no text is interactive mode. A handled failure
is one line on stderr and exit 2, as in laya. `laya train` and `laya eval` (and the
`laya-train`/`laya-evals` scripts) are refused, naming laya as what provides them.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..laya.presets import (email_questions, guard_questions, moderation_questions,
                            router_questions, triage_questions)

PRESETS: Dict[str, Callable[[], Dict[str, Any]]] = {
    "email": email_questions, "guard": guard_questions, "moderation": moderation_questions,
    "router": router_questions, "triage": triage_questions}
"""The question presets `--preset` answers."""
PRESET_STATE_KEYS = {"email": "body", "guard": "prompt", "moderation": "post",
                     "router": "request", "triage": "message"}
"""The state field each preset's instructions read, where the CLI puts the text."""

REFUSED = {"train": "laya-train", "eval": "laya-evals"}
"""laya's subcommands kime does not provide -> the laya script each mirrors."""
_WHAT = {"laya-train": "laya's trainer, which trains with PyTorch",
         "laya-evals": "laya's evaluation harness, which runs laya's PyTorch model"}


def refuse(script: str) -> int:
    """Say that `script` is laya's and what to do; exit code 2."""
    print("laya: %s is %s; kime does not provide it. Install laya itself (pip install "
          "laya==0.4.15, with PyTorch) in an environment of its own to run it."
          % (script, _WHAT[script]), file=sys.stderr)
    return 2


def train_main(argv: Optional[List[str]] = None) -> int:
    """The `laya-train` script under the shim: refused."""
    return refuse("laya-train")


def evals_main(argv: Optional[List[str]] = None) -> int:
    """The `laya-evals` script under the shim: refused."""
    return refuse("laya-evals")


def _model_name(value: str) -> Optional[str]:
    if value.strip().lower() == "auto":
        return None
    from ..laya.routing import normalise_name

    try:
        return normalise_name(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError("%s, or 'auto'" % e) from None


def _min_confidence(value: str) -> Any:
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


def build_parser() -> argparse.ArgumentParser:
    """laya's parser: its flags, names and help."""
    p = argparse.ArgumentParser(prog="laya", description="Test Laya locally: route or answer a "
                                "request from the command line.")
    p.add_argument("text", nargs="*", help="the request text (omit for interactive mode)")
    p.add_argument("--predict", action="store_true", help="run the full prediction, not just "
                   "the routing decision")
    p.add_argument("--model", type=_model_name, metavar="NAME", help="force a checkpoint "
                   "instead of auto-routing: a name or alias, or 'auto' to route it")
    p.add_argument("--lang", help="force a language, e.g. en or de, instead of detecting it")
    p.add_argument("--lang-guess", dest="lang_guess", metavar="CODE", help="a soft language "
                   "hint, checked after --lang and before the detector")
    p.add_argument("--task", help="force a typed-decisions workflow instead of detecting it")
    p.add_argument("--preset", choices=sorted(PRESETS), metavar="NAME", help="answer a "
                   "question preset (%s); implies --predict" % ", ".join(sorted(PRESETS)))
    p.add_argument("--questions", metavar="FILE", help="a JSON file of your own typed "
                   "questions; implies --predict")
    p.add_argument("--max-len", type=int, dest="max_len", metavar="N", help="token budget for "
                   "the whole request")
    p.add_argument("--head-max-len", type=int, dest="head_max_len", metavar="N",
                   help="token budget the options share")
    p.add_argument("--min-confidence", type=_min_confidence, dest="min_confidence",
                   metavar="P", help="flag an answer whose confidence falls below P as "
                   "low-confidence. Needs --predict, --preset or --questions.")
    p.add_argument("--device", help="device, e.g. cpu or cuda")
    p.add_argument("--json", action="store_true", help="print the raw result as JSON")
    p.add_argument("--explain", action="store_true", help="include language-detection reasons "
                   "in routing mode (no model loading)")
    p.add_argument("--batch", metavar="FILE", help="score a file of requests, one per line "
                   "('-' for stdin)")
    p.add_argument("--batch-size", type=int, default=None, metavar="N", help="states per "
                   "forward pass in --batch mode")
    p.add_argument("--sort-by-length", action="store_true", dest="sort_by_length",
                   help="accepted for laya's sake: kime never pads, so it changes nothing")
    return p


def load_questions(path: str) -> Tuple[Dict[str, Any], str]:
    """A `--questions` file: a question set, or `{"questions": ..., "state_key": ...}`; the
    questions and the state field they read (default `request`)."""
    try:
        with open(path, encoding="utf-8") as handle:
            raw = json.load(handle)
    except FileNotFoundError:
        raise ValueError("no such --questions file: %s" % path) from None
    if not isinstance(raw, dict):
        raise ValueError("--questions file must be a JSON object of question id -> definition")
    questions, state_key = raw, "request"
    inner = raw.get("questions")
    wrapped = set(raw) <= {"questions", "state_key"} and "questions" in raw and (
        "state_key" in raw or not isinstance(inner, dict) or not inner
        or all(isinstance(v, dict) for v in inner.values()))
    if wrapped:
        if not isinstance(inner, dict):
            raise ValueError("the 'questions' field of the --questions file must be an object")
        questions, state_key = inner, raw.get("state_key", "request")
        if not isinstance(state_key, str) or not state_key.strip():
            raise ValueError("'state_key' must be a non-empty string, got %r" % (state_key,))
    if not questions:
        raise ValueError("--questions file holds no questions")
    for qid, qdef in questions.items():
        if not isinstance(qdef, dict):
            raise ValueError("question %r must map to an object, got %s"
                             % (qid, type(qdef).__name__))
    return questions, state_key


def _answering(args: argparse.Namespace) -> bool:
    return bool(args.predict or args.preset or args.questions)


def _questions(args: argparse.Namespace) -> Tuple[Dict[str, Any], str]:
    if args.questions and args.preset:
        raise ValueError("--questions and --preset choose different question sets; pass one")
    if args.questions:
        return load_questions(args.questions)
    if args.preset:
        return PRESETS[args.preset](), PRESET_STATE_KEYS[args.preset]
    return router_questions(), PRESET_STATE_KEYS["router"]


def _budgets(args: argparse.Namespace) -> Dict[str, int]:
    return {k: getattr(args, k) for k in ("max_len", "head_max_len")
            if getattr(args, k) is not None}


def _gate(args: argparse.Namespace) -> Dict[str, float]:
    return {} if args.min_confidence is None else {"min_confidence": args.min_confidence}


def show_decision(decision: Any) -> None:
    print("Model     :", decision["model"])
    print("Reason    :", decision["reason"])
    if decision.get("detection"):
        print("Detected  :", json.dumps(decision["detection"], ensure_ascii=False))


def show_answers(result: Dict[str, Any]) -> None:
    if result.get("routing"):
        show_decision(result["routing"])
        print()
    for qid, answer in result.get("answers", {}).items():
        if "choice" in answer:
            choice = answer["choice"]
            # a printout, deciding nothing: laya prints p=0.000 for a choice without its
            # probability (a remote answer's), and `laya`'s output is compared line for line
            detail = "%s (p=%.3f)" % (choice, answer.get("probabilities", {}).get(choice, 0.0))
        elif "score" in answer:
            detail = "%.2f" % answer["score"]
        elif "noul" in answer:
            detail = "%.3f" % answer["noul"]
        else:
            detail = json.dumps(answer, ensure_ascii=False)
        if answer.get("low_confidence"):
            detail += "  [low-confidence]"
        print("%-12s: %s" % (qid, detail))


def _failed(error: Exception) -> int:
    if isinstance(error, ValueError):
        print("laya: %s" % error, file=sys.stderr)
    else:
        print("laya: could not run Laya (%s)." % error, file=sys.stderr)
        print("Check that the checkpoints are in the Hugging Face cache or can be downloaded "
              "(kime pull fetches them).", file=sys.stderr)
    return 2


def _router(args: argparse.Namespace) -> Any:
    from ..laya.router import Router

    return Router(device=args.device, preload=False)


def run(text: str, args: argparse.Namespace, router: Any = None) -> int:
    """Route or answer one request: 0, or 2 on a handled failure."""
    router = router or _router(args)
    try:
        if _answering(args):
            questions, key = _questions(args)
            result = router.predict({key: text}, questions, model=args.model, task=args.task,
                                    lang=args.lang, lang_guess=args.lang_guess,
                                    **_budgets(args), **_gate(args))
            if args.json:
                print(json.dumps(result, ensure_ascii=False, indent=2, default=str))
            else:
                show_answers(result)
        else:
            decision = router.route({"text": text}, model=args.model, task=args.task,
                                    lang=args.lang, lang_guess=args.lang_guess,
                                    **({"explain": True} if args.explain else {}))
            if args.json:
                print(json.dumps(dict(decision), ensure_ascii=False, indent=2, default=str))
            else:
                show_decision(decision)
    except (ValueError, ImportError, OSError, RuntimeError) as e:
        return _failed(e)
    return 0


def read_lines(source: str) -> List[str]:
    """The non-blank lines of FILE, or of stdin for `-`, stripped."""
    if source == "-":
        if hasattr(sys.stdin, "reconfigure"):
            sys.stdin.reconfigure(encoding="utf-8")
        lines = sys.stdin.read().splitlines()
    else:
        with open(source, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    return [line.strip() for line in lines if line.strip()]


def run_batch(lines: List[str], args: argparse.Namespace, router: Any = None) -> int:
    """Route or answer every line in one Router call: 0, or 2 on a handled failure."""
    router = router or _router(args)
    given = {k: getattr(args, k) for k in ("model", "task", "lang", "lang_guess")
             if getattr(args, k) is not None}
    try:
        if _answering(args):
            questions, key = _questions(args)
            requests = [dict({"state": {key: line}, "questions": questions}, **given,
                             **_budgets(args)) for line in lines]
            results = router.predict_batch(requests, batch_size=args.batch_size, **_gate(args))
            for line, result in zip(lines, results):
                if args.json:
                    print(json.dumps(result, ensure_ascii=False, default=str))
                else:
                    print("# %s" % (line if len(line) <= 72 else line[:69] + "..."))
                    show_answers(result)
                    print()
        else:
            decisions = router.route_batch([dict({"state": {"text": line}, "questions": {}},
                                                 **given) for line in lines],
                                           **({"explain": True} if args.explain else {}))
            for line, decision in zip(lines, decisions):
                if args.json:
                    print(json.dumps(dict(decision), ensure_ascii=False, default=str))
                elif args.explain:
                    show_decision(decision)
                else:
                    print("%-14s %s  <- %s" % (decision["model"], decision["reason"],
                                               line if len(line) <= 48 else line[:45] + "..."))
    except (ValueError, ImportError, OSError, RuntimeError) as e:
        return _failed(e)
    return 0


def interactive(args: argparse.Namespace) -> int:
    """Read requests from the terminal until EOF or `quit`; 2 when any of them failed."""
    print("Laya interactive mode. Type a request and press Enter; Ctrl-D or 'quit' to exit.")
    router = _router(args)
    code = 0
    while True:
        try:
            text = input("laya> ").strip()
        except (EOFError, KeyboardInterrupt):
            print()
            break
        if not text or text.lower() in ("quit", "exit"):
            break
        code = run(text, args, router) or code
    return code


def main(argv: Optional[List[str]] = None) -> int:
    """`laya [TEXT...] [flags]`; `laya train`/`laya eval` are refused."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list and args_list[0] in REFUSED:
        return refuse(REFUSED[args_list[0]])
    args = build_parser().parse_args(args_list)
    if hasattr(sys.stdout, "reconfigure"):
        sys.stdout.reconfigure(encoding="utf-8")
    text = " ".join(args.text).strip()
    if args.explain and _answering(args):
        print("laya: --explain is for routing only; omit --predict, --preset and --questions.",
              file=sys.stderr)
        return 2
    if args.min_confidence is not None and not _answering(args):
        print("laya: --min-confidence gates answers, so it needs --predict, --preset or "
              "--questions.", file=sys.stderr)
        return 2
    if args.batch:
        if text:
            print("laya: pass either a text or --batch FILE, not both.", file=sys.stderr)
            return 2
        try:
            lines = read_lines(args.batch)
        except OSError as e:
            print("laya: could not read %s (%s)." % (args.batch, e), file=sys.stderr)
            return 2
        if not lines:
            print("laya: no requests found in %s." % args.batch, file=sys.stderr)
            return 2
        return run_batch(lines, args)
    if not text:
        return interactive(args)
    return run(text, args)


__all__ = ["build_parser", "evals_main", "main", "train_main"]

if __name__ == "__main__":
    sys.exit(main())
