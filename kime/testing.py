"""Write Laya checkpoints with random weights, without PyTorch, for tests and benchmarks.

The published checkpoints are hundreds of megabytes behind a network download, so tests, goldens
and benchmarks need checkpoints they can make on the spot. `write_checkpoint` writes a directory
in exactly the layout Laya 0.4.15's `Agent` loads unchanged (`laya.train.save_checkpoint`'s
layout): `rl_agent_config.json`, `encoder/config.json`, `model.safetensors` in FP16 holding every
tensor of `DecisionModel.state_dict()`, and a `tokenizer/` trained with the `tokenizers` library on
the built-in corpus of `kime._corpus`.

Everything is a function of the shape and the seed: the tokenizer training is deterministic for a
given `tokenizers` version, and each tensor comes from its own generator seeded by `(seed, name)`,
so a tensor's values do not depend on which other tensors a shape has. The weights are scaled so
that a random model still answers with spread: option logits that differ by O(1) and act
probabilities away from 0 and 1 (measured against Laya; see `_BLOCK_GAINS`).

The shapes cover both tokenizer families (byte-level BPE with `[MASK]`-style specials like
ModernBERT, Metaspace BPE with byte fallback and `<mask>`-style specials like mmBERT/Gemma), both
spellings of the ModernBERT config (transformers 4.x and 5.x), and the published model sizes.
"""
from __future__ import annotations

import json
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np

from ._corpus import corpus_lines
from .graph import (DEFAULT_GLOBAL_THETA, DEFAULT_LOCAL_THETA, DEFAULT_NORM_EPS, MAX_POSITIONS,
                    EncoderSpec, Graph, Role, build)

if TYPE_CHECKING:
    from tokenizers import Tokenizer

__all__ = ["SHAPES", "Shape", "write_checkpoint"]

_FULL = "full_attention"
_SLIDING = "sliding_attention"


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
        return [_SLIDING if i % self.global_every else _FULL for i in range(self.num_hidden_layers)]


_ENGLISH_SPECIALS = ["[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]"]
_GEMMA_SPECIALS = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]

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
        layer_types=(_SLIDING, _FULL, _SLIDING),
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
        global_layers=tuple(t == _FULL for t in shape.resolved_layer_types()),
        global_theta=shape.global_rope_theta, local_theta=shape.local_rope_theta)
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


def _weights(shape: Shape, seed: int) -> Dict[str, np.ndarray]:
    return {name: _make_tensor(shape, seed, name, dims, kind, scale)
            for name, dims, kind, scale in _tensor_specs(shape)}


def _special_ids(shape: Shape) -> Dict[str, int]:
    """Token ids of the specials; the trainer puts them first, in list order."""
    if shape.tokenizer == "byte-level":
        unk, cls, sep, pad, mask = range(5)
        return {"unk": unk, "cls": cls, "sep": sep, "pad": pad, "mask": mask, "bos": cls, "eos": sep}
    pad, eos, bos, unk, mask = range(5)
    return {"unk": unk, "cls": bos, "sep": eos, "pad": pad, "mask": mask, "bos": bos, "eos": eos}


