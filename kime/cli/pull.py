"""`kime pull`: download the checkpoint a model name points at into the Hugging Face cache."""
from __future__ import annotations

import argparse


def _pull(args: argparse.Namespace) -> int:
    from ..hub import pull

    directory = pull(args.name, revision=args.revision, token=args.token)
    print(directory)
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `pull` to `kime`'s subcommands (an argparse subparsers action)."""
    p = sub.add_parser("pull", help="download a model into the Hugging Face cache",
                       description="Download the checkpoint a model name points at (an alias, "
                       "hf://org/repo[/sub] or org/repo) into the Hugging Face cache, then print "
                       "its local directory. Only the checkpoint's files are fetched.")
    p.add_argument("name", help="alias, hf://org/repo[/sub], or org/repo")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.add_argument("--token", default=None, help="Hugging Face token (default: $HF_TOKEN or the "
                   "saved login)")
    p.set_defaults(run=_pull)
