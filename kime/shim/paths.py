"""laya 0.4.15's module paths on kime: the one table of what `laya.<sub>` is, and the import hook
that serves it (`install`, which `kime.install_as_laya()` and the `laya` shim distribution call).

Every module of laya 0.4.15 is either here as a kime module (`MAPPED`) or refused by name with
the reason (`REFUSED`: laya's torch parts, its trainer and its evaluation harness, which kime
does not provide). A name under `laya.` that is neither does not exist in laya either, and is
refused too, so an import never falls through to a path search that could load a second copy of
a kime file under another name. A mapped path is the kime module itself, not a copy:
`laya.agent.build_sequence = f` rebinds what kime's Agent reads. `laya` itself is a small
module of its own, so `laya.__version__` can answer laya's version while `kime.__version__`
stays kime's.

This module imports nothing from kime and nothing outside the standard library: the shim's
`.pth` loads it by file at every interpreter start, and kime (NumPy, tokenizers) is imported only
when something imports `laya`.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Dict, List, Optional, Sequence

LAYA_VERSION = "0.4.15"
"""The laya release whose surface kime implements (the goldens are recorded from it)."""

MAPPED: Dict[str, str] = {
    "laya.agent": "kime.laya.agent",
    "laya.calibrate": "kime.jobs.laya_calibrate",
    "laya.cli": "kime.cli.laya",
    "laya.common": "kime.laya.common",
    "laya.confidence": "kime.confidence",
    "laya.email": "kime.email",
    "laya.hooks": "kime.hooks",
    "laya.integrations": "kime.integrations",
    "laya.integrations.agno": "kime.integrations.agno",
    "laya.integrations.crewai": "kime.integrations.crewai",
    "laya.integrations.langchain": "kime.integrations.langchain",
    "laya.integrations.llamaindex": "kime.integrations.llamaindex",
    "laya.integrations.tools": "kime.integrations.tools",
    "laya.lang": "kime.lang",
    "laya.mcp": "kime.mcp",
    "laya.mcp.remote": "kime.mcp.remote",
    "laya.mcp.server": "kime.mcp.server",
    "laya.mcp.tools": "kime.mcp.tools",
    "laya.presets": "kime.presets",
    "laya.revisions": "kime.laya.revisions",
    "laya.router": "kime.router",
    "laya.serve": "kime.serve.laya",
    "laya.shortlist": "kime.laya.shortlist",
    "laya.structured": "kime.structured",
}
"""laya's module path -> the kime module that is it."""

_TRAIN = "laya's trainer (laya-train), which trains with PyTorch"
_EVALS = "laya's evaluation harness (laya-evals), which runs laya's PyTorch model"
_FORWARD = "one of laya's PyTorch forward passes; kime runs its own, whatever backend= says"
_PRIVATE = ("a private module of laya.integrations; its public names are at "
            "laya.integrations and its framework submodules")

REFUSED: Dict[str, str] = {
    "laya._agreement": _EVALS,
    "laya._compile": "laya's torch.compile path; " + _FORWARD,
    "laya._eval_policy": _EVALS,
    "laya.backends": _FORWARD,
    "laya.backends.base": _FORWARD,
    "laya.backends.compile": _FORWARD,
    "laya.backends.eager": _FORWARD,
    "laya.backends.tilelang": _FORWARD,
    "laya.evals": _EVALS,
    "laya.evals_cli": _EVALS,
    "laya.evals_shortlist": _EVALS,
    "laya.evals_tournament": _EVALS,
    "laya.evidence": "laya's reader of laya-train and laya-evals artifacts, which kime does "
                     "not produce",
    "laya.fast": "laya's TileLang CUDA fast path; " + _FORWARD,
    "laya.integrations._controls": _PRIVATE,
    "laya.integrations._errors": _PRIVATE,
    "laya.integrations._guard": _PRIVATE,
    "laya.mcp.device": "laya's LAYA_DEVICE parser over torch.device; kime's MCP server reads "
                       "LAYA_DEVICE itself",
    "laya.onnx_agent": "laya's ONNX Runtime agent; laya.load(..., backend='onnx') answers with "
                       "kime's own forward",
    "laya.tl_kernels": "laya's TileLang kernels; " + _FORWARD,
    "laya.train": _TRAIN,
    "laya.train_cli": _TRAIN,
}
"""laya's module paths kime does not provide, and why: importing one raises
ModuleNotFoundError saying so."""

SUBMODULES = tuple(sorted({path.split(".")[1] for path in MAPPED}))
"""The names `from laya import <name>` finds as modules (`agent`, `common`, `serve`, ...)."""

_MARK = "_kime_laya_finder"


def refusal(path: str) -> str:
    """Why `import <path>` fails under kime: a refused path's reason, else that laya 0.4.15 has
    no such module."""
    reason = REFUSED.get(path)
    if reason is not None:
        return ("No module named %r: %s. kime does not provide it; install the real laya "
                "(pip install laya==%s) in an environment of its own for that"
                % (path, reason, LAYA_VERSION))
    return ("No module named %r: laya %s has no such module, so kime's laya paths do not "
            "either" % (path, LAYA_VERSION))