def _encoder_config(shape: Shape) -> Dict[str, object]:
    """A ModernBERT config in the spelling transformers 4.x or 5.x writes."""
    ids = _special_ids(shape)
    cfg: Dict[str, object] = {
        "architectures": ["ModernBertModel"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": ids["bos"],
        "classifier_activation": "gelu",
        "classifier_bias": False,
        "classifier_dropout": 0.0,
        "classifier_pooling": "mean",
        "cls_token_id": ids["cls"],
        "decoder_bias": True,
        "deterministic_flash_attn": False,
        "embedding_dropout": 0.0,
        "eos_token_id": ids["eos"],
        "hidden_activation": "gelu",
        "hidden_size": shape.hidden_size,
        "initializer_cutoff_factor": 2.0,
        "initializer_range": 0.02,
        "intermediate_size": shape.intermediate_size,
        "local_attention": shape.local_attention,
        "max_position_embeddings": shape.max_position_embeddings,
        "mlp_bias": False,
        "mlp_dropout": 0.0,
        "model_type": "modernbert",
        "norm_bias": False,
        "norm_eps": shape.norm_eps,
        "num_attention_heads": shape.num_attention_heads,
        "num_hidden_layers": shape.num_hidden_layers,
        "pad_token_id": ids["pad"],
        "sep_token_id": ids["sep"],
        "sparse_pred_ignore_index": -100,
        "sparse_prediction": False,
        "vocab_size": shape.vocab_size,
    }
    if shape.config_spelling == "4.x":
        if shape.layer_types is not None:
            raise ValueError("a 4.x config cannot spell an explicit layer_types pattern")
        cfg.update({
            "global_attn_every_n_layers": shape.global_every,
            "global_rope_theta": shape.global_rope_theta,
            "gradient_checkpointing": False,
            "layer_norm_eps": shape.norm_eps,
            "local_rope_theta": shape.local_rope_theta,
            "position_embedding_type": "absolute",
            "torch_dtype": "float32",
            "transformers_version": "4.48.0",
        })
    elif shape.config_spelling == "5.x":
        cfg.update({
            "dtype": "float32",
            "layer_types": shape.resolved_layer_types(),
            "rope_parameters": {
                _FULL: {"rope_theta": shape.global_rope_theta, "rope_type": "default"},
                _SLIDING: {"rope_theta": shape.local_rope_theta, "rope_type": "default"},
            },
            "tie_word_embeddings": True,
            "transformers_version": "5.0.0",
        })
    else:
        raise ValueError("unknown config spelling %r" % (shape.config_spelling,))
    return dict(sorted(cfg.items()))


def _train_tokenizer(shape: Shape) -> "Tokenizer":
    """Train the shape's BPE on the built-in corpus; deterministic for a `tokenizers` version."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import processors, trainers

    if shape.tokenizer == "byte-level":
        tok = Tokenizer(models.BPE(unk_token="[UNK]"))
        tok.normalizer = normalizers.NFC()
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        specials = [AddedToken(t, special=True, normalized=False, lstrip=(t == "[MASK]"))
                    for t in _ENGLISH_SPECIALS]
        trainer = trainers.BpeTrainer(vocab_size=shape.tokenizer_vocab, special_tokens=specials,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
        tok.train_from_iterator(corpus_lines(), trainer)
        ids = _special_ids(shape)
        tok.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
            special_tokens=[("[CLS]", ids["cls"]), ("[SEP]", ids["sep"])])
        return tok
    if shape.tokenizer != "metaspace":
        raise ValueError("unknown tokenizer kind %r" % (shape.tokenizer,))
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                     decoders.Fuse()])
    specials = [AddedToken(t, special=True, normalized=False) for t in _GEMMA_SPECIALS]
    trainer = trainers.BpeTrainer(vocab_size=shape.tokenizer_vocab - 256, special_tokens=specials,
                                  show_progress=False)
    tok.train_from_iterator(corpus_lines(), trainer)
    return _with_byte_tokens(tok, _special_ids(shape))


def _with_byte_tokens(tok: "Tokenizer", ids: Dict[str, int]) -> "Tokenizer":
    """Insert the 256 `<0xNN>` byte tokens after the specials, as SentencePiece vocabularies have.

    The BPE trainer knows nothing of byte fallback, so without them every character outside the
    trained alphabet would be `<unk>`. They join the model vocabulary, not the added tokens, so a
    literal "<0x41>" in a text is not matched as one.
    """
    from tokenizers import Tokenizer, processors

    data = json.loads(tok.to_str())
    old_vocab = data["model"]["vocab"]
    ordered = sorted(old_vocab.items(), key=lambda kv: kv[1])
    n_special = len(_GEMMA_SPECIALS)
    names = [k for k, _ in ordered[:n_special]]
    names += ["<0x%02X>" % b for b in range(256)]
    names += [k for k, _ in ordered[n_special:]]
    data["model"]["vocab"] = {name: i for i, name in enumerate(names)}
    remap = {old_vocab[name]: i for i, name in enumerate(names) if name in old_vocab}
    for added in data["added_tokens"]:
        added["id"] = remap[added["id"]]
    rebuilt = Tokenizer.from_str(json.dumps(data))
    rebuilt.post_processor = processors.TemplateProcessing(
        single="<bos> $A <eos>", pair="<bos> $A <eos> $B <eos>",
        special_tokens=[("<bos>", ids["bos"]), ("<eos>", ids["eos"])])
    return rebuilt


def _added_token(content: str, lstrip: bool = False) -> Dict[str, object]:
    return {"content": content, "lstrip": lstrip, "normalized": False, "rstrip": False,
            "single_word": False, "special": True}


def _write_tokenizer(shape: Shape, out: Path) -> int:
    """Write tokenizer.json and its transformers configs; returns the tokenizer vocabulary size.

    The English shapes name their specials in both configs and write the mask as a
    `{"content": ...}` object, the way ModernBERT ships it; the multilingual shape names them in
    `special_tokens_map.json` only, so a loader must read both files to find the mask.
    `tokenizer_class` is set so Laya's `_fix_tokenizer_config` leaves the files untouched.
    """
    out.mkdir(parents=True, exist_ok=True)
    tok = _train_tokenizer(shape)
    tok.save(str(out / "tokenizer.json"), pretty=True)
    base = {
        "clean_up_tokenization_spaces": False,
        "model_max_length": shape.model_max_length,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    if shape.tokenizer == "byte-level":
        mask = {k: v for k, v in _added_token("[MASK]", lstrip=True).items() if k != "special"}
        config = dict(base)
        # transformers reads an object-valued special token in tokenizer_config.json only with
        # the legacy "__type" tag (without it: TypeError); special_tokens_map.json takes it bare.
        config.update({
            "added_tokens_decoder": {
                str(i): _added_token(t, lstrip=(t == "[MASK]")) for i, t in enumerate(_ENGLISH_SPECIALS)
            },
            "cls_token": "[CLS]",
            "mask_token": dict({"__type": "AddedToken"}, **mask),
            "pad_token": "[PAD]",
            "sep_token": "[SEP]",
            "unk_token": "[UNK]",
        })
        special_map: Dict[str, object] = {
            "cls_token": "[CLS]", "mask_token": mask, "pad_token": "[PAD]",
            "sep_token": "[SEP]", "unk_token": "[UNK]",
        }
    else:
        config = dict(base)
        special_map = {
            "bos_token": "<bos>", "cls_token": "<bos>", "eos_token": "<eos>", "mask_token": "<mask>",
            "pad_token": "<pad>", "sep_token": "<eos>", "unk_token": "<unk>",
        }
    _write_json(out / "tokenizer_config.json", dict(sorted(config.items())))
    _write_json(out / "special_tokens_map.json", special_map)
    return tok.get_vocab_size()


def _write_json(path: Path, payload: object) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump(payload, f, indent=2, ensure_ascii=False)
        f.write("\n")


def _usable_temperature(value: object) -> bool:
    """A temperature Laya applies as it is: a number within [0.5, 5]."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and 0.5 <= float(value) <= 5.0)


def write_checkpoint(path: Union[str, Path], shape: str = "tiny", seed: int = 0,
                     odd_temperatures: bool = False) -> Path:
    """Write a random-weight Laya checkpoint of a named shape to `path` and return the path.

    The directory loads unchanged in Laya 0.4.15 (`laya.Agent(path)`), so tests can compare kime
    with the reference on it, and kime can be exercised without downloading a real checkpoint.
    Same shape, seed and `tokenizers` version give the same bytes. Existing files are replaced.

    A shape's calibration includes temperatures that Laya clamps or replaces (below 0.5, above 5,
    not a number), which the tests and goldens need; they are written only with
    `odd_temperatures=True`, so a checkpoint made to try kime loads without a warning.
    """
    if shape not in SHAPES:
        raise ValueError("unknown checkpoint shape %r; use one of %s" % (shape, sorted(SHAPES)))
    spec = SHAPES[shape]
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)

    n_tokens = _write_tokenizer(spec, root / "tokenizer")
    if n_tokens > spec.vocab_size:
        raise ValueError("shape %r: the tokenizer has %d tokens but the embedding only %d rows"
                         % (shape, n_tokens, spec.vocab_size))

    (root / "encoder").mkdir(exist_ok=True)
    _write_json(root / "encoder" / "config.json", _encoder_config(spec))
    _write_json(root / "rl_agent_config.json", {
        "encoder": spec.encoder,
        "head_layers": spec.head_layers,
        "act_costs": dict(spec.act_costs),
        "max_len": spec.max_len,
        "head_max_len": spec.head_max_len,
        "temperature": list(spec.temperature),
        "temperature_by_options": dict(spec.temperature_by_options) if odd_temperatures
        else {k: v for k, v in spec.temperature_by_options.items() if _usable_temperature(v)},
        "amp_dtype": "bf16",
    })

    from safetensors.numpy import save_file

    weights = root / "model.safetensors"
    save_file(_weights(spec, seed), str(weights), metadata={"format": "pt"})
    # safetensors creates the file 0600; give it the umask-derived mode the JSON files got.
    shutil.copymode(root / "rl_agent_config.json", weights)
    return root
