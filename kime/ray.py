"""kime on Ray (`pip install 'kime[ray]'`).

Ray Data: `Scorer`, a callable class for `Dataset.map_batches` whose actors each load the model
once and answer what `kime.load(model).predict` answers; `score(ds, model, questions)`, a Dataset
with `result` and `error` added by a pool of those actors; `connect` and `plan`, how a cluster is
joined and sized. The code lives in `kime.jobs.on_ray`, beside the `kime score` / `kime
calibrate` machinery it shares (`--engine ray` runs through the same actors).

Ray Serve (`pip install 'kime[serve,ray]'`): `deployment(model, replicas=...,
threads_per_replica=..., settings=...)`, the Serve application of `kime serve` in replicas across
the cluster, for `serve.run(app, route_prefix="/")`; `kime serve --engine ray` runs it. The code
lives in `kime.serve.on_ray`.

This module is their public name, so neither imports it and the layering runs one way.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .jobs.on_ray import Scorer, connect, plan, score

if TYPE_CHECKING:
    from .serve.settings import Settings

__all__ = ["Scorer", "connect", "deployment", "plan", "score"]


def deployment(model: Optional[str] = None, *, replicas: Optional[int] = None,
               threads_per_replica: int = 1,
               autoscale: Optional[str] = None, settings: Optional["Settings"] = None) -> Any:
    """The Serve application of `kime serve` over `model` (a source `kime.load` takes; None:
    the checkpoints `settings` name, or Laya's Router), in `replicas` replicas (default 1) of
    `threads_per_replica` threads and CPUs each, or between the bounds of `autoscale`
    (`"MIN:MAX"`, starting at `replicas`); `settings` (a `kime.serve.Settings`) are the other
    `kime serve` settings. Run it with `serve.run(app, route_prefix="/")`."""
    from .serve.on_ray import deployment as build

    return build(model, replicas=replicas, threads_per_replica=threads_per_replica,
                 autoscale=autoscale, settings=settings)
