"""The `laya` shim distribution: a pure-Python wheel named `laya`, version
`0.4.15+kime.<kime's version>` (a PEP 440 local version: `laya>=0.4` is met, a pin to another
laya release is not, and pip says so), requiring exactly the kime that wrote it.

What it installs:

- `laya_kime.pth`, whose one line imports `_laya_kime` at every interpreter start;
- `_laya_kime.py`, which finds kime without importing it, loads kime's path table
  (`kime/shim/paths.py`, standard library only) by file and installs its import hook, so
  `import laya` costs nothing until it happens, and then imports kime;
- laya's console scripts that kime implements, `laya`, `laya-serve` and `laya-mcp-server`,
  and `laya-train` and `laya-evals`, which refuse, naming laya;
- laya's extras (`laya[serve]`, `laya[mcp]`, ...) as kime's, so a package requiring
  `laya[serve]` gets kime's server and no PyTorch.

The wheel is built here, byte for byte from these constants (no build backend, no network), so
`kime shim wheel DIR` gives the file `kime shim install` installs.
"""
from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path
from typing import Dict, List, Tuple

from .._version import __version__ as KIME_VERSION
from .paths import LAYA_VERSION

SCRIPTS = {
    "laya": "kime.cli.laya:main",
    "laya-evals": "kime.cli.laya:evals_main",
    "laya-mcp-server": "kime.mcp.server:main",
    "laya-serve": "kime.serve.laya:main",
    "laya-train": "kime.cli.laya:train_main",
}
"""laya 0.4.15's console scripts -> what runs them on kime (the last two refuse)."""

EXTRAS: Dict[str, List[str]] = {
    "agno": ["kime[agno]"], "crewai": ["kime[crewai]"], "fast": [],
    "langchain": ["kime[langchain]"], "langgraph": ["kime[langchain]"],
    "llamaindex": ["kime[llamaindex]"], "mcp": ["kime[mcp]"], "onnx": [],
    "serve": ["kime[serve]"], "structured": ["pydantic>=2.0.0"],
}
"""laya's extras -> what they need on kime. `fast` and `onnx` are laya's GPU and ONNX Runtime
paths: kime answers those with its own forward, so they need nothing."""

BOOT = '''"""Installs kime's laya module paths at interpreter start (the laya shim's .pth).

kime is found without being imported, and only its path table (kime/shim/paths.py, standard
library only) is loaded here; kime itself loads when something imports laya.
"""


def _install():
    import importlib.util
    import os
    import sys

    spec = importlib.util.find_spec("kime")
    if spec is None or not spec.submodule_search_locations:
        return  # kime was uninstalled: `pip check` names the missing requirement
    path = os.path.join(list(spec.submodule_search_locations)[0], "shim", "paths.py")
    table = importlib.util.spec_from_file_location("_laya_kime_paths", path)
    module = importlib.util.module_from_spec(table)
    sys.modules["_laya_kime_paths"] = module
    table.loader.exec_module(module)
    module.install()


_install()
'''

PTH = "import _laya_kime\n"


def shim_version(kime_version: str = KIME_VERSION) -> str:
    """The shim's version: laya's, with kime's as the local label."""
    return "%s+kime.%s" % (LAYA_VERSION, kime_version)


def _metadata(version: str, kime_version: str) -> str:
    lines = ["Metadata-Version: 2.1", "Name: laya", "Version: %s" % version,
             "Summary: laya %s's API, module paths and console scripts, answered by kime %s "
             "(no PyTorch)" % (LAYA_VERSION, kime_version),
             "License: Apache-2.0", "Requires-Python: >=3.10",
             "Requires-Dist: kime==%s" % kime_version]
    for extra, needs in sorted(EXTRAS.items()):
        lines.append("Provides-Extra: %s" % extra)
        for need in needs:
            name, _, rest = need.partition("[")
            pinned = "%s[%s==%s" % (name, rest, kime_version) if rest else need
            lines.append('Requires-Dist: %s; extra == "%s"' % (pinned, extra))
    return "\n".join(lines) + "\n\nkime's `laya` shim: `import laya` runs kime. See kime's "\
        "docs/ecosystem.md.\n"


def files(kime_version: str = KIME_VERSION) -> List[Tuple[str, bytes]]:
    """The wheel's files, RECORD last: (archive name, content)."""
    version = shim_version(kime_version)
    info = "laya-%s.dist-info" % version
    scripts = "".join("%s = %s\n" % item for item in sorted(SCRIPTS.items()))
    out = [("_laya_kime.py", BOOT.encode()), ("laya_kime.pth", PTH.encode()),
           (info + "/METADATA", _metadata(version, kime_version).encode()),
           (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: kime shim\n"
                             b"Root-Is-Purelib: true\nTag: py3-none-any\n"),
           (info + "/entry_points.txt", ("[console_scripts]\n" + scripts).encode()),
           (info + "/top_level.txt", b"_laya_kime\n")]
    record = []
    for name, data in out:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append("%s,sha256=%s,%d" % (name, digest, len(data)))
    record.append("%s/RECORD,," % info)
    out.append((info + "/RECORD", ("\n".join(record) + "\n").encode()))
    return out


def wheel_name(kime_version: str = KIME_VERSION) -> str:
    return "laya-%s-py3-none-any.whl" % shim_version(kime_version)


def build(directory: str, kime_version: str = KIME_VERSION) -> Path:
    """Write the shim's wheel into `directory` (made if missing); its path. The same kime
    writes the same bytes (fixed timestamps), so a requirements file can pin its hash."""
    os.makedirs(directory, exist_ok=True)
    path = Path(directory) / wheel_name(kime_version)
    tmp = path.with_suffix(".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files(kime_version):
            info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    os.replace(tmp, path)
    return path


__all__ = ["BOOT", "EXTRAS", "SCRIPTS", "build", "files", "shim_version", "wheel_name"]
