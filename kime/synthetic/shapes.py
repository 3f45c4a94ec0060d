"""The checkpoint shapes and their random weights: what distinguishes one synthetic
checkpoint from another (`Shape`, `SHAPES`), the model graph each one has, and every tensor of
Laya's `DecisionModel.state_dict()` drawn from a generator seeded by `(seed, name)`."""
from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..graph import (DEFAULT_GLOBAL_THETA, DEFAULT_LOCAL_THETA, DEFAULT_NORM_EPS, MAX_POSITIONS,
                     EncoderSpec, Graph, Role, build)

FULL = "full_attention"
SLIDING = "sliding_attention"
"""transformers' names of the two attention kinds, as a 5.x config spells `layer_types`."""


@dataclass(frozen=True)
class Shape:
    """Everything that distinguishes one test checkpoint from another, except the seed.

    `layer_types` overrides the "global every `global_every` layers" pattern; only the 5.x config
    spelling can express an arbitrary pattern, so a shape that sets it must use that spelling.
    `vocab_size` is the number of embedding rows, which may exceed the tokenizer's vocabulary the
    way ModernBERT's 50368 rows exceed its 50280 tokens.
    """

    encoder: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    local_attention: int
    vocab_size: int
    tokenizer: str  # "byte-level" (ModernBERT-like) or "metaspace" (mmBERT/Gemma-like)
    tokenizer_vocab: int
    config_spelling: str  # "4.x" or "5.x"
    head_layers: int
    max_len: int
    head_max_len: int
    act_costs: Mapping[str, float]
    temperature: Tuple[float, float, float]
    temperature_by_options: Mapping[str, object]
    global_every: int = 3
    layer_types: Optional[Tuple[str, ...]] = None
    global_rope_theta: float = DEFAULT_GLOBAL_THETA
    local_rope_theta: float = DEFAULT_LOCAL_THETA
    norm_eps: float = DEFAULT_NORM_EPS
    max_position_embeddings: int = MAX_POSITIONS
    model_max_length: int = 8192

    def resolved_layer_types(self) -> List[str]:
        """The attention kind of every encoder layer, as transformers derives it."""
        if self.layer_types is not None:
            return list(self.layer_types)
        return [SLIDING if i % self.global_every else FULL for i in range(self.num_hidden_layers)]


SHAPES: Dict[str, Shape] = {
    "tiny": Shape(
        encoder="answerdotai/ModernBERT-base",
        hidden_size=128,
        num_hidden_layers=4,
        num_attention_heads=4,
        intermediate_size=192,
        local_attention=16,
        vocab_size=1536,
        tokenizer="byte-level",
        tokenizer_vocab=1500,
        config_spelling="4.x",
        head_layers=2,
        max_len=160,
        head_max_len=64,
        act_costs={"ask": 0.1, "abstain": 0.05},
        temperature=(1.2, 0.8, 1.1),
        temperature_by_options={"choice:2": 1.3, "choice:3-5": 0.9, "choice:11+": 0.1006,
                                "score:3-5": 1.7, "noul:2": 7.5},
    ),
    "multilingual-tiny": Shape(
        encoder="jhu-clsp/mmBERT-base",
        hidden_size=96,
        num_hidden_layers=3,
        num_attention_heads=3,
        intermediate_size=160,
        local_attention=8,
        vocab_size=1600,
        tokenizer="metaspace",
        tokenizer_vocab=1550,
        config_spelling="5.x",
        # Not the every-third pattern, so a reader that ignores `layer_types` gets it wrong.
        layer_types=(SLIDING, FULL, SLIDING),
        global_rope_theta=160000.0,
        local_rope_theta=160000.0,
        head_layers=1,
        max_len=200,
        head_max_len=80,
        act_costs={"ask": 0.1},
        temperature=(1.0, 1.3, 0.9),
        temperature_by_options={"choice:3-5": "warm", "score:6-10": 0.4},
    ),
    "base": Shape(
        encoder="answerdotai/ModernBERT-base",
        hidden_size=768,
        num_hidden_layers=22,
        num_attention_heads=12,
        intermediate_size=1152,
        local_attention=128,
        vocab_size=50368,
        tokenizer="byte-level",
        tokenizer_vocab=2500,
        config_spelling="4.x",
        head_layers=2,
        max_len=512,
        head_max_len=192,
        act_costs={"ask": 0.1, "abstain": 0.05},
        temperature=(1.0, 1.0, 1.0),
        temperature_by_options={"choice:2": 1.1, "choice:11+": 0.1006},
    ),
    "large": Shape(
        encoder="answerdotai/ModernBERT-large",
        hidden_size=1024,
        num_hidden_layers=28,
        num_attention_heads=16,
        intermediate_size=2624,
        local_attention=128,
        vocab_size=50368,
        tokenizer="byte-level",
        tokenizer_vocab=2500,
        config_spelling="4.x",
        head_layers=2,
        max_len=512,
        head_max_len=192,
        act_costs={"ask": 0.1, "abstain": 0.05},
        temperature=(1.0, 1.0, 1.0),
        temperature_by_options={"choice:2": 1.1, "choice:11+": 0.1006},
    ),
}

