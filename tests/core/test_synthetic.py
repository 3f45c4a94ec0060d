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
