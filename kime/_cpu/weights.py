"""A checkpoint's weights in the CPU backend's layout, converted once and cached on disk.

The blob holds every GEMM weight packed for the micro-kernels of one ISA (the encoder's and
decision head's in FP32, INT8 or BF16), the vectors in FP32, the token embedding as FP16 bits
(widened per gathered token, halving its memory) and the RoPE tables. It is written to
`<cache>/kime/packed/` keyed by a fingerprint of the checkpoint, the ISA, the precision (for
INT8 also the qgemm kernel set) and what defines the packing: the digest of the C and Cython
sources compiled into this build (`_forward.source_digest`, made by setup.py) and of this
module, `kime.graph` and the file's format, so a change to how weights are packed or laid out
never maps a blob packed before it. Later loads map the file instead of repacking. A cache file
(`kime._cpu.packfile`: its format, how it is written and mapped) is trusted only when its
header, size and checksum of every byte all match; anything else is packed again, with one log
line (`kime.weights`) and no word to the caller.

Which tensors the blob holds, their shapes and their order within a layer come from the model
graph (`kime.graph`); the entry names are the fields of the C model (`csrc/forward.h`) they fill.
"""
from __future__ import annotations

import functools
import hashlib
import logging
import os
import stat
import time
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Set, Tuple

import numpy as np

from ..backend import cache_root
from ..checkpoint import Checkpoint, fingerprint
from ..errors import warn_caller
from ..graph import (Block, Graph, Linear, Norm, rope_half_tables,
                     rope_half_tables_uncached)
from . import packfile
from .packfile import Corrupt

_log = logging.getLogger("kime.weights")

Entries = List[Tuple[str, Callable[[], np.ndarray]]]


@dataclass(frozen=True)
class CpuSpec:
    """The sizes the compiled forward pass (`_forward.Model`, `_forward.Arena`) is built for.

    `qisa` is the INT8 kernel set the GEMM weights are packed for (`_qgemm.pin`), fixed at load
    so the packed bytes, the scratch and every call agree; None unless a layer is INT8. `bf16`:
    the GEMM weights are packed bfloat16 (`_bgemm.pack`). `mix`, in a mixed model, is each
    layer's precision (the encoder's, then the decision head's; `kime.layer_choice`), and
    `bf16` is then False: it names a uniform model. A layer below FP32 runs its attention's
    products in BF16 too (the precision contract, docs/precision.md; `_forward.Model`).
    """

    d: int
    vocab: int
    layers: int
    heads: int
    inter: int
    half_window: int
    norm_eps: float
    max_pos: int
    head_layers: int
    head_heads: int
    n_act: int
    global_layers: Tuple[bool, ...]
    qisa: Optional[int] = None
    bf16: bool = False
    mix: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.bf16 and (self.qisa is not None or self.mix):
            raise ValueError("a model's GEMM weights are INT8, BF16 or mixed, one of them")
        if self.mix and len(self.mix) != self.layers + self.head_layers:
            raise ValueError("a mixed model names a precision for each of its %d layers, not %d"
                             % (self.layers + self.head_layers, len(self.mix)))
        if self.mix and ("int8" in self.mix) != (self.qisa is not None):
            raise ValueError("a mixed model has an INT8 kernel set exactly when a layer is INT8")

    @property
    def int8(self) -> bool:
        """Every layer is INT8 (in a mixed model, `mix` says which are)."""
        return self.qisa is not None and not self.mix

    @property
    def attn_bf16(self) -> bool:
        """Some layer runs attention's products in BF16: every layer below FP32 does."""
        return self.int8 or self.bf16 or any(p != "f32" for p in self.mix)

    @classmethod
    def of(cls, graph: Graph, qisa: Optional[int] = None, bf16: bool = False,
           mix: Tuple[str, ...] = ()) -> "CpuSpec":
        spec = graph.spec
        return cls(d=spec.hidden, vocab=spec.vocab, layers=len(graph.layers), heads=spec.heads,
                   inter=spec.intermediate, half_window=spec.half_window,
                   norm_eps=spec.norm_eps, max_pos=graph.max_positions,
                   head_layers=len(graph.head), head_heads=graph.head_heads, n_act=graph.n_act,
                   global_layers=tuple(b.attention.is_global for b in graph.layers), qisa=qisa,
                   bf16=bf16, mix=tuple(mix))

    def as_dict(self) -> Dict[str, object]:
        """The spec as the Cython boundary reads it."""
        out: Dict[str, object] = {
            "int8": int(self.int8), "bf16": int(self.bf16),
            "d": self.d, "vocab": self.vocab,
            "layers": self.layers, "heads": self.heads, "inter": self.inter,
            "half_window": self.half_window, "norm_eps": self.norm_eps, "max_pos": self.max_pos,
            "head_layers": self.head_layers, "head_heads": self.head_heads, "n_act": self.n_act,
            "global_layers": [int(g) for g in self.global_layers],
        }
        if self.qisa is not None:
            out["qisa"] = self.qisa
        if self.mix:
            out["layer_prec"] = list(self.mix)
        return out


