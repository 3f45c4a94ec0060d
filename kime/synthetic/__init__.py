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

import shutil
from pathlib import Path
from typing import Dict, Union

from .shapes import FULL, SHAPES, SLIDING, Shape, graph_of, random_weights
from .vocab import TOKENIZER_TEMPLATES, special_ids, write_json, write_tokenizer

__all__ = ["OPTION_LAYOUTS", "SHAPES", "Shape", "TOKENIZER_TEMPLATES", "graph_of",
           "write_checkpoint"]

OPTION_LAYOUTS = ("sequential", "parallel")
"""Laya's option layouts (`laya.common.OPTION_LAYOUTS`): where a row's option slots sit."""


def _encoder_config(shape: Shape) -> Dict[str, object]:
    """A ModernBERT config in the spelling transformers 4.x or 5.x writes."""
    ids = special_ids(shape)
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
                FULL: {"rope_theta": shape.global_rope_theta, "rope_type": "default"},
                SLIDING: {"rope_theta": shape.local_rope_theta, "rope_type": "default"},
            },
            "tie_word_embeddings": True,
            "transformers_version": "5.0.0",
        })
    else:
        raise ValueError("unknown config spelling %r" % (shape.config_spelling,))
    return dict(sorted(cfg.items()))



def _usable_temperature(value: object) -> bool:
    """A temperature Laya applies as it is: a number within [0.5, 5]."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool)
            and 0.5 <= float(value) <= 5.0)


def write_checkpoint(path: Union[str, Path], shape: str = "tiny", seed: int = 0,
                     odd_temperatures: bool = False, option_layout: str = "sequential",
                     tokenizer_template: str = "default") -> Path:
    """Write a random-weight Laya checkpoint of a named shape to `path` and return the path.

    The directory loads unchanged in Laya 0.4.15 (`laya.Agent(path)`), so tests can compare kime
    with the reference on it, and kime can be exercised without downloading a real checkpoint.
    Same shape, seed and `tokenizers` version give the same bytes. Existing files are replaced.

    A shape's calibration includes temperatures that Laya clamps or replaces (below 0.5, above 5,
    not a number), which the tests and goldens need; they are written only with
    `odd_temperatures=True`, so a checkpoint made to try kime loads without a warning.

    `option_layout="parallel"` writes `"option_layout": "parallel"` into `rl_agent_config.json`,
    as `laya.train` does for a checkpoint trained on Laya's parallel option layout (the same
    weights read as another model there); the default writes no key, Laya's sequential layout.

    `tokenizer_template` picks what the tokenizer's post-processor adds around a text, which is
    what Laya's embedder (`embed_fn_from_agent`) runs on: the shape's own (`default`), nothing
    (`bare`) or `<bos> $A <eos>` with tokens of their own (`bos-eos`); see
    `TOKENIZER_TEMPLATES`. Only `tokenizer/` changes with it, and decisions do not (Laya lays
    their rows out itself).
    """
    if shape not in SHAPES:
        raise ValueError("unknown checkpoint shape %r; use one of %s" % (shape, sorted(SHAPES)))
    if option_layout not in OPTION_LAYOUTS:
        raise ValueError("option_layout must be one of %s, got %r"
                         % (", ".join(OPTION_LAYOUTS), option_layout))
    spec = SHAPES[shape]
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)

    n_tokens = write_tokenizer(spec, root / "tokenizer", tokenizer_template)
    if n_tokens > spec.vocab_size:
        raise ValueError("shape %r: the tokenizer has %d tokens but the embedding only %d rows"
                         % (shape, n_tokens, spec.vocab_size))

    (root / "encoder").mkdir(exist_ok=True)
    write_json(root / "encoder" / "config.json", _encoder_config(spec))
    config: Dict[str, object] = {
        "encoder": spec.encoder,
        "head_layers": spec.head_layers,
        "act_costs": dict(spec.act_costs),
        "max_len": spec.max_len,
        "head_max_len": spec.head_max_len,
        "temperature": list(spec.temperature),
        "temperature_by_options": dict(spec.temperature_by_options) if odd_temperatures
        else {k: v for k, v in spec.temperature_by_options.items() if _usable_temperature(v)},
        "amp_dtype": "bf16",
    }
    if option_layout != "sequential":
        # Only a parallel checkpoint names its layout, so a sequential one keeps today's bytes.
        config["option_layout"] = option_layout
    write_json(root / "rl_agent_config.json", config)

    from safetensors.numpy import save_file

    weights = root / "model.safetensors"
    save_file(random_weights(spec, seed), str(weights), metadata={"format": "pt"})
    # safetensors creates the file 0600; give it the umask-derived mode the JSON files got.
    shutil.copymode(root / "rl_agent_config.json", weights)
    return root