# Standard deviation of each weight matrix is gain / sqrt(fan_in), so one setting behaves the same
# at every width. Measured with Laya on `tiny` and `multilingual-tiny`: at these gains the encoder's
# attention is peaked enough for the [MASK] markers (identical tokens) to pick up their own option's
# text, so option logits spread by O(1), while the residual stream stays well scaled through 28
# layers. Smaller attention gains leave every marker with the same state and uniform answers.
# Keyed by the graph's block slots: encoder Wqkv, attn Wo, mlp Wi, mlp Wo; head in_proj,
# out_proj, linear1, linear2.
_BLOCK_GAINS: Dict[str, Dict[str, float]] = {
    "encoder": {"qkv": 1.5, "out": 0.8, "up": 1.0, "down": 0.6},
    "head": {"qkv": 1.0, "out": 0.6, "up": 1.0, "down": 0.6},
}
_SCORER_GAIN = 2.0
_ACT_HEAD_GAIN = 1.0


def graph_of(shape: Shape) -> Graph:
    """The model graph of a shape's checkpoint: what kime reads back from the files written."""
    spec = EncoderSpec(
        hidden=shape.hidden_size, layers=shape.num_hidden_layers,
        heads=shape.num_attention_heads, intermediate=shape.intermediate_size,
        vocab=shape.vocab_size, norm_eps=shape.norm_eps, norm_bias=False, attention_bias=False,
        mlp_bias=False, local_attention=shape.local_attention,
        global_layers=tuple(t == FULL for t in shape.resolved_layer_types()),
        global_theta=shape.global_rope_theta, local_theta=shape.local_rope_theta,
        max_position_embeddings=shape.max_position_embeddings)
    return build(spec, head_layers=shape.head_layers, n_act=len(shape.act_costs) + 1,
                 max_len=shape.max_len)


def _tensor_specs(shape: Shape) -> List[Tuple[str, Tuple[int, ...], str, float]]:
    """(name, shape, kind, scale) for every tensor of Laya's `DecisionModel.state_dict()`.

    kind is "normal" (N(0, scale^2)), "norm" (1 + scale * N), "bias" (scale * N) or
    "temperature"; the names and shapes are the model graph's (`kime.graph`).
    """
    graph = graph_of(shape)
    gains: Dict[str, float] = {}
    for blocks, table in ((graph.layers, _BLOCK_GAINS["encoder"]),
                          (graph.head, _BLOCK_GAINS["head"])):
        for block in blocks:
            for slot, gain in table.items():
                gains[getattr(block, slot).weight] = gain
    for linear in (graph.scorer.hidden, graph.scorer.out):
        gains[linear.weight] = _SCORER_GAIN
    for linear in (graph.act.hidden, graph.act.out):
        gains[linear.weight] = _ACT_HEAD_GAIN
    norm_weights = {norm.weight for norm in graph.norms()}

    specs: List[Tuple[str, Tuple[int, ...], str, float]] = []
    for t in graph.entries():
        if t.role is Role.EMBEDDING or t.name == graph.type_emb:
            specs.append((t.name, t.shape, "normal", 0.5))
        elif t.role is Role.HOST:
            specs.append((t.name, t.shape, "temperature", 0.0))
        elif t.name in gains:  # a weight matrix: [n_out, n_in]
            specs.append((t.name, t.shape, "normal", gains[t.name] / float(np.sqrt(t.shape[1]))))
        elif t.name in norm_weights:
            specs.append((t.name, t.shape, "norm", 0.1))
        else:
            specs.append((t.name, t.shape, "bias", 0.02))
    return specs


def _make_tensor(shape: Shape, seed: int, name: str, dims: Tuple[int, ...], kind: str,
                 scale: float) -> np.ndarray:
    """One FP16 tensor from a generator of its own, so its values depend only on (seed, name)."""
    if kind == "temperature":
        return np.asarray(shape.temperature, dtype=np.float16)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode("utf-8"))])
    values = rng.standard_normal(dims, dtype=np.float32)
    values *= np.float32(scale)
    if kind == "norm":
        values += np.float32(1.0)
    return values.astype(np.float16)


def random_weights(shape: Shape, seed: int) -> Dict[str, np.ndarray]:
    return {name: _make_tensor(shape, seed, name, dims, kind, scale)
            for name, dims, kind, scale in _tensor_specs(shape)}

