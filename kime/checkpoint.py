"""A checkpoint directory -> its configs, its FP32 weights and its tokenizer, with Laya's checks.

Layout (written by Laya's `save_checkpoint`): `rl_agent_config.json`, `encoder/config.json` (a
ModernBERT config in the transformers 4.x or 5.x spelling), `model.safetensors` (FP16) and
`tokenizer/`. A missing file or a missing, unexpected or misshaped tensor is refused with a message
naming it, before any forward pass could read garbage. The tensors a config implies are the
model graph's (`kime.graph`); this module only reads and checks the files.
"""
from __future__ import annotations

import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Mapping, Tuple

import numpy as np

from .errors import CheckpointError, CheckpointFileMissing, Unsupported
from .graph import (DEFAULT_GLOBAL_THETA, DEFAULT_LOCAL_THETA, DEFAULT_NORM_EPS, GELU_ACTIVATIONS,
                    MAX_POSITIONS, EncoderSpec, Graph, build)
from .tokenizer import Tokenizer


@dataclass(frozen=True)
class AgentConfig:
    """`rl_agent_config.json`, the parts inference reads."""

    encoder_name: str
    head_layers: int
    n_act: int
    max_len: int
    head_max_len: int
    temperature: object
    """As written: `kime.calibration.Temperatures` checks it (three floats)."""
    temperature_by_options: object
    """As written: `Temperatures` checks it (a dict of bucket -> temperature)."""
    raw: Dict[str, Any] = field(repr=False)
    option_layout: str = "sequential"
    """Laya's `option_layout`: "sequential", or "parallel" (every option slot at the same
    position ids, masked from the others; `kime.layout.parallel_layout`)."""

    @property
    def parallel(self) -> bool:
        """Whether rows are laid out in Laya's parallel option layout."""
        return self.option_layout == "parallel"


@dataclass
class Checkpoint:
    """Everything a backend and the answer builder need, loaded and checked. `graph` is the
    model's computation (kime.graph), which every backend lowers."""

    path: str
    config: AgentConfig
    encoder: EncoderSpec
    graph: Graph = field(repr=False)
    weights: "Weights" = field(repr=False)
    tokenizer: Tokenizer = field(repr=False)

    @property
    def hidden(self) -> int:
        return self.encoder.hidden

    def weight_bytes(self) -> int:
        """The weights' size in FP32, as the reference backend holds them."""
        return self.weights.fp32_bytes()


def _read_json(path: str, what: str) -> Dict[str, Any]:
    if not os.path.isfile(path):
        raise CheckpointFileMissing("the checkpoint has no %s: %s is missing" % (what, path))
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointError("%s does not parse as JSON: %s" % (path, e)) from e
    if not isinstance(data, dict):
        raise CheckpointError("%s must hold a JSON object, got %s" % (path, type(data).__name__))
    return data


def read_agent_config(path: str) -> AgentConfig:
    """Read and check `rl_agent_config.json` (Laya's `_verify_compatibility`, step 1)."""
    cfg_path = os.path.join(path, "rl_agent_config.json")
    cfg = _read_json(cfg_path, "rl_agent_config.json (the file that ships with a Laya checkpoint's "
                     "weights)")
    missing = [k for k in ("encoder", "head_layers") if k not in cfg]
    if missing:
        raise CheckpointError("%s is missing configuration keys %s; is this a Laya decision model?"
                              % (cfg_path, missing))
    layout = cfg.get("option_layout", "sequential")
    if layout not in ("sequential", "parallel"):
        raise CheckpointError("%s: option_layout must be one of sequential, parallel, got %r"
                              % (cfg_path, layout))
    act_costs = cfg.get("act_costs", {})
    if not isinstance(act_costs, dict):
        raise CheckpointError("%s: act_costs must be a dict, got %r" % (cfg_path, act_costs))
    ints = {}
    for key, default in (("head_layers", 2), ("max_len", 512), ("head_max_len", 192)):
        value = cfg.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise CheckpointError("%s: %s must be a non-negative integer, got %r"
                                  % (cfg_path, key, value))
        ints[key] = value
    return AgentConfig(
        encoder_name=str(cfg["encoder"]),
        head_layers=ints["head_layers"],
        n_act=len(act_costs) + 1,
        max_len=ints["max_len"],
        head_max_len=ints["head_max_len"],
        temperature=cfg.get("temperature", [1.0, 1.0, 1.0]),
        temperature_by_options=cfg.get("temperature_by_options", {}),
        raw=cfg,
        option_layout=layout,
    )


