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

# Extras a module may need; it is skipped only when the extra is really not installed here.
OPTIONAL = ("cupy", "fastapi", "pydantic", "uvicorn", "prometheus_client", "pyarrow", "ray",
            "matplotlib", "tomli", "tqdm", "starlette", "httpx")

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
