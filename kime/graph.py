"""The Laya decision model as one device-free graph: every tensor's name and shape, every
constant, and the structure each backend lowers.

A Laya checkpoint is transformers' `ModernBertModel` (the encoder) under Laya 0.4.15's
`DecisionModel` (a type embedding, a pre-norm transformer head, a scorer per option marker and an
act head). Checkpoint validation (`checkpoint.load_weights`), the test writer (`testing`), the
NumPy oracle (`_cpu/reference.py`), the CPU packer (`_cpu/weights.py`) and the CUDA lowering
(`_cuda/backend.py`) all read the model from here, so adding a tensor or a head variant is one
edit here plus the kernels that compute it.

The forward pass, one row per question (a row sees exactly its own tokens; nothing is padded):

1. Embedding lookup, then LayerNorm without bias (`norm_eps`).
2. Each encoder layer: `x += out(attn(norm(x)))` (no norm at layer 0), then
   `x += down(gelu(a) * g)` where `[a, g] = up(norm2(x))` split in halves; GELU is the exact erf
   form. Attention splits `qkv` into heads of `hidden / heads`, rotates q and k (rotate-half
   RoPE with the layer's theta) and scales by `head_dim ** -0.5`. A global layer attends to the
   whole row; a local one lets query i see key j only where `|i - j| <= half_window`.
3. Final LayerNorm (no bias), then `x += type_emb[qtype]` on every token (choice 0, score 1,
   noul 2).
4. Each decision-head layer (torch's pre-norm `nn.TransformerEncoderLayer`, `max(1, d // 64)`
   heads, biases, no RoPE, eps `HEAD_NORM_EPS`): `x += out(MHA(norm(x)))`, then
   `x += down(relu(up(norm2(x))))`.
5. The scorer on the rows at the option markers: LayerNorm, Linear(d, d), GELU, Linear(d, 1):
   one logit per option.
6. The act head: `p = softmax(logits)`, `k = max(options, 2)`,
   `H = -sum(p log max(p, 1e-9)) / log k`, features `[top1, top1 - top2, H, k / 255]` (top2 is 0
   for one option); `act = softmax(out(gelu(hidden([x[0], features]))))`.
"""
from __future__ import annotations

import enum
import functools
import math
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional, Tuple, Union

import numpy as np

HEAD_NORM_EPS = 1e-5
"""nn.LayerNorm's default eps: the decision head's and the scorer's norms."""
ACT_HIDDEN = 256
"""The act head's hidden width: Laya's `Linear(d + 4, 256) -> GELU -> Linear(256, n_act)`."""
ACT_FEATURES = ("top1", "margin", "entropy", "options")
"""What the act head reads besides the first token's state, in order (step 6 above)."""
ACT_PROB_FLOOR = 1e-9
"""The act head's entropy feature takes log(max(p, this)), as Laya does."""
ACT_OPTION_SCALE = 255.0
"""The act head's option-count feature is k / this, as Laya does."""
QUESTION_TYPES = 3
"""choice, score, noul: the rows of `type_emb` and the per-type temperatures."""
DECISION_HEAD_DIM = 64
"""Laya sizes the decision head's attention as `max(1, d // 64)` heads."""
DEFAULT_GLOBAL_THETA = 160000.0
DEFAULT_LOCAL_THETA = 10000.0
"""ModernBERT's RoPE bases when a config names none (mmBERT sets 160000 for both)."""
DEFAULT_NORM_EPS = 1e-5
"""ModernBERT's `norm_eps` when a config names none."""
MAX_POSITIONS = 8192
"""ModernBERT's `max_position_embeddings`: the rows of the RoPE tables a backend builds (more
when a checkpoint's `max_len` asks for them)."""
GELU_ACTIVATIONS = ("gelu", "gelu_python")
"""The encoder activations kime runs; transformers computes both as the exact erf form."""