def read_encoder_spec(path: str) -> EncoderSpec:
    """Read `encoder/config.json` in either transformers spelling.

    4.x writes `global_rope_theta`, `local_rope_theta` and `global_attn_every_n_layers`; 5.x
    writes `rope_parameters` per layer type and `layer_types`. mmBERT uses 160000 for both.
    """
    cfg_path = os.path.join(path, "encoder", "config.json")
    c = _read_json(cfg_path, "encoder config")
    try:
        hidden = int(c.get("hidden_size", 768))
        layers = int(c.get("num_hidden_layers", 22))
        heads = int(c.get("num_attention_heads", 12))
        intermediate = int(c.get("intermediate_size", 1152))
        vocab = int(c.get("vocab_size", 50368))
        norm_eps = float(c.get("norm_eps", DEFAULT_NORM_EPS))
        local_attention = int(c.get("local_attention", 128))
        positions = int(c.get("max_position_embeddings", MAX_POSITIONS))
    except (TypeError, ValueError) as e:
        raise CheckpointError("%s: a size is not a number: %s" % (cfg_path, e)) from e
    if positions < 1:
        raise CheckpointError("%s: max_position_embeddings must be positive, got %d"
                              % (cfg_path, positions))
    if heads <= 0 or hidden % heads:
        raise CheckpointError("%s: hidden_size %d is not a multiple of num_attention_heads %d"
                              % (cfg_path, hidden, heads))
    activation = c.get("hidden_activation", "gelu")
    if activation not in GELU_ACTIVATIONS:
        raise Unsupported("%s: hidden_activation %r; kime runs ModernBERT's exact GELU only"
                          % (cfg_path, activation))

    layer_types = c.get("layer_types")
    if layer_types is not None:
        if not isinstance(layer_types, list) or len(layer_types) != layers or any(
                t not in ("full_attention", "sliding_attention") for t in layer_types):
            raise CheckpointError("%s: layer_types must list full_attention/sliding_attention for "
                                  "each of the %d layers, got %r" % (cfg_path, layers, layer_types))
        global_layers = tuple(t == "full_attention" for t in layer_types)
    else:
        every = int(c.get("global_attn_every_n_layers", 3))
        global_layers = tuple(i % every == 0 for i in range(layers))

    global_theta = float(c.get("global_rope_theta", DEFAULT_GLOBAL_THETA))
    local_theta = float(c.get("local_rope_theta", DEFAULT_LOCAL_THETA))
    rope = c.get("rope_parameters")
    if isinstance(rope, dict):
        flat = rope.get("rope_theta")
        for layer_type, is_global in (("full_attention", True), ("sliding_attention", False)):
            params = rope.get(layer_type)
            theta = params.get("rope_theta") if isinstance(params, dict) else flat
            if theta is not None:
                if is_global:
                    global_theta = float(theta)
                else:
                    local_theta = float(theta)
    return EncoderSpec(hidden=hidden, layers=layers, heads=heads, intermediate=intermediate,
                       vocab=vocab, norm_eps=norm_eps, norm_bias=bool(c.get("norm_bias", False)),
                       attention_bias=bool(c.get("attention_bias", False)),
                       mlp_bias=bool(c.get("mlp_bias", False)), local_attention=local_attention,
                       global_layers=global_layers, global_theta=global_theta,
                       local_theta=local_theta, max_position_embeddings=positions)


