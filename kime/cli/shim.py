"""`kime shim install | uninstall | status | wheel DIR`: the `laya` shim distribution
(`kime.shim`), which makes `import laya` and laya's console scripts run kime in this
environment, and lets pip count laya as installed without PyTorch."""
from __future__ import annotations

import argparse

from .exits import UsageError


def _shim(args: argparse.Namespace) -> int:
    from ..shim import manage
    from ..shim.wheel import build

    if args.action == "wheel":
        if not args.dir:
            raise UsageError("kime shim wheel needs the directory to write the wheel into")
        print(build(args.dir))
        return 0
    if args.dir:
        raise UsageError("only kime shim wheel takes a directory")
    try:
        if args.action == "install":
            report = manage.install()
        elif args.action == "uninstall":
            report = manage.uninstall()
        else:
            report = manage.status()
    except manage.ShimError as e:
        raise UsageError(str(e)) from e
    for line in report.lines():
        print(line)
    if args.action == "status":
        return 0 if report.current else 1
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `shim` to `kime`'s subcommands (an argparse subparsers action)."""
    s = sub.add_parser("shim", help="make `import laya` and laya's scripts run kime here",
                       description="install: put the `laya` shim distribution (laya 0.4.15's "
                       "API answered by this kime, version 0.4.15+kime.VERSION, requiring this "
                       "kime) into this environment with pip, so packages that import laya run "
                       "on kime and their laya requirement installs no PyTorch; uninstall: "
                       "remove it (pip uninstall laya does too); status: what laya is here "
                       "(exit 1 unless it is this kime's shim); wheel DIR: write the shim's "
                       "wheel, for a requirements file or a container build.")
    s.add_argument("action", choices=("install", "uninstall", "status", "wheel"))
    s.add_argument("dir", nargs="?", default=None, metavar="DIR",
                   help="wheel: the directory to write into")
    s.set_defaults(run=_shim)