def cache_dir() -> str:
    """Where packed weights live: `packed/` under kime's cache directory (`kime.backend.cache_root`:
    $KIME_CACHE, else $XDG_CACHE_HOME/kime, else ~/.cache/kime)."""
    return os.path.join(cache_root(), "packed")


STALE_TMP_SECONDS = 3600
"""A temporary file of a packing older than this was cut short: no packing takes an hour."""


def _unused(directory: str) -> Iterator[Tuple[str, int, bool, bool]]:
    """Each file of the packed-weight cache at `directory` as (path, bytes, is a blob, unused):
    unused if this build never reads it: a blob another build of kime packed (its key names
    another layout digest, so an upgrade leaves its predecessor's behind), or the temporary
    file of a packing cut short an hour ago or more (a packing in progress is not)."""
    from . import _forward

    mine = "-src%s.kpack" % layout_digest(_forward.source_digest())
    now = time.time()
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:  # deleted while we looked
            continue
        if not stat.S_ISREG(st.st_mode):  # nothing kime writes
            continue
        if entry.name.endswith(".kpack"):
            yield entry.path, st.st_size, True, not entry.name.endswith(mine)
        else:
            yield entry.path, st.st_size, False, (
                entry.name.startswith(".pack-") and entry.name.endswith(".tmp")
                and now - st.st_mtime > STALE_TMP_SECONDS)


def cache_report() -> Dict[str, object]:
    """The packed-weight cache for `kime doctor`: its directory, the blobs in it (count and
    bytes), and the files this build never reads (`_unused`): `prune_cache` deletes those on
    request; nothing else does, since another kime installed beside this one may still use its
    own."""
    directory = cache_dir()
    blobs = other = 0
    blob_bytes = other_bytes = 0
    for _, size, blob, unused in _unused(directory):
        if blob:
            blobs += 1
            blob_bytes += size
        if unused:
            other += 1
            other_bytes += size
    return {"packed": directory, "packed_blobs": blobs, "packed_bytes": blob_bytes,
            "packed_unused": other, "packed_unused_bytes": other_bytes}


def prune_cache() -> Dict[str, object]:
    """Delete the files of the packed-weight cache this build never reads (`cache_report`'s
    `packed_unused`), and say what went: `pruned` and `pruned_bytes`, and `prune_errors`, one
    "path: reason" per file that could not be deleted (the others still go). A process that
    maps a deleted blob keeps its mapping (POSIX keeps the data until it unmaps); another kime
    build that wanted the blob packs it again at its next load."""
    pruned = pruned_bytes = 0
    errors: List[str] = []
    for path, size, _, unused in _unused(cache_dir()):
        if not unused:
            continue
        try:
            os.unlink(path)
        except FileNotFoundError:  # another prune, or the packing it belonged to, got there
            continue
        except OSError as e:
            errors.append("%s: %s" % (path, e.strerror or e))
            continue
        pruned += 1
        pruned_bytes += size
    return {"pruned": pruned, "pruned_bytes": pruned_bytes, "prune_errors": errors}


