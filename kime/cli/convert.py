"""`kime convert`: pack a model's weights for this CPU ahead of time, and say where they went."""
from __future__ import annotations

import argparse
import os

from ..errors import Unsupported


def size_text(n: int) -> str:
    """`n` bytes for a person: bytes, KiB, MiB or GiB, one decimal (`kime convert`, `kime
    doctor`)."""
    size = float(n)
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return ("%d %s" % (n, unit)) if unit == "bytes" else ("%.1f %s" % (size, unit))
        size /= 1024
    return str(n)  # pragma: no cover


def _convert(args: argparse.Namespace) -> int:
    from ..engine import Kime

    engine = Kime(args.model, device=args.device, precision=args.precision, threads=args.threads)
    backend = engine.backend
    path = backend.weights_file
    if path is None:
        raise Unsupported("the %s backend keeps no packed weights to convert (unset "
                          "KIME_CPU_BACKEND to use the compiled one)" % backend.describe())
    if not os.path.isfile(path):
        raise OSError("packed the weights for %s, but could not write the cache file %s "
                      "(is the directory writable? set KIME_CACHE to move it)"
                      % (backend.kernels, path))
    print("model:  %s (%s)" % (args.model, engine.checkpoint.path))
    print("isa:    %s" % backend.kernels)
    print("device: %s" % backend.describe())
    print("cache:  %s" % path)
    print("size:   %s (%d bytes)" % (size_text(os.path.getsize(path)), os.path.getsize(path)))
    print("status: %s" % ("built now" if backend.weights_from == "packed" else "already cached"))
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add `convert` to `kime`'s subcommands (an argparse subparsers action)."""
    c = sub.add_parser("convert", help="pack a model's weights for this CPU ahead of time",
                       description="Load a model so the CPU backend packs its weights for this "
                       "machine's ISA and writes the packed cache ($KIME_CACHE, else "
                       "~/.cache/kime); print the cache file, its size, and whether it was "
                       "built now or already there.")
    c.add_argument("model", help="alias, hf://org/repo[/sub], org/repo or a checkpoint directory")
    c.add_argument("--device", default="cpu", help="cpu (default) or auto")
    c.add_argument("--threads", type=int, default=0, help="CPU threads (0: every core)")
    c.add_argument("--precision", default="auto", help="auto (default: f32 on the CPU), f32, "
                   "int8, bf16 or mixed (the `kime gate --mixed` choice): which packed weights "
                   "to build")
    c.set_defaults(run=_convert)
