"""`kime route`: Laya's default command, which checkpoint a text goes to and why, loading
nothing."""
from __future__ import annotations

import argparse
import json
from typing import Optional

from .exits import UsageError


def _model_name(value: str) -> Optional[str]:
    """`kime route --model`: a checkpoint name or alias, or `auto` (None: let routing choose)."""
    if value.strip().lower() == "auto":
        return None
    from ..laya.routing import normalise_name

    try:
        return normalise_name(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError("%s, or 'auto'" % e) from None


def _route(args: argparse.Namespace) -> int:
    from ..laya.router import Router

    text = " ".join(args.text).strip()
    if not text:
        raise UsageError("no text to route")
    decision = Router().route({"text": text}, model=args.model, task=args.task, lang=args.lang,
                              lang_guess=args.lang_guess, explain=args.explain)
    if args.json:
        print(json.dumps(dict(decision), ensure_ascii=False, indent=2, default=str))
        return 0
    print("Model     :", decision["model"])
    print("Reason    :", decision["reason"])
    if decision.get("detection"):
        print("Detected  :", json.dumps(decision["detection"], ensure_ascii=False))
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `route` to `kime`'s subcommands (an argparse subparsers action)."""
    r = sub.add_parser("route", help="which checkpoint a text goes to, and why (loads nothing)",
                       description="Laya's default command: route a text as laya.Router does "
                       "(explicit model > task > lang > lang guess > detected language > "
                       "default) and print the decision, without loading a checkpoint.")
    r.add_argument("text", nargs="+", help="the request text")
    r.add_argument("--model", type=_model_name, default=None, metavar="NAME", help="pin a "
                   "checkpoint by name or alias, or auto (the default) to route")
    r.add_argument("--lang", default=None, help="the text's language code, e.g. en or de")
    r.add_argument("--lang-guess", dest="lang_guess", default=None, metavar="CODE",
                   help="a soft language hint, checked after --lang and before detection")
    r.add_argument("--task", default=None, help="route to a task's checkpoint (typed-decisions)")
    r.add_argument("--explain", action="store_true", help="add the language detector's "
                   "diagnostic")
    r.add_argument("--json", action="store_true", help="print the decision as JSON")
    r.set_defaults(run=_route)
