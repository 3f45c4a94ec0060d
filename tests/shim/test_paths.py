"""laya's module paths on kime (`kime.shim.paths`, `kime.install_as_laya()`): every module of
laya 0.4.15 (recorded in `tests/goldens/ecosystem.json` from the real package) is mapped or
refused by name, and the import hook serves them in a fresh interpreter."""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kime.shim import paths

from ..paths import GOLDENS, ROOT

ECOSYSTEM = json.loads((GOLDENS / "ecosystem.json").read_text(encoding="utf-8"))


def test_every_laya_module_is_mapped_or_refused_and_no_other():
    laya_modules = set(ECOSYSTEM["modules"])
    table = set(paths.MAPPED) | set(paths.REFUSED)
    assert not set(paths.MAPPED) & set(paths.REFUSED)
    assert laya_modules - table == set(), "laya modules the table forgets"
    assert table - laya_modules == set(), "table rows laya 0.4.15 does not have"


def test_every_mapped_path_names_a_kime_module_that_imports():
    import importlib

    for laya_path, kime_name in paths.MAPPED.items():
        if kime_name.startswith("kime.integrations.") and kime_name.rsplit(".", 1)[1] in (
                "langchain", "agno", "llamaindex", "crewai"):
            continue  # their frameworks are optional extras
        assert importlib.util.find_spec(kime_name) is not None, laya_path


def test_the_table_module_imports_only_the_standard_library():
    """The shim's .pth loads it by file at every interpreter start, with no kime around it."""
    tree = ast.parse(Path(paths.__file__).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "a relative import"
            imported.add((node.module or "").split(".")[0])
    assert imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def _python(code: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONWARNINGS="ignore")
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)],
                          capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.slow
def test_install_as_laya_serves_laya_paths_in_a_fresh_interpreter():
    done = _python("""
        import importlib, inspect, json, sys
        import kime
        assert "laya" not in sys.modules
        kime.install_as_laya()
        kime.install_as_laya()  # idempotent
        import laya, laya.agent, laya.mcp.tools
        from laya import agent, common, router, presets
        from laya.router import Router
        import kime.laya.agent, kime.laya.common, kime.mcp.tools
        out = {
            "version": laya.__version__, "kime_version": kime.__version__,
            "file": inspect.getfile(laya),
            "same_agent": laya.Agent is kime.Agent and agent is kime.laya.agent,
            "same_common": common is kime.laya.common, "router": Router is kime.Router,
            "spec_kept": agent.__spec__.name == "kime.laya.agent"
                         and laya.mcp.tools is kime.mcp.tools,
            "presets": presets.triage_questions() == kime.triage_questions(),
            "refusals": {}}
        for name in ("laya.train", "laya.fast", "laya.backends.eager", "laya.nope",
                     "laya.mcp.validate"):
            try:
                importlib.import_module(name)
                out["refusals"][name] = None
            except ModuleNotFoundError as e:
                out["refusals"][name] = str(e)
        try:
            from laya import train
        except ModuleNotFoundError as e:
            out["from_train"] = str(e)
        try:
            from laya.common import DecisionModel
        except ImportError as e:
            out["torch_only"] = str(e)
        print(json.dumps(out))
    """)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["version"] == paths.LAYA_VERSION and out["kime_version"] != out["version"]
    assert Path(out["file"]).samefile(paths.__file__)  # laya's file is the shim's own
    assert out["same_agent"] and out["same_common"] and out["router"] and out["spec_kept"]
    assert out["presets"]
    for name, message in out["refusals"].items():
        # a refused package refuses its submodules on the way (laya.backends for .eager)
        assert message is not None and name.rsplit(".", 1)[0] in message, name
    assert "PyTorch" in out["refusals"]["laya.train"] and "laya==" in out["refusals"]["laya.train"]
    assert "has no such module" in out["refusals"]["laya.nope"]
    assert "has no such module" in out["refusals"]["laya.mcp.validate"]  # kime's, not laya's
    assert "trainer" in out["from_train"]
    assert "DecisionModel" in out["torch_only"] and "PyTorch" in out["torch_only"]


@pytest.mark.slow
def test_python_m_laya_runs_the_kime_module_as_main():
    done = _python("import kime, runpy, sys; kime.install_as_laya(); sys.argv = ['laya', "
                   "'Where is my parcel?', '--json']; runpy.run_module('laya.cli', "
                   "run_name='__main__', alter_sys=True)")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"] == "english"


@pytest.mark.slow
def test_install_refuses_when_another_laya_was_imported_first(tmp_path):
    (tmp_path / "laya.py").write_text("VERSION = 'real'\n")
    done = _python("import sys; sys.path.insert(0, %r); import laya, kime\n"
                   "try:\n    kime.install_as_laya()\nexcept ImportError as e:\n"
                   "    print('refused', e)\n" % str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused") and "laya.py" in done.stdout
