"""A checkpoint's weights in the CPU backend's layout, converted once and cached on disk.

The blob holds every GEMM weight packed for the micro-kernels of one ISA, the vectors in FP32,
the token embedding as FP16 bits (widened per gathered token, halving its memory) and the RoPE
tables. It is written to `<cache>/kime/packed/` keyed by a fingerprint of the checkpoint, the
kime version, the ISA (for INT8 also the qgemm kernel set) and the layout version, and later
loads map it from the file instead of repacking. A cache file is trusted only when its header,
size and sampled checksum all match; anything else is rebuilt (written to a temporary file and
renamed, so a crash never leaves a half-written cache behind).
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
import tempfile
import zlib
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np

from ..checkpoint import Checkpoint

LAYOUT_VERSION = 1
MAGIC = b"KIMEPACK"
ALIGN = 64
HEADER_ROOM = 1 << 16
SAMPLE_STRIDE = 1 << 18  # checksum 4 KiB of every 256 KiB: catches truncation and overwrites fast
SAMPLE_BYTES = 1 << 12
MAX_POSITIONS = 8192


def cache_dir() -> str:
    """Where packed weights live: $KIME_CACHE, else $XDG_CACHE_HOME/kime, else ~/.cache/kime."""
    root = os.environ.get("KIME_CACHE")
    if not root:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = os.path.join(base, "kime")
    return os.path.join(root, "packed")


def fingerprint(path: str) -> str:
    """A content fingerprint of `model.safetensors` that costs milliseconds, not a full hash:
    the header (every tensor's name, shape and offset), the size, and 64 KiB samples spread over
    the data. Two checkpoints that differ anywhere in their names or shapes, or in the sampled
    bytes, get different keys; the config files are hashed whole."""
    h = hashlib.sha256()
    weights = os.path.join(path, "model.safetensors")
    size = os.path.getsize(weights)
    h.update(str(size).encode())
    with open(weights, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        h.update(f.read(header_len))
        for i in range(64):
            f.seek(8 + header_len + (size - 8 - header_len) * i // 64)
            h.update(f.read(1024))
    for name in ("rl_agent_config.json", os.path.join("encoder", "config.json")):
        with open(os.path.join(path, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()[:32]


def spec_of(ck: Checkpoint, int8: bool = False) -> Dict[str, object]:
    enc = ck.encoder
    return {
        "int8": int(int8),
        "d": enc.hidden, "vocab": enc.vocab, "layers": enc.layers, "heads": enc.heads,
        "inter": enc.intermediate, "half_window": enc.half_window, "norm_eps": enc.norm_eps,
        "max_pos": max(MAX_POSITIONS, ck.config.max_len), "head_layers": ck.config.head_layers,
        "head_heads": ck.head_heads, "n_act": ck.config.n_act,
        "global_layers": [int(g) for g in enc.global_layers],
    }


def _entries(ck: Checkpoint, pack: Callable[..., np.ndarray],
             qpack: Optional[Callable[..., np.ndarray]] = None) -> List[Tuple[str, Callable[[], np.ndarray]]]:
    """(name, producer) for every array of the blob, producers called one at a time so the
    FP32 copies of the whole checkpoint never sit in memory together. With `qpack`, the encoder
    and decision-head GEMM weights are packed as INT8; the scorer and act head stay FP32."""
    w = ck.weights
    enc = ck.encoder
    out: List[Tuple[str, Callable[[], np.ndarray]]] = []

    def vec(name: str, key: str) -> None:
        if key in w:
            out.append((name, lambda: w.fresh(key)))

    def mat(name: str, key: str, geglu: bool = False, fp32: bool = False) -> None:
        packer = pack if (fp32 or qpack is None) else qpack
        out.append((name, lambda: packer(w.fresh(key), geglu=geglu)))

    out.append(("tok_emb", lambda: w.raw("encoder.embeddings.tok_embeddings.weight").view(np.uint16)))
    vec("emb_norm.w", "encoder.embeddings.norm.weight")
    vec("emb_norm.b", "encoder.embeddings.norm.bias")
    vec("final_norm.w", "encoder.final_norm.weight")
    vec("final_norm.b", "encoder.final_norm.bias")
    for i in range(enc.layers):
        p, q = "encoder.layers.%d." % i, "enc.%d." % i
        vec(q + "norm.w", p + "attn_norm.weight")
        vec(q + "norm.b", p + "attn_norm.bias")
        mat(q + "qkv", p + "attn.Wqkv.weight")
        vec(q + "qkv.b", p + "attn.Wqkv.bias")
        mat(q + "out", p + "attn.Wo.weight")
        vec(q + "out.b", p + "attn.Wo.bias")
        vec(q + "norm2.w", p + "mlp_norm.weight")
        vec(q + "norm2.b", p + "mlp_norm.bias")
        mat(q + "up", p + "mlp.Wi.weight", geglu=True)
        vec(q + "up.b", p + "mlp.Wi.bias")
        mat(q + "down", p + "mlp.Wo.weight")
        vec(q + "down.b", p + "mlp.Wo.bias")
    def rope(name: str, theta: float, which: int) -> None:
        out.append((name, lambda: _rope(ck, theta)[which]))

    for theta, kind in ((enc.global_theta, "global"), (enc.local_theta, "local")):
        rope("rope.cos_" + kind, theta, 0)
        rope("rope.sin_" + kind, theta, 1)
    vec("type_emb", "type_emb.weight")
    for j in range(ck.config.head_layers):
        p, q = "head.layers.%d." % j, "head.%d." % j
        vec(q + "norm.w", p + "norm1.weight")
        vec(q + "norm.b", p + "norm1.bias")
        mat(q + "qkv", p + "self_attn.in_proj_weight")
        vec(q + "qkv.b", p + "self_attn.in_proj_bias")
        mat(q + "out", p + "self_attn.out_proj.weight")
        vec(q + "out.b", p + "self_attn.out_proj.bias")
        vec(q + "norm2.w", p + "norm2.weight")
        vec(q + "norm2.b", p + "norm2.bias")
        mat(q + "up", p + "linear1.weight")
        vec(q + "up.b", p + "linear1.bias")
        mat(q + "down", p + "linear2.weight")
        vec(q + "down.b", p + "linear2.bias")
    vec("scorer.norm.w", "scorer.0.weight")
    vec("scorer.norm.b", "scorer.0.bias")
    mat("scorer.1", "scorer.1.weight", fp32=True)
    vec("scorer.1.b", "scorer.1.bias")
    out.append(("scorer.3", lambda: np.ascontiguousarray(w.fresh("scorer.3.weight")[0])))
    vec("scorer.3.b", "scorer.3.bias")
    mat("act.0", "act_head.0.weight", fp32=True)
    vec("act.0.b", "act_head.0.bias")
    mat("act.2", "act_head.2.weight", fp32=True)
    vec("act.2.b", "act_head.2.bias")
    return out


def _rope(ck: Checkpoint, theta: float) -> Tuple[np.ndarray, np.ndarray]:
    """[max_pos, hd/2] cos and sin tables in FP32, computed as transformers computes them."""
    from .reference import rope_tables

    hd = ck.encoder.head_dim
    cos, sin = rope_tables(max(MAX_POSITIONS, ck.config.max_len), hd, theta)
    return np.ascontiguousarray(cos[:, : hd // 2]), np.ascontiguousarray(sin[:, : hd // 2])


def _key(ck: Checkpoint, isa_name: str, precision: str = "f32",
         qimpl: Optional[str] = None) -> str:
    """The cache key. An INT8 pack is valid only for the kernel set (`qimpl`, qgemm's impl name)
    that made it, and the ISA alone does not fix that (the CPU's VNNI flavours and KIME_QGEMM
    choose between avx2, avxvnni and vnni512), so INT8 keys name it."""
    from .. import __version__

    if precision == "int8":
        if not qimpl:
            raise ValueError("an INT8 cache key needs the qgemm kernel set it was packed for")
        precision += "-" + qimpl
    return "%s-%s-%s-kime%s-layout%d" % (fingerprint(ck.path), isa_name, precision, __version__,
                                         LAYOUT_VERSION)


def _checksum(mm: np.ndarray) -> int:
    crc = 0
    for start in range(0, mm.shape[0], SAMPLE_STRIDE):
        crc = zlib.crc32(mm[start:start + SAMPLE_BYTES].data, crc)
    return crc


def _write(path: str, key: str, entries: List[Tuple[str, Callable[[], np.ndarray]]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".pack-", suffix=".tmp")
    try:
        table = []
        with os.fdopen(fd, "wb") as f:
            f.seek(HEADER_ROOM)
            offset = 0
            for name, produce in entries:
                arr = produce()
                pad = -offset % ALIGN
                f.write(b"\0" * pad)
                offset += pad
                table.append({"name": name, "offset": offset, "dtype": arr.dtype.str,
                              "shape": list(arr.shape)})
                f.write(np.ascontiguousarray(arr).tobytes())
                offset += arr.nbytes
            f.write(b"\0" * (-offset % ALIGN))
        data = np.memmap(tmp, dtype=np.uint8, mode="r", offset=HEADER_ROOM)
        header = json.dumps({"key": key, "data_bytes": int(data.shape[0]), "entries": table,
                             "checksum": _checksum(data)}).encode()
        del data
        if len(header) + 16 > HEADER_ROOM:
            raise ValueError("packed weight header too large")
        with open(tmp, "r+b") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _read(path: str, key: str) -> Optional[Dict[str, np.ndarray]]:
    """The blob's arrays mapped from `path`, or None when the file is missing, stale or corrupt."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
            if len(head) != 16 or head[:8] != MAGIC:
                return None
            (n,) = struct.unpack("<Q", head[8:])
            if n > HEADER_ROOM - 16:
                return None
            header = json.loads(f.read(n))
        if header.get("key") != key:
            return None
        if os.path.getsize(path) != HEADER_ROOM + header["data_bytes"]:
            return None
        data = np.memmap(path, dtype=np.uint8, mode="r", offset=HEADER_ROOM)
        if _checksum(data) != header["checksum"]:
            return None
        arrays = {}
        for e in header["entries"]:
            dtype = np.dtype(e["dtype"])
            count = int(np.prod(e["shape"])) if e["shape"] else 1
            arrays[e["name"]] = np.frombuffer(data, dtype=dtype, count=count,
                                              offset=e["offset"]).reshape(e["shape"])
        return arrays
    except (OSError, ValueError, KeyError, TypeError):
        return None


def load_packed(ck: Checkpoint, isa: int, isa_name: str, pack: Callable[..., np.ndarray],
                use_cache: bool = True,
                qpack: Optional[Callable[..., np.ndarray]] = None,
                qisa: Optional[int] = None) -> Tuple[Dict[str, np.ndarray], str]:
    """The blob for `ck` on `isa` (INT8 GEMM weights when `qpack` is given, packed for `qisa`,
    the isa with its qgemm impl pinned): mapped from the cache, or packed now (and cached).
    Returns (arrays, how) with how "cache" or "packed"."""
    qimpl = None
    if qpack is not None:
        from . import _qgemm

        qisa = _qgemm.pin(isa) if qisa is None else qisa
        qimpl = _qgemm.impl_name(qisa)
    key = _key(ck, isa_name, "int8" if qpack is not None else "f32", qimpl)
    path = os.path.join(cache_dir(), key + ".kpack")
    if use_cache:
        arrays = _read(path, key)
        if arrays is not None:
            return arrays, "cache"
    entries = _entries(ck, lambda w, geglu=False: pack(w, isa=isa, geglu=geglu),
                       None if qpack is None else
                       lambda w, geglu=False: qpack(w, isa=qisa, geglu=geglu))
    if use_cache:
        try:
            _write(path, key, entries)
            arrays = _read(path, key)
            if arrays is not None:
                return arrays, "packed"
        except OSError:
            pass  # a read-only or full cache directory: run from memory instead
    return {name: produce() for name, produce in entries}, "packed"
