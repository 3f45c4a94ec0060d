"""The synthetic checkpoint writer (`kime.synthetic`, and `kime.testing`, the name scripts use).

`tools/make_goldens.py` runs the writer in Laya's environment, which has NumPy, tokenizers and
safetensors but maybe not kime's compiled kernels or its other dependencies, by importing it
without running `kime/__init__.py`. That must keep working as the writer changes.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import kime.synthetic
import kime.testing

ROOT = Path(kime.synthetic.__file__).resolve().parents[2]

_STANDALONE = textwrap.dedent("""
    import importlib, importlib.abc, json, sys, types

    allowed = set(sys.stdlib_module_names) | {"numpy", "tokenizers", "safetensors", "kime"}

    class Only(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            top = name.partition(".")[0]
            if top not in allowed:
                raise ImportError("blocked: %%s" %% name)
            if name in ("kime._cpu", "kime._cuda", "kime.engine"):
                raise ImportError("blocked: %%s" %% name)
            return None

    sys.meta_path.insert(0, Only())
    package = types.ModuleType("kime")  # as make_goldens does: kime/__init__.py never runs
    package.__path__ = [%(root)r + "/kime"]
    sys.modules["kime"] = package
    testing = importlib.import_module("kime.testing")
    testing.write_checkpoint(sys.argv[1], "tiny", seed=0)
    json.dump(sorted(m for m in sys.modules if m.startswith("kime")), sys.stdout)
""")


def _files(root: Path) -> dict:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_kime_testing_is_the_synthetic_writer():
    for name in kime.testing.__all__:
        assert getattr(kime.testing, name) is getattr(kime.synthetic, name), name
    assert {"SHAPES", "Shape", "write_checkpoint"} <= set(kime.testing.__all__)


def test_writer_runs_with_only_numpy_tokenizers_and_safetensors(tmp_path):
    alone = tmp_path / "alone"
    proc = subprocess.run([sys.executable, "-c", _STANDALONE % {"root": str(ROOT)}, str(alone)],
                          capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    loaded = json.loads(proc.stdout)
    assert "kime.synthetic" in loaded and "kime.testing" in loaded
    assert not [m for m in loaded if m.startswith(("kime.engine", "kime._cpu", "kime.laya"))]
    here = kime.testing.write_checkpoint(tmp_path / "here", "tiny", seed=0)
    assert _files(alone) == _files(here)  # the same writer, the same bytes
    assert set(_files(alone)) >= {"model.safetensors", "rl_agent_config.json",
                                  "encoder/config.json", "tokenizer/tokenizer.json"}


def test_a_tokenizer_template_changes_the_tokenizer_alone(tmp_path):
    from tokenizers import Tokenizer

    base = _files(kime.testing.write_checkpoint(tmp_path / "default", "tiny", seed=0,
                                                tokenizer_template="default"))
    assert base == _files(kime.testing.write_checkpoint(tmp_path / "plain", "tiny", seed=0))
    frames = {}
    for template in kime.testing.TOKENIZER_TEMPLATES:
        path = kime.testing.write_checkpoint(tmp_path / template, "tiny", seed=0,
                                             tokenizer_template=template)
        files = _files(path)
        changed = {name for name in base if files[name] != base[name]}
        assert changed <= {"tokenizer/tokenizer.json", "tokenizer/tokenizer_config.json",
                           "tokenizer/special_tokens_map.json"}
        assert bool(changed) == (template != "default")
        tok = Tokenizer.from_file(str(path / "tokenizer" / "tokenizer.json"))
        text = tok.encode("refund me now", add_special_tokens=False).ids
        framed = tok.encode("refund me now").ids
        at = [i for i in range(len(framed) - len(text) + 1) if framed[i:i + len(text)] == text]
        assert at, (template, framed, text)  # the text's own ids, framed
        frames[template] = framed[:at[0]] + framed[at[0] + len(text):]
    specials = json.loads(base["tokenizer/special_tokens_map.json"])
    vocab = Tokenizer.from_file(str(tmp_path / "default" / "tokenizer" / "tokenizer.json"))
    cls, sep = (vocab.token_to_id(specials[r]) for r in ("cls_token", "sep_token"))
    assert frames["default"] == [cls, sep] and frames["bare"] == []
    assert len(frames["bos-eos"]) == 2 and not {cls, sep} & set(frames["bos-eos"])


@pytest.mark.parametrize("shape,template,message", [
    ("tiny", "cls", "tokenizer template must be one of default, bare, bos-eos"),
    ("multilingual-tiny", "bos-eos", "the bos-eos template is for byte-level shapes")])
def test_a_bad_tokenizer_template_is_refused(tmp_path, shape, template, message):
    with pytest.raises(ValueError, match=message):
        kime.testing.write_checkpoint(tmp_path / "x", shape, tokenizer_template=template)