def _top_module(module: types.ModuleType) -> None:
    """Fill `laya`: kime's public names (resolved on first use, as both packages resolve
    theirs), the submodules by name, and laya's version."""
    kime = importlib.import_module("kime")

    def __getattr__(name: str) -> Any:
        if name.startswith("__"):  # laya's own dunders are set below; kime's are not laya's
            raise AttributeError("module 'laya' has no attribute %r" % name)
        if name in SUBMODULES:
            return importlib.import_module("laya." + name)
        if "laya." + name in REFUSED:  # `from laya import train` says why, as importing it does
            raise ModuleNotFoundError(refusal("laya." + name), name="laya." + name)
        try:
            value = getattr(kime, name)
        except AttributeError:
            raise AttributeError("module 'laya' has no attribute %r" % name) from None
        setattr(module, name, value)
        return value

    def __dir__() -> List[str]:
        return sorted(set(dir(kime)) | set(SUBMODULES) | set(vars(module)))

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__dir__ = __dir__  # type: ignore[method-assign]
    module.__doc__ = ("laya %s's API, answered by kime %s (no PyTorch): kime.install_as_laya() "
                      "or the laya shim distribution put it here." % (LAYA_VERSION,
                                                                      kime.__version__))
    # laya's own version string, the API this is: code parses it (`int(p) for p in
    # split(".")[:3]`) to gate features; the distribution's version carries kime's (`+kime.`).
    module.__version__ = LAYA_VERSION  # type: ignore[attr-defined]
    # Where laya comes from here: diagnostics print it, and inspect.getfile() needs one.
    module.__file__ = __file__
    module.__kime_version__ = kime.__version__  # type: ignore[attr-defined]
    module.__all__ = list(kime.__all__)  # type: ignore[attr-defined]


class LayaPaths(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """The import hook: claims `laya` and every `laya.<sub>`. A mapped path imports the kime
    module and hands that same module back (its `__spec__` left as kime's, so relative imports
    and `python -m kime....` keep working); `python -m laya.<sub>` runs the kime module as
    `__main__`."""

    _kime_laya_finder = True

    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Optional[types.ModuleType] = None
                  ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == "laya":
            return importlib.machinery.ModuleSpec("laya", self, is_package=True)
        if not fullname.startswith("laya."):
            return None
        kime_name = MAPPED.get(fullname)
        if kime_name is None:
            raise ModuleNotFoundError(refusal(fullname), name=fullname)
        spec = importlib.machinery.ModuleSpec(fullname, self, loader_state=kime_name)
        return spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[types.ModuleType]:
        if spec.name == "laya":
            return None  # a fresh module, filled by exec_module
        module = importlib.import_module(spec.loader_state)
        spec.loader_state = (spec.loader_state, module.__spec__)  # kime's own, kept to restore
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        spec = module.__spec__
        if spec is None or spec.name == "laya":
            module.__path__ = []  # a package, so `import laya.agent` asks this finder
            _top_module(module)
            return
        # The import system stamped laya's spec on kime's module: give it back its own.
        module.__spec__ = spec.loader_state[1]

    def get_code(self, fullname: str) -> types.CodeType:
        """`python -m laya.<sub>`: run the kime module as `__main__`, as `python -m
        kime.<module>` does."""
        kime_name = MAPPED.get(fullname)
        if kime_name is None:
            raise ImportError(refusal(fullname), name=fullname)
        source = ("import runpy\nrunpy.run_module(%r, run_name='__main__', alter_sys=True)\n"
                  % kime_name)
        return compile(source, "<laya path %s>" % fullname, "exec")

    def is_package(self, fullname: str) -> bool:
        return fullname == "laya"


def installed() -> bool:
    """Whether laya's paths are being served in this interpreter."""
    return any(getattr(finder, _MARK, False) for finder in sys.meta_path)


def install() -> None:
    """Serve laya's module paths from kime in this interpreter, from now on (idempotent).

    Refuses, naming the file, when a real laya was imported already: its modules and kime's
    would then both answer to `laya.*` in one process."""
    if installed():
        return
    loaded = sys.modules.get("laya")
    if loaded is not None and not getattr(getattr(loaded, "__loader__", None), _MARK, False):
        raise ImportError("laya is already imported from %s; install kime's laya paths before "
                          "anything imports laya" % getattr(loaded, "__file__", "?"),
                          name="laya")
    sys.meta_path.insert(0, LayaPaths())


def uninstall() -> None:
    """Stop serving laya's paths and forget the `laya` modules imported through them (the kime
    modules themselves stay imported)."""
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, _MARK, False)]
    for name in [n for n in sys.modules if n == "laya" or n.startswith("laya.")]:
        del sys.modules[name]


__all__ = ["LAYA_VERSION", "LayaPaths", "MAPPED", "REFUSED", "SUBMODULES", "install",
           "installed", "refusal", "uninstall"]
