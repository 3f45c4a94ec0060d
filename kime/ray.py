"""kime on Ray Data (`pip install 'kime[ray]'`): `Scorer`, a callable class for
`Dataset.map_batches` whose actors each load the model once and answer what
`kime.load(model).predict` answers; `score(ds, model, questions)`, a Dataset with `result` and
`error` added by a pool of those actors; `connect` and `plan`, how a cluster is joined and sized.

The code lives in `kime.jobs.on_ray`, beside the `kime score` / `kime calibrate` machinery it
shares (`--engine ray` runs through the same actors); this module is its public name, so the
jobs never import it and the layering runs one way: `kime.ray` -> `kime.jobs`.
"""
from __future__ import annotations

from .jobs.on_ray import Scorer, connect, plan, score

__all__ = ["Scorer", "connect", "plan", "score"]
