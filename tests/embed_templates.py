"""The embedding goldens on three tokenizer templates (`tests/goldens/embed_templates.json`,
recorded by `tools/goldens_embed_templates.py`), and their checkpoints: `default` is the committed
`tiny`; the others are written again here by `kime.testing.write_checkpoint` with the recorded
arguments, as the recorder wrote them for Laya."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict

from kime.testing import write_checkpoint

from .paths import GOLDENS, TINY


def _decode(obj: Dict[str, Any]) -> Any:
    # A dict with non-string keys (int labels) is recorded as its items.
    if set(obj) == {"__items__"}:
        return dict(obj["__items__"])
    return obj


DATA = json.loads((GOLDENS / "embed_templates.json").read_text(encoding="utf-8"),
                  object_hook=_decode)


def template_paths(root: Path) -> Dict[str, Path]:
    """Each recorded template's checkpoint directory, writing those not committed under `root`."""
    paths = {}
    for name, spec in DATA["checkpoints"].items():
        if name == "default":
            paths[name] = TINY
        else:
            paths[name] = write_checkpoint(root / name, spec["shape"], seed=spec["seed"],
                                           odd_temperatures=spec["odd_temperatures"],
                                           tokenizer_template=spec["tokenizer_template"])
    return paths
