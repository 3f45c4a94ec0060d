"""Which engine answers a job's rows, from `--engine`: this process (`local`) or actors on a Ray
cluster (`ray`, `kime.jobs.on_ray`). `jobs.cli` asks here and hands the choice to the job it runs
(`score_job`, `calibrate_job`), so `job` and `calibrate` never import Ray's module; a direct
caller that hands none gets the engine its options name, from here too.
"""
from __future__ import annotations

from typing import Optional

from .options import Remote


def remote(engine: str) -> Optional[Remote]:
    """The `Remote` for `engine`, or None when this process answers (`local`). Importing Ray's
    module (and Ray) waits for a job that asks for it."""
    if engine == "ray":
        from . import on_ray

        return on_ray
    return None


__all__ = ["remote"]
