"""Which precision each layer runs in a mixed model: the gate's choice, on disk.

`kime gate --mixed` (`kime.mixed_precision`) picks, layer by layer, the lowest precision that keeps
the checkpoint's FP32 answers on the user's own requests, and writes that choice here;
`precision="mixed"` reads it back when the model loads. The file is JSON, beside the checkpoint
(`kime_precision.json`), or, where the checkpoint's directory cannot or should not be written
(a read-only directory, the Hugging Face cache), in kime's cache under the checkpoint's digest
(`<cache>/kime/precision/<digest>.json`). A load looks beside the checkpoint first.

The choice names the checkpoint it was made for by a digest of its weights' header and sampled
bytes (`checkpoint_digest`), not by path, size or time: a copied checkpoint keeps its choice, a
different or retrained one is refused by name instead of running a choice made for other
weights. The digest does not read every byte (a large checkpoint would take seconds), so a
tensor rewritten in place between two samples keeps the old choice; the gate's choice is a
precision preference, never weights, so nothing wrong is computed from a stale one.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from .backend import cache_root
from .checkpoint import copy_digest
from .errors import BadOption

FORMAT = "kime-layer-precision"
VERSION = 1
FILE_NAME = "kime_precision.json"
LAYER_PRECISIONS = ("int8", "bf16", "f32")
"""What a layer may run, from the fastest (and furthest from FP32) to FP32 itself."""


def checkpoint_digest(path: str) -> str:
    """The digest a layer choice is bound to: `kime.checkpoint.copy_digest`, which a copy of
    the checkpoint keeps."""
    return copy_digest(path)


@dataclass(frozen=True)
class LayerChoice:
    """A precision per encoder layer and per decision-head layer, for one checkpoint."""

    encoder: Tuple[str, ...]
    head: Tuple[str, ...]
    digest: str
    """`checkpoint_digest` of the checkpoint the choice was made for."""
    gate: Dict[str, Any] = field(default_factory=dict, compare=False)
    """What the gate measured when it chose (thresholds, agreement, deviation, requests): kept
    for the reader of the file, never read back by the engine."""

    def __post_init__(self) -> None:
        bad = [p for p in self.encoder + self.head if p not in LAYER_PRECISIONS]
        if bad:
            raise BadOption("a layer runs %s, not %s" % (" / ".join(LAYER_PRECISIONS),
                                                         ", ".join(map(repr, sorted(set(bad))))))

    @property
    def layers(self) -> Tuple[str, ...]:
        """Every layer's precision, the encoder's then the decision head's: the CPU backend's
        order."""
        return self.encoder + self.head

    def counts(self) -> Dict[str, int]:
        """How many layers run each precision (every precision named, 0 where none)."""
        return {p: self.layers.count(p) for p in LAYER_PRECISIONS}

    def describe(self) -> str:
        """The encoder's layers in a line, e.g. `int8 x20, bf16 at 3, 7`; the head's after it."""
        def part(layers: Tuple[str, ...]) -> str:
            most = max(LAYER_PRECISIONS, key=layers.count) if layers else "f32"
            rest = ["%s at %s" % (p, ", ".join(str(i) for i, q in enumerate(layers) if q == p))
                    for p in LAYER_PRECISIONS if p != most and p in layers]
            return ", ".join(["%s x%d" % (most, layers.count(most))] + rest)
        return "encoder %s; head %s" % (part(self.encoder), part(self.head))

    def to_json(self) -> Dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "checkpoint_digest": self.digest,
                "encoder": list(self.encoder), "head": list(self.head), "gate": self.gate}


def beside(path: str) -> str:
    """Where a checkpoint's choice lies beside it."""
    return os.path.join(path, FILE_NAME)


def in_cache(digest: str) -> str:
    """Where a checkpoint's choice lies in kime's cache."""
    return os.path.join(cache_root(), "precision", digest + ".json")


def _hub_cache(path: str) -> bool:
    """Whether `path` is a snapshot in the Hugging Face cache, whose files are links into a
    store that other snapshots share: never written into."""
    real = os.path.realpath(path)
    return os.sep + "snapshots" + os.sep in real and (os.sep + "models--") in real


def write_choice(path: str, choice: LayerChoice) -> str:
    """Write `choice` for the checkpoint at `path`, beside it where its directory is writable
    and not the Hugging Face cache, else in kime's cache; returns the file written. The write
    is atomic (a temporary file renamed), so a load never reads half a choice."""
    targets = [] if _hub_cache(path) or not os.access(path, os.W_OK) else [beside(path)]
    targets.append(in_cache(choice.digest))
    text = json.dumps(choice.to_json(), indent=2) + "\n"
    errors = []
    for target in targets:
        try:
            os.makedirs(os.path.dirname(target), exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=".choice-",
                                       suffix=".tmp")
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
            os.chmod(tmp, 0o644)
            os.replace(tmp, target)
            return target
        except OSError as e:
            errors.append("%s: %s" % (target, e.strerror or e))
    raise BadOption("cannot write the layer choice: %s (set KIME_CACHE to a writable directory)"
                    % "; ".join(errors))


def _parse(file: str, text: str) -> LayerChoice:
    try:
        data = json.loads(text)
    except ValueError as e:
        raise BadOption("%s is not JSON (%s); run `kime gate --mixed` again" % (file, e)) from e
    problems = []
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise BadOption("%s is not a kime layer choice (format %r)" % (file, FORMAT))
    if data.get("version") != VERSION:
        problems.append("version %r, this kime reads %d" % (data.get("version"), VERSION))
    for key in ("encoder", "head"):
        value = data.get(key)
        if not isinstance(value, list) or any(p not in LAYER_PRECISIONS for p in value):
            problems.append("%r must list one of %s per layer" % (key, "/".join(LAYER_PRECISIONS)))
    if not isinstance(data.get("checkpoint_digest"), str):
        problems.append("'checkpoint_digest' is missing")
    if problems:
        raise BadOption("%s: %s; run `kime gate --mixed` again" % (file, "; ".join(problems)))
    return LayerChoice(tuple(data["encoder"]), tuple(data["head"]), data["checkpoint_digest"],
                       dict(data.get("gate") or {}))


def find_choice(path: str) -> Optional[str]:
    """The file holding the checkpoint's choice (beside it, then in the cache), or None."""
    for file in (beside(path), in_cache(checkpoint_digest(path))):
        if os.path.isfile(file):
            return file
    return None


def read_choice(path: str, encoder_layers: int, head_layers: int) -> LayerChoice:
    """The choice for the checkpoint at `path`, checked against it: made for these weights (its
    digest) and naming a precision for each of its `encoder_layers` and `head_layers`. Raises
    `BadOption` naming the file and what to do when there is none or it does not fit."""
    digest = checkpoint_digest(path)
    file = find_choice(path)
    if file is None:
        raise BadOption("precision='mixed' needs the layer choice `kime gate --mixed %s` writes; "
                        "there is none at %s or %s" % (path, beside(path), in_cache(digest)))
    with open(file, encoding="utf-8") as f:
        choice = _parse(file, f.read())
    if choice.digest != digest:
        raise BadOption("%s was chosen for other weights (digest %s, this checkpoint's is %s); "
                        "run `kime gate --mixed` on it again" % (file, choice.digest, digest))
    if (len(choice.encoder), len(choice.head)) != (encoder_layers, head_layers):
        raise BadOption("%s names %d encoder and %d head layers; the checkpoint has %d and %d"
                        % (file, len(choice.encoder), len(choice.head), encoder_layers,
                           head_layers))
    return choice
