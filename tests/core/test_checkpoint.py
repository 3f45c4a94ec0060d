"""Checkpoints: the writer's output loads back through the loader, and a broken checkpoint is
refused with a message naming the file or tensor."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import kime
from kime.checkpoint import load_checkpoint
from kime.graph import HEAD_NORM_EPS, Role, rope_half_tables, rope_tables
from kime.synthetic import SHAPES, graph_of

from ..golden_cases import DATA
from ..paths import GOLDENS


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_writer_output_loads_back(tiny_path):
    ck = load_checkpoint(str(tiny_path))
    on_disk = load_file(str(tiny_path / "model.safetensors"))
    assert set(on_disk) == set(ck.graph.tensors()) == set(ck.weights)
    for name, tensor in on_disk.items():
        assert tensor.dtype == np.float16, name
        assert ck.weights[name].dtype == np.float32
        np.testing.assert_array_equal(ck.weights[name], tensor.astype(np.float32))
    raw = json.loads((tiny_path / "encoder" / "config.json").read_text())
    # tiny is written in the transformers 4.x spelling.
    assert "global_attn_every_n_layers" in raw and "layer_types" not in raw
    every = raw["global_attn_every_n_layers"]
    assert ck.encoder.global_layers == tuple(i % every == 0 for i in range(ck.encoder.layers))
    assert ck.encoder.global_theta == raw["global_rope_theta"]
    assert ck.encoder.local_theta == raw["local_rope_theta"]
    assert ck.tokenizer.mask_text == "[MASK]"


def _header(path: Path) -> dict:
    """name -> shape from a safetensors file's JSON header, read without the library."""
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
    return {name: tuple(info["shape"]) for name, info in header.items() if name != "__metadata__"}


@pytest.mark.parametrize("name", sorted(DATA["checkpoints"]))
def test_graph_is_exactly_the_golden_checkpoints_tensors(name):
    """The graph kime builds from a checkpoint's configs, and the one the test writer builds
    from the shape, both name every tensor of the golden file with its shape, and nothing else."""
    path = GOLDENS / DATA["checkpoints"][name]["path"]
    on_disk = _header(path / "model.safetensors")
    assert load_checkpoint(str(path)).graph.tensors() == on_disk
    graph = graph_of(SHAPES[name])
    assert graph.tensors() == on_disk
    order = list(graph.tensors())
    assert order[0] == graph.embedding and order[-1] == "temperature"
    roles = {t.name: t.role for t in graph.entries()}
    gemms = {n for n, r in roles.items() if r is Role.GEMM}
    assert len(gemms) == 4 * (len(graph.layers) + len(graph.head)) + 1  # + the scorer's hidden
    assert roles[graph.embedding] is Role.EMBEDDING and roles["temperature"] is Role.HOST
    assert {lin.weight for lin in graph.linears()} >= gemms
    assert all(b.norm is not None for b in graph.blocks[1:]) and graph.layers[0].norm is None
    assert all(b.norm.eps == HEAD_NORM_EPS for b in graph.head if b.norm)
    assert [b.attention.is_global for b in graph.layers] == [
        t == "full_attention" for t in SHAPES[name].resolved_layer_types()]


def test_rope_half_tables_are_the_first_half_of_the_full_ones():
    full_cos, full_sin = rope_tables(300, 32, 10000.0)
    cos, sin = rope_half_tables(300, 32, 10000.0)
    assert cos.tobytes() == np.ascontiguousarray(full_cos[:, :16]).tobytes()
    assert sin.tobytes() == np.ascontiguousarray(full_sin[:, :16]).tobytes()
    np.testing.assert_array_equal(full_cos[:, 16:], full_cos[:, :16])