@dataclass(frozen=True)
class EncoderSpec:
    """The ModernBERT encoder's shape, from `encoder/config.json`."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    norm_eps: float
    norm_bias: bool
    attention_bias: bool
    mlp_bias: bool
    local_attention: int
    global_layers: Tuple[bool, ...]  # per layer: True for full attention, False for the window
    global_theta: float
    local_theta: float
    max_position_embeddings: int = MAX_POSITIONS
    """The positions the config names. RoPE has no table limit in transformers (it computes
    each position's angles), so a row may run past it; a backend's tables start here."""

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def half_window(self) -> int:
        """A local layer lets query i see key j when |i - j| <= this."""
        return self.local_attention // 2


class Role(str, enum.Enum):
    """What a tensor is to a device, so each backend picks its storage without a name list."""

    EMBEDDING = "embedding"
    """The token embedding table: the largest tensor, read a row per token."""
    GEMM = "gemm"
    """A weight multiplied with every token's or marker's state: the bulk of the FLOPs, which
    a device may hold in its reduced precision."""
    SMALL = "small"
    """A small weight a fused kernel applies in FP32 (the scorer's output row, the act head)."""
    VECTOR = "vector"
    """Norm weights and biases, Linear biases and the type embedding: applied in FP32."""
    HOST = "host"
    """Read on the host by the answer builder, never by a kernel (the temperatures)."""


@dataclass(frozen=True)
class Tensor:
    """One tensor of the checkpoint, as `DecisionModel.state_dict()` holds it."""

    name: str
    shape: Tuple[int, ...]
    role: Role


@dataclass(frozen=True)
class Norm:
    """A LayerNorm over `size` features; `bias` is None where the model has none (ModernBERT)."""

    weight: str
    bias: Optional[str]
    eps: float
    size: int

    def tensors(self) -> Iterator[Tensor]:
        yield Tensor(self.weight, (self.size,), Role.VECTOR)
        if self.bias is not None:
            yield Tensor(self.bias, (self.size,), Role.VECTOR)


@dataclass(frozen=True)
class Linear:
    """`y = x @ weight.T + bias`, weight `[n_out, n_in]`.

    `geglu`: the output is the halves `[a, g]` of a GeGLU, `gelu(a) * g` (a packer that fuses
    the epilogue interleaves them)."""

    weight: str
    bias: Optional[str]
    n_out: int
    n_in: int
    role: Role = Role.GEMM
    geglu: bool = False

    def tensors(self) -> Iterator[Tensor]:
        yield Tensor(self.weight, (self.n_out, self.n_in), self.role)
        if self.bias is not None:
            yield Tensor(self.bias, (self.n_out,), Role.VECTOR)


@dataclass(frozen=True)
class Attention:
    """Self-attention over a row: `heads` of `head_dim`, all keys of the row or a window."""

    heads: int
    head_dim: int
    half_window: Optional[int]
    """Query i sees key j where |i - j| <= this; None: the whole row (a global layer)."""
    theta: Optional[float]
    """The RoPE base rotating q and k; None: no rotary embedding (the decision head)."""

    @property
    def is_global(self) -> bool:
        return self.half_window is None


Part = Union[Norm, Linear]


@dataclass(frozen=True)
class Block:
    """One pre-norm transformer layer, encoder or decision head:
    `x += out(attention(norm(x)))`, then `x += down(act(up(norm2(x))))` with act GeGLU when
    `up.geglu`, else ReLU.

    `state_order` lists the parts in the order the checkpoint's state dict holds their tensors
    (ModernBERT registers the norms first, torch's `TransformerEncoderLayer` last)."""

    norm: Optional[Norm]
    """None at encoder layer 0, where ModernBERT's attention norm is the identity."""
    qkv: Linear
    attention: Attention
    out: Linear
    norm2: Norm
    up: Linear
    down: Linear
    state_order: Tuple[str, ...] = field(repr=False)

    def parts(self) -> Iterator[Tuple[str, Part]]:
        """(slot, part) in the order the forward pass applies them; the norm is absent at
        encoder layer 0."""
        for slot in ("norm", "qkv", "out", "norm2", "up", "down"):
            part = getattr(self, slot)
            if part is not None:
                yield slot, part

    def tensors(self) -> Iterator[Tensor]:
        for slot in self.state_order:
            part = getattr(self, slot)
            if part is not None:
                yield from part.tensors()


@dataclass(frozen=True)
class Scorer:
    """`norm -> hidden -> GELU -> out` on each option marker's state: one logit per option."""

    norm: Norm
    hidden: Linear
    out: Linear


@dataclass(frozen=True)
class ActHead:
    """`hidden -> GELU -> out -> softmax` on `[x[0], ACT_FEATURES]`."""

    hidden: Linear
    out: Linear

    @property
    def n_act(self) -> int:
        return self.out.n_out


@dataclass(frozen=True)
class Graph:
    """A checkpoint's whole computation: what every backend builds from (see the module doc)."""

    spec: EncoderSpec
    embedding: str
    emb_norm: Norm
    layers: Tuple[Block, ...]
    final_norm: Norm
    type_emb: str
    head: Tuple[Block, ...]
    scorer: Scorer
    act: ActHead
    temperature: str
    max_positions: int
    """Rows of the RoPE tables a backend keeps: the config's `max_position_embeddings`, or the
    checkpoint's `max_len` when larger. A longer row (a request that raised `max_len`) gets
    tables of its own for its call (`rope_half_tables`)."""

    @property
    def hidden(self) -> int:
        return self.spec.hidden

    @property
    def n_act(self) -> int:
        return self.act.n_act

    @property
    def head_heads(self) -> int:
        return head_heads(self.spec.hidden)

    @property
    def blocks(self) -> Tuple[Block, ...]:
        """The encoder layers, then the decision head's."""
        return self.layers + self.head

    def linears(self) -> Iterator[Linear]:
        """Every Linear, in forward order."""
        for block in self.blocks:
            for _, part in block.parts():
                if isinstance(part, Linear):
                    yield part
        yield from (self.scorer.hidden, self.scorer.out, self.act.hidden, self.act.out)

    def norms(self) -> Iterator[Norm]:
        """Every LayerNorm, in forward order."""

        def of(blocks: Tuple[Block, ...]) -> Iterator[Norm]:
            return (part for block in blocks for _, part in block.parts() if isinstance(part, Norm))

        yield self.emb_norm
        yield from of(self.layers)
        yield self.final_norm
        yield from of(self.head)
        yield self.scorer.norm

    def rope_thetas(self) -> Tuple[float, ...]:
        """The distinct RoPE bases the encoder layers use, in first-use order."""
        return tuple(dict.fromkeys(b.attention.theta for b in self.layers
                                   if b.attention.theta is not None))

    def entries(self) -> Iterator[Tensor]:
        """Every tensor, in state-dict order."""
        d = self.hidden
        yield Tensor(self.embedding, (self.spec.vocab, d), Role.EMBEDDING)
        yield from self.emb_norm.tensors()
        for block in self.layers:
            yield from block.tensors()
        yield from self.final_norm.tensors()
        yield Tensor(self.type_emb, (QUESTION_TYPES, d), Role.VECTOR)
        for block in self.head:
            yield from block.tensors()
        yield from self.scorer.norm.tensors()
        yield from self.scorer.hidden.tensors()
        yield from self.scorer.out.tensors()
        yield from self.act.hidden.tensors()
        yield from self.act.out.tensors()
        yield Tensor(self.temperature, (QUESTION_TYPES,), Role.HOST)

    def tensors(self) -> Dict[str, Tuple[int, ...]]:
        """name -> shape for every tensor Laya's `DecisionModel` holds, in state-dict order."""
        return {t.name: t.shape for t in self.entries()}


def head_heads(hidden: int) -> int:
    """The decision head's attention heads for a model width, as Laya builds it."""
    return max(1, hidden // DECISION_HEAD_DIM)


_ENCODER_ORDER = ("norm", "qkv", "out", "norm2", "up", "down")
_HEAD_ORDER = ("qkv", "out", "up", "down", "norm", "norm2")


def build(spec: EncoderSpec, head_layers: int, n_act: int, max_len: int) -> Graph:
    """The graph of a checkpoint with this encoder, `head_layers` decision-head layers, `n_act`
    act outputs and rows of up to `max_len` tokens."""
    d, inter, eps = spec.hidden, spec.intermediate, spec.norm_eps

    def enc_norm(prefix: str) -> Norm:
        return Norm(prefix + ".weight", prefix + ".bias" if spec.norm_bias else None, eps, d)

    def head_norm(prefix: str) -> Norm:
        return Norm(prefix + ".weight", prefix + ".bias", HEAD_NORM_EPS, d)

    def linear(prefix: str, n_out: int, n_in: int, bias: bool = True, role: Role = Role.GEMM,
               geglu: bool = False) -> Linear:
        return Linear(prefix + ".weight", prefix + ".bias" if bias else None, n_out, n_in,
                      role, geglu)

    layers = []
    for i in range(spec.layers):
        p = "encoder.layers.%d." % i
        is_global = spec.global_layers[i]
        layers.append(Block(
            norm=enc_norm(p + "attn_norm") if i > 0 else None,
            qkv=linear(p + "attn.Wqkv", 3 * d, d, spec.attention_bias),
            attention=Attention(spec.heads, spec.head_dim,
                                None if is_global else spec.half_window,
                                spec.global_theta if is_global else spec.local_theta),
            out=linear(p + "attn.Wo", d, d, spec.attention_bias),
            norm2=enc_norm(p + "mlp_norm"),
            up=linear(p + "mlp.Wi", 2 * inter, d, spec.mlp_bias, geglu=True),
            down=linear(p + "mlp.Wo", d, inter, spec.mlp_bias),
            state_order=_ENCODER_ORDER))
    heads = head_heads(d)
    head = []
    for j in range(head_layers):
        p = "head.layers.%d." % j
        head.append(Block(
            norm=head_norm(p + "norm1"),
            qkv=Linear(p + "self_attn.in_proj_weight", p + "self_attn.in_proj_bias", 3 * d, d),
            attention=Attention(heads, d // heads, None, None),
            out=linear(p + "self_attn.out_proj", d, d),
            norm2=head_norm(p + "norm2"),
            up=linear(p + "linear1", 4 * d, d),
            down=linear(p + "linear2", d, 4 * d),
            state_order=_HEAD_ORDER))
    return Graph(
        spec=spec,
        embedding="encoder.embeddings.tok_embeddings.weight",
        emb_norm=enc_norm("encoder.embeddings.norm"),
        layers=tuple(layers),
        final_norm=enc_norm("encoder.final_norm"),
        type_emb="type_emb.weight",
        head=tuple(head),
        scorer=Scorer(norm=head_norm("scorer.0"), hidden=linear("scorer.1", d, d),
                      out=linear("scorer.3", 1, d, role=Role.SMALL)),
        act=ActHead(hidden=linear("act_head.0", ACT_HIDDEN, d + len(ACT_FEATURES),
                                  role=Role.SMALL),
                    out=linear("act_head.2", n_act, ACT_HIDDEN, role=Role.SMALL)),
        temperature="temperature",
        max_positions=max(spec.max_position_embeddings, max_len),
    )


def _rope_angles(n: int, head_dim: int, theta: float) -> np.ndarray:
    """[n, head_dim / 2] position-times-frequency angles in FP32, as transformers computes them:
    `inv_freq = 1 / theta ** (2i / head_dim)`, then one FP32 product per position.

    The power is taken in float64 by `math.pow` and rounded once to FP32 (what a correctly
    rounded `powf` gives), not by NumPy's `**`: NumPy dispatches its float32 and float64 power to
    SVML on AVX-512 CPUs, whose last bits differ from the AVX2 and aarch64 paths', so the tables
    (and every output after them) would depend on the machine rather than the kernels picked."""
    f32 = np.float32
    exponents = np.arange(0, head_dim, 2, dtype=f32) / f32(head_dim)
    base = float(f32(theta))
    powers = np.array([math.pow(base, float(e)) for e in exponents], dtype=np.float64)
    inv_freq = f32(1.0) / powers.astype(f32)
    angles: np.ndarray = np.arange(n, dtype=f32)[:, None] * inv_freq[None, :]
    return angles


@functools.lru_cache(maxsize=8)
def rope_half_tables(n: int, head_dim: int, theta: float) -> Tuple[np.ndarray, np.ndarray]:
    """cos and sin [n, head_dim / 2] in FP32: the first half of `rope_tables`, which the second
    half repeats, so a kernel reads this half for both (the same bits).

    Cached per shape (a model load asks for each table more than once) and read-only, as the
    cache shares them; a table for one long call is `rope_half_tables_uncached`'s, so the cache
    never keeps it."""
    return rope_half_tables_uncached(n, head_dim, theta)


def rope_half_tables_uncached(n: int, head_dim: int,
                              theta: float) -> Tuple[np.ndarray, np.ndarray]:
    """`rope_half_tables`, computed afresh. Each value is libm's float64 `cos`/`sin` (`math`) of
    the FP32 angle, rounded once to FP32: the same bits on every x86-64 and aarch64 CPU, where
    NumPy's float32 `cos`/`sin` are its own SIMD code per dispatch target (SVML on AVX-512) and
    differ in the last bit. A position's values do not depend on `n`."""
    angles = _rope_angles(n, head_dim, theta).ravel().tolist()
    shape = (n, head_dim // 2)
    cos = np.fromiter(map(math.cos, angles), np.float64, len(angles)).astype(np.float32)
    sin = np.fromiter(map(math.sin, angles), np.float64, len(angles)).astype(np.float32)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rope_tables(n: int, head_dim: int, theta: float) -> Tuple[np.ndarray, np.ndarray]:
    """cos and sin [n, head_dim] in FP32, computed as transformers computes them (the two
    halves repeat `rope_half_tables`)."""
    cos, sin = rope_half_tables(n, head_dim, theta)
    return np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