def _entries(ck: Checkpoint, pack: Callable[..., np.ndarray],
             block_packs: Optional[List[Callable[..., np.ndarray]]] = None) -> Entries:
    """(name, producer) for every array of the blob, producers called one at a time so the
    FP32 copies of the whole checkpoint never sit in memory together. With `block_packs` (one
    packer per layer, the encoder's then the decision head's), each layer's GEMM weights are
    packed by its own (INT8, BF16 or FP32); the scorer and act head stay FP32.

    Entry names are the C model's fields (`forward.h`): `enc.{i}.` and `head.{j}.` followed by a
    block's slot (kime.graph.Block), `.w`/`.b` for a norm's weight and bias, `.b` for a bias."""
    graph, w = ck.graph, ck.weights
    out: Entries = []

    def vector(name: str, key: Optional[str]) -> None:
        if key is not None:
            out.append((name, lambda: w.fresh(key)))

    def norm(name: str, part: Norm) -> None:
        vector(name + ".w", part.weight)
        vector(name + ".b", part.bias)

    def matrix(name: str, part: Linear, packer: Callable[..., np.ndarray]) -> None:
        out.append((name, lambda: packer(w.fresh(part.weight), geglu=part.geglu)))
        vector(name + ".b", part.bias)

    def block(prefix: str, layer: Block, index: int) -> None:
        for slot, part in layer.parts():
            if isinstance(part, Norm):
                norm(prefix + slot, part)
            else:
                matrix(prefix + slot, part, block_packs[index] if block_packs else pack)

    out.append(("tok_emb", lambda: w.raw(graph.embedding).view(np.uint16)))
    norm("emb_norm", graph.emb_norm)
    norm("final_norm", graph.final_norm)
    for i, layer in enumerate(graph.layers):
        block("enc.%d." % i, layer, i)
    for name in ROPE_ENTRIES:
        out.append((name, functools.partial(_rope_entry, graph, name)))
    vector("type_emb", graph.type_emb)
    for j, layer in enumerate(graph.head):
        block("head.%d." % j, layer, len(graph.layers) + j)
    scorer, act = graph.scorer, graph.act
    norm("scorer.norm", scorer.norm)
    matrix("scorer.1", scorer.hidden, pack)
    out.append(("scorer.3", lambda: np.ascontiguousarray(w.fresh(scorer.out.weight)[0])))
    vector("scorer.3.b", scorer.out.bias)
    matrix("act.0", act.hidden, pack)
    matrix("act.2", act.out, pack)
    return out


ROPE_ENTRIES = ("rope.cos_global", "rope.sin_global", "rope.cos_local", "rope.sin_local")
"""The blob's RoPE tables: cos and sin [positions, head_dim / 2] per kind of layer."""


def rope_arrays(graph: Graph, positions: int, cached: bool = True) -> Dict[str, np.ndarray]:
    """The RoPE entries of the blob for `positions` rows. A position's values do not depend on
    how many rows a table has, so tables made for one long row (`cached=False`: not kept by the
    tables' cache) agree with the blob's wherever both reach."""
    tables = rope_half_tables if cached else rope_half_tables_uncached
    out: Dict[str, np.ndarray] = {}
    for theta, kind in ((graph.spec.global_theta, "global"), (graph.spec.local_theta, "local")):
        cos, sin = tables(positions, graph.spec.head_dim, theta)
        out["rope.cos_" + kind], out["rope.sin_" + kind] = cos, sin
    return out


def _rope_entry(graph: Graph, name: str) -> np.ndarray:
    return rope_arrays(graph, graph.max_positions)[name]


@functools.lru_cache(maxsize=None)
def layout_digest(compiled: str) -> str:
    """What defines a blob's packing and layout, as one digest: `compiled`, the build's digest
    of its C and Cython sources (the packers and the forward pass that reads their panels), and
    the bytes of this module (which entries, in which order), of `kime.graph` (the tensors'
    shapes, the RoPE tables) and of `packfile` (the file's format)."""
    from .. import graph

    digest = hashlib.sha256(compiled.encode())
    for module in (__file__, graph.__file__, packfile.__file__):
        with open(module, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:16]


def _key(ck: Checkpoint, isa_name: str, precision: str = "f32",
         qimpl: Optional[str] = None, compiled: Optional[str] = None) -> str:
    """The cache key. An INT8 pack is valid only for the kernel set (`qimpl`, qgemm's impl name)
    that made it, and the ISA alone does not fix that (the CPU's VNNI flavours and KIME_QGEMM
    choose between avx2, avxvnni, vnni512 and amx), so a key with INT8 layers names it. A mixed
    model's `precision` is `mixed.<digest of its layers' precisions>`. `compiled` is the build's
    source digest (`_forward.source_digest()` when not given)."""
    if compiled is None:
        from . import _forward

        compiled = _forward.source_digest()
    if precision == "int8" or (precision.startswith("mixed") and qimpl):
        if not qimpl:
            raise ValueError("an INT8 cache key needs the qgemm kernel set it was packed for")
        precision += "-" + qimpl
    return "%s-%s-%s-src%s" % (fingerprint(ck.path), isa_name, precision,
                               layout_digest(compiled))