def test_multilingual_spelling_and_special_tokens(ml_path):
    ck = load_checkpoint(str(ml_path))
    raw = json.loads((ml_path / "encoder" / "config.json").read_text())
    assert "layer_types" in raw and "rope_parameters" in raw
    assert ck.encoder.global_layers == tuple(t == "full_attention" for t in raw["layer_types"])
    assert ck.encoder.global_theta == ck.encoder.local_theta == 160000.0
    assert ck.tokenizer.mask_text == "<mask>"
    rl = json.loads((ml_path / "rl_agent_config.json").read_text())
    assert ck.config.max_len == rl["max_len"] != 512


def test_special_tokens_as_content_objects(tiny_path, tmp_path):
    path = _copy(tiny_path, tmp_path / "ck")
    cfg_file = path / "tokenizer" / "tokenizer_config.json"
    cfg = json.loads(cfg_file.read_text())
    for role in ("cls_token", "sep_token", "pad_token", "mask_token"):
        text = cfg.get(role)
        text = text["content"] if isinstance(text, dict) else text
        cfg[role] = {"content": text, "lstrip": False, "rstrip": False, "normalized": False,
                     "single_word": False, "special": True}
    cfg_file.write_text(json.dumps(cfg))
    assert load_checkpoint(str(path)).tokenizer.mask_text == "[MASK]"


@pytest.mark.parametrize("name, error", [
    ("rl_agent_config.json", FileNotFoundError),
    ("model.safetensors", kime.CheckpointFileMissing),
    ("encoder/config.json", kime.CheckpointFileMissing),
    ("tokenizer/tokenizer.json", kime.TokenizerError),
])
def test_missing_file_is_named(tiny_path, tmp_path, name, error):
    path = _copy(tiny_path, tmp_path / "ck")
    os.remove(path / name)
    with pytest.raises(error) as info:
        kime.load(str(path))
    assert name.split("/")[-1] in str(info.value)


def _rewrite_weights(path: Path, edit) -> None:
    tensors = load_file(str(path / "model.safetensors"))
    edit(tensors)
    save_file(tensors, str(path / "model.safetensors"))


def test_missing_and_misshaped_tensors_are_named(tiny_path, tmp_path):
    path = _copy(tiny_path, tmp_path / "ck")

    def edit(t):
        del t["encoder.layers.1.mlp.Wi.weight"]
        t["scorer.1.weight"] = t["scorer.1.weight"][:, :-1].copy()
        t["extra.weight"] = np.zeros(3, dtype=np.float16)

    _rewrite_weights(path, edit)
    with pytest.raises(kime.CheckpointError) as info:
        kime.load(str(path))
    text = str(info.value)
    assert "encoder.layers.1.mlp.Wi.weight" in text
    assert "scorer.1.weight: expected shape" in text
    assert "extra.weight" in text


def test_parallel_layout_loads_and_an_unknown_layout_is_refused(tiny_path, tmp_path):
    path = _copy(tiny_path, tmp_path / "ck")
    cfg = json.loads((path / "rl_agent_config.json").read_text())
    cfg["option_layout"] = "parallel"
    (path / "rl_agent_config.json").write_text(json.dumps(cfg))
    ck = load_checkpoint(str(path))
    assert ck.config.parallel and ck.config.option_layout == "parallel"
    cfg["option_layout"] = "interleaved"
    (path / "rl_agent_config.json").write_text(json.dumps(cfg))
    with pytest.raises(kime.CheckpointError, match="option_layout must be one of sequential, "
                       "parallel, got 'interleaved'"):
        kime.load(str(path))


def test_missing_special_token_is_named(tiny_path, tmp_path):
    path = _copy(tiny_path, tmp_path / "ck")
    for name in ("tokenizer_config.json", "special_tokens_map.json"):
        f = path / "tokenizer" / name
        if f.exists():
            cfg = json.loads(f.read_text())
            cfg.pop("mask_token", None)
            f.write_text(json.dumps(cfg))
    with pytest.raises(kime.TokenizerError, match="mask_token"):
        kime.load(str(path))


def test_unknown_name_says_what_was_searched(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(kime.ModelNotFound) as info:
        kime.load("laya-multilingual")
    text = str(info.value)
    assert "convaiinnovations/laya" in text and "multilingual" in text