def graph_of(enc: EncoderSpec, cfg: AgentConfig) -> Graph:
    """The computation of a checkpoint with this encoder and agent config."""
    return build(enc, head_layers=cfg.head_layers, n_act=cfg.n_act, max_len=cfg.max_len)


class Weights(Mapping[str, np.ndarray]):
    """The checkpoint's tensors, read from `model.safetensors` on demand.

    `weights[name]` (or `fresh(name)`) is the tensor converted to FP32, and `raw(name)` the tensor
    as stored (FP16). Nothing is kept here: each backend converts the tensors once to its own
    layout and owns that copy, so closing the backend frees it. Loading checks every name and
    shape from the file's header alone, so a backend that maps a packed cache never reads them.
    """

    def __init__(self, path: str, shapes: Dict[str, Tuple[int, ...]]):
        self.path = path
        self._shapes = shapes

    def __getitem__(self, name: str) -> np.ndarray:
        return self.fresh(name)

    def __contains__(self, name: object) -> bool:
        return name in self._shapes  # from the header: reads no tensor

    def __iter__(self) -> Iterator[str]:
        return iter(self._shapes)

    def __len__(self) -> int:
        return len(self._shapes)

    def raw(self, name: str) -> np.ndarray:
        from safetensors import safe_open

        if name not in self._shapes:
            raise KeyError(name)
        with safe_open(self.path, framework="numpy") as f:
            tensor: np.ndarray = f.get_tensor(name)  # safetensors types it as Any
            return tensor

    def fresh(self, name: str) -> np.ndarray:
        return np.ascontiguousarray(self.raw(name), dtype=np.float32)

    def fp32_bytes(self) -> int:
        return sum(4 * int(np.prod(s)) for s in self._shapes.values())


def _check_extent(weights_path: str) -> None:
    """Refuse a file cut short (an interrupted download or copy) naming the tensors it lost:
    safetensors itself only says the file is "not fully covered". Reads the header alone."""
    size = os.path.getsize(weights_path)
    try:
        with open(weights_path, "rb") as f:
            head = f.read(8)
            if len(head) < 8:
                raise CheckpointError("%s is %d bytes long: too short for a safetensors header; "
                                      "the file is truncated, fetch it again"
                                      % (weights_path, size))
            (n,) = struct.unpack("<Q", head)
            if n > size - 8:
                raise CheckpointError("%s: its header claims %d bytes but the file holds %d; the "
                                      "file is truncated, fetch it again" % (weights_path, n, size))
            header = json.loads(f.read(n))
    except (OSError, ValueError) as e:
        raise CheckpointError("%s does not read as safetensors: its header is not valid JSON "
                              "(%s); the file is corrupted, fetch it again"
                              % (weights_path, e)) from e
    available = size - 8 - n
    if not isinstance(header, dict):
        raise CheckpointError("%s does not read as safetensors: its header is not a JSON object"
                              % weights_path)
    cut = []
    for name, info in header.items():
        offsets = info.get("data_offsets") if isinstance(info, dict) else None
        if isinstance(offsets, list) and len(offsets) == 2 and isinstance(offsets[1], int) \
                and offsets[1] > available:
            cut.append((offsets[0], name))
    if cut:
        cut.sort()
        names = [name for _, name in cut]
        raise CheckpointError(
            "%s is truncated: it holds %d bytes of tensor data, but tensor %s lies past the end%s; "
            "the download or copy was cut short, fetch it again"
            % (weights_path, available, names[0],
               " (and %d more after it)" % (len(names) - 1) if len(names) > 1 else ""))