@dataclass(frozen=True)
class Packed:
    """A blob's arrays and where they came from."""

    arrays: Dict[str, np.ndarray]
    how: str
    """`cache` (mapped from a file packed earlier) or `packed` (converted now)."""
    path: Optional[str]
    """The cache file the arrays are mapped from; None when they live in memory only (the cache
    is off, or its directory could not be written)."""


def load_packed(ck: Checkpoint, isa: int, isa_name: str, pack: Callable[..., np.ndarray],
                use_cache: bool = True,
                qpack: Optional[Callable[..., np.ndarray]] = None,
                qisa: Optional[int] = None,
                bpack: Optional[Callable[..., np.ndarray]] = None,
                mix: Sequence[str] = ()) -> Packed:
    """The blob for `ck` on `isa`, mapped from the cache or packed now (and cached). With
    `qpack` the GEMM weights are INT8, packed for `qisa`: the isa with its qgemm kernel set
    pinned (`_qgemm.pin`), which names the cache file too. With `bpack` (`_bgemm.pack`) they
    are BF16, cached under their own key, beside the FP32 and INT8 blobs. With `mix` (a
    precision per layer, the encoder's then the decision head's) each layer is packed as it
    names, by `qpack` or `bpack` where it names INT8 or BF16, under a key of that mix."""
    qimpl = None
    int8_pack: Optional[Callable[..., np.ndarray]] = None
    if qpack is not None:
        from . import _qgemm

        if qisa is None:
            raise ValueError("INT8 weights are packed for a pinned qgemm kernel set (qisa)")
        qimpl = _qgemm.impl_name(qisa)
        int8_pack = functools.partial(qpack, isa=qisa)

    def fp32_pack(w: np.ndarray, geglu: bool = False) -> np.ndarray:
        return pack(w, isa=isa, geglu=geglu)

    packers: Dict[str, Callable[..., np.ndarray]] = {"f32": fp32_pack}
    if int8_pack is not None:
        packers["int8"] = int8_pack
    if bpack is not None:
        packers["bf16"] = bpack
    n_layers = len(ck.graph.layers) + len(ck.graph.head)
    if mix:
        if len(mix) != n_layers or any(p not in packers for p in mix):
            raise ValueError("a mixed pack needs a precision per layer (%d) and the packer of "
                             "each, got %r" % (n_layers, list(mix)))
        precision = "mixed.%s" % hashlib.sha256(",".join(mix).encode()).hexdigest()[:12]
        qimpl = qimpl if "int8" in mix else None
        layers = list(mix)
    else:
        if qpack is not None and bpack is not None:
            raise ValueError("the GEMM weights are packed as INT8 or as BF16, not both")
        precision = "int8" if qpack is not None else "bf16" if bpack is not None else "f32"
        layers = [precision] * n_layers
    block_packs = [packers[p] for p in layers]
    key = _key(ck, isa_name, precision, qimpl)
    path = os.path.join(cache_dir(), key + ".kpack")
    if use_cache:
        try:
            arrays = packfile.read(path, key)
        except Corrupt as why:
            _log.warning("packed weights %s cannot be trusted (%s); packing them again", path,
                         why)
            arrays = None
        if arrays is not None:
            return Packed(arrays, "cache", path)
    entries = _entries(ck, fp32_pack, block_packs)
    if use_cache:
        try:
            packfile.write(path, key, entries)
            arrays = packfile.read(path, key)
            if arrays is not None:
                return Packed(arrays, "packed", path)
        except Corrupt as why:  # written, then changed under us: run from memory
            _log.warning("packed weights %s changed as they were written (%s); running from "
                         "memory", path, why)
        except OSError as e:
            _unwritable(os.path.dirname(path), e)
    return Packed({name: produce() for name, produce in entries}, "packed", None)


_warned_dirs: Set[str] = set()


def _unwritable(directory: str, error: OSError) -> None:
    """A read-only or full cache directory: the model runs from memory, and the user is told once
    per directory, since every load will pack again until the cache can be written."""
    if directory in _warned_dirs:
        return
    _warned_dirs.add(directory)
    warn_caller("kime: cannot write packed weights to %s (%s); packing in memory instead, so "
                "every load packs again. Point KIME_CACHE at a writable directory to keep them."
                % (directory, error.strerror or error))
