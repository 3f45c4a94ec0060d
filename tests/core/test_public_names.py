"""No module under `kime/` shadows a public name.

Importing a submodule binds it as an attribute of its package, so a module `kime/decide_batch.py`
turns `kime.decide_batch` (Laya's structured function) into that module the moment anything
imports it -- in a server, a job, or a pytest session that happens to load the CLI. This records
every name of `kime.__all__` (lazy ones resolved), imports every module kime has, and checks each
name is still the same object. It runs in a fresh interpreter, so what this session imported
before cannot hide a clash.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# Extras a module may need; it is skipped only when the extra is really not installed here.
OPTIONAL = ("cupy", "fastapi", "pydantic", "uvicorn", "prometheus_client", "pyarrow", "ray",
            "matplotlib", "tomli", "tqdm", "starlette", "httpx",
            # the frameworks of kime.integrations (issue 24): kime[langchain], ...
            "langchain_core", "langgraph", "llama_index", "crewai", "agno", "mcp")

_PROBE = textwrap.dedent("""
    import importlib, importlib.util, json, pkgutil, sys, warnings
    warnings.simplefilter("ignore")
    import kime

    optional = set(%r)
    before = {name: getattr(kime, name) for name in kime.__all__}
    imported, skipped, failed = [], {}, {}
    for info in pkgutil.walk_packages(kime.__path__, "kime."):
        try:
            importlib.import_module(info.name)
        except ImportError as e:
            top = (e.name or "").partition(".")[0]
            absent = top in optional and importlib.util.find_spec(top) is None
            (skipped if absent else failed)[info.name] = "%%s: %%s" %% (type(e).__name__, e)
        else:
            imported.append(info.name)
    changed = {name: "%%r is now %%r" %% (value, getattr(kime, name, None))
               for name, value in before.items() if getattr(kime, name, None) is not value}
    json.dump({"imported": imported, "skipped": skipped, "failed": failed,
               "changed": changed}, sys.stdout)
""") % (OPTIONAL,)


@pytest.mark.slow  # more than a second and a half (CONTRIBUTING.md's fast tier)
def test_importing_every_module_leaves_every_public_name_as_it_was():
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert not found["failed"], found["failed"]
    # The walk reached the whole package: the CLI, Laya's layer, the server, the backends.
    assert {"kime.engine", "kime.laya.structured", "kime._cpu.backend", "kime._cuda.device",
            "kime.jobs.cli"} <= set(found["imported"])
    assert not found["changed"], "modules shadow public names of kime: %s" % found["changed"]


_PATHS_PROBE = textwrap.dedent("""
    import importlib, json, sys
    import email.utils
    import kime
    from kime import email as laya_email, hooks, router
    paths = ("presets", "email", "router", "hooks", "confidence", "structured", "lang")
    one = {name: getattr(kime, name) is importlib.import_module("kime." + name)
           is sys.modules["kime." + name] for name in paths}
    json.dump({"one": one, "stdlib_email": sys.modules["email"].__name__,
               "stdlib_utils": email.utils.__name__, "ours": laya_email.__name__,
               "hooks": hooks.__name__, "router": router.__name__}, sys.stdout)
""")


def test_layas_import_paths_are_one_module_each_and_leave_the_stdlib_alone():
    """`kime.presets` (attribute), `import kime.presets` and `from kime import presets` are the
    same module, for each of Laya's seven paths; `kime/email.py` is reached only as `kime.email`,
    never as the standard library's `email`."""
    proc = subprocess.run([sys.executable, "-c", _PATHS_PROBE], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    assert all(found["one"].values()), found["one"]
    assert (found["stdlib_email"], found["stdlib_utils"]) == ("email", "email.utils")
    assert (found["ours"], found["hooks"], found["router"]) == ("kime.email", "kime.hooks",
                                                                "kime.router")