def load_weights(path: str, graph: Graph) -> Weights:
    """Check every tensor of `model.safetensors` against the graph from the file's header."""
    from safetensors import safe_open

    weights_path = os.path.join(path, "model.safetensors")
    if not os.path.isfile(weights_path):
        raise CheckpointFileMissing("the checkpoint has no weights: %s is missing" % weights_path)
    expected = graph.tensors()
    _check_extent(weights_path)
    try:
        handle = safe_open(weights_path, framework="numpy")
    except Exception as e:  # safetensors raises its own SafetensorError
        raise CheckpointError("%s does not read as safetensors: %s" % (weights_path, e)) from e
    with handle as f:
        names = list(f.keys())
        for prefix in ("encoder.", "type_emb.", "scorer.", "act_head."):
            if not any(n.startswith(prefix) for n in names):
                raise CheckpointError("%s has no '%s' tensors; expected a Laya decision model with "
                                      "an encoder and decision heads" % (weights_path, prefix))
        problems: List[str] = []
        missing = [n for n in expected if n not in names]
        if missing:
            problems.append("missing %d tensors: %s" % (len(missing), ", ".join(missing[:8])
                                                        + (" ..." if len(missing) > 8 else "")))
        unexpected = [n for n in names if n not in expected]
        if unexpected:
            problems.append("unexpected tensors (does the config match the weights?): %s"
                            % ", ".join(unexpected[:8]) + (" ..." if len(unexpected) > 8 else ""))
        for name in names:
            if name in expected:
                shape = tuple(f.get_slice(name).get_shape())
                if shape != expected[name]:
                    problems.append("%s: expected shape %s, found %s"
                                    % (name, expected[name], shape))
    if problems:
        raise CheckpointError("%s does not match its config:\n  - %s"
                              % (weights_path, "\n  - ".join(problems)))
    return Weights(weights_path, expected)


def load_checkpoint(path: str) -> Checkpoint:
    """Load and check a checkpoint directory."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.isdir(path):
        raise CheckpointFileMissing("checkpoint directory not found: %s" % path)
    cfg = read_agent_config(path)
    enc = read_encoder_spec(path)
    tok = Tokenizer(os.path.join(path, "tokenizer"))
    if tok.vocab_size > enc.vocab:
        raise CheckpointError("%s: the tokenizer has %d tokens but the embedding only %d rows"
                              % (path, tok.vocab_size, enc.vocab))
    graph = graph_of(enc, cfg)
    weights = load_weights(path, graph)
    return Checkpoint(path=path, config=cfg, encoder=enc, graph=graph, weights=weights,
                      tokenizer=tok)


def fingerprint(path: str) -> str:
    """What keys every record kime keeps on disk about the checkpoint at `path` (its packed CPU
    weights, the CUDA self-check's verdict): a content fingerprint of `model.safetensors` that
    costs milliseconds, not a full hash:
    the header (every tensor's name, shape and offset), the size and modification time, and 64
    KiB samples spread over the data. Two checkpoints that differ anywhere in their names or
    shapes, or in the sampled bytes, get different keys, and so does a file rewritten in place
    where no sample sees the change; the config files are hashed whole."""
    weights = os.path.join(path, "model.safetensors")
    # The samples see 64 KiB of the file, so its mtime keys it too: a tensor rewritten in place
    # between two samples (an act-head bias is a few bytes) must not map the old pack, or the
    # compiled path runs the old weights where the reference reads the new (issue 23), nor
    # reuse a GPU verdict reached on the old weights.
    st = os.stat(weights)
    return _sampled_digest(path, ("%d %d" % (st.st_size, st.st_mtime_ns)).encode())


def copy_digest(path: str) -> str:
    """A digest of a checkpoint's weights that survives a copy (what a layer choice file is
    bound to): `fingerprint`'s header, samples and config files, with the file's size and
    not its modification time."""
    return _sampled_digest(path, b"%d" % os.path.getsize(os.path.join(path, "model.safetensors")))


def _sampled_digest(path: str, stamp: bytes) -> str:
    """`stamp`, then the safetensors header, 64 samples of 1 KiB spread over the data, and the
    two config files whole."""
    h = hashlib.sha256()
    h.update(stamp)
    weights = os.path.join(path, "model.safetensors")
    size = os.path.getsize(weights)
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
