"""`kime shim install | uninstall | status`: the `laya` shim distribution in this Python
environment, through pip, so pip knows it: `pip install <a package requiring laya>` afterwards
finds laya met and installs no PyTorch, `pip check` sees kime required and present, and
`pip uninstall laya` removes the shim and leaves kime as it was.
"""
from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass
from typing import List, Optional

from .._version import __version__ as KIME_VERSION
from .wheel import build, shim_version


class ShimError(RuntimeError):
    """pip could not do what was asked, or the laya installed here is not kime's shim."""


@dataclass(frozen=True)
class Status:
    """What this environment's `laya` is."""

    version: Optional[str]  # the installed laya distribution's version, None when there is none
    location: Optional[str]  # where its metadata lives
    active: bool  # laya's paths are served from kime in this interpreter

    @property
    def is_shim(self) -> bool:
        return self.version is not None and "+kime." in self.version

    @property
    def current(self) -> bool:
        """The shim of this very kime."""
        return self.version == shim_version()

    def lines(self) -> List[str]:
        """`kime shim status`'s report."""
        if self.version is None:
            head = "laya: not installed (kime shim install puts kime's laya here)"
        elif not self.is_shim:
            head = "laya: %s, the real laya (with PyTorch), at %s" % (self.version,
                                                                      self.location)
        elif not self.current:
            head = ("laya: %s at %s, a shim for another kime (this is kime %s): run kime shim "
                    "install again" % (self.version, self.location, KIME_VERSION))
        else:
            head = "laya: %s (kime's shim) at %s" % (self.version, self.location)
        where = ("served from kime in this interpreter" if self.active
                 else "not served from kime in this interpreter")
        return [head, "laya's module paths: %s" % where]


def status() -> Status:
    """The installed `laya` distribution, if any, and whether kime serves `import laya`."""
    import importlib
    from importlib import metadata

    from .paths import installed

    importlib.invalidate_caches()  # pip may have just changed site-packages
    try:
        dist = metadata.distribution("laya")
    except metadata.PackageNotFoundError:
        return Status(None, None, installed())
    location = str(dist.locate_file(""))
    return Status(dist.version, location, installed())


def _pip(args: List[str]) -> None:
    """`python -m pip ARGS` in this environment; `ShimError` with pip's output on failure."""
    try:
        done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True,
                              text=True)
    except OSError as e:
        raise ShimError("cannot run pip: %s" % e) from e
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip()
        if "No module named pip" in said:
            raise ShimError("this environment has no pip: kime shim wheel DIR writes the wheel "
                            "for another installer (uv pip install DIR/laya-*.whl)")
        raise ShimError("pip %s failed:\n%s" % (args[0], said))


def install() -> Status:
    """Install the shim for this kime with pip, offline (it requires only this kime); a real
    laya installed here is replaced, as any other version of laya would be."""
    with tempfile.TemporaryDirectory(prefix="kime-shim-") as tmp:
        wheel = build(tmp)
        _pip(["install", "--no-index", "--find-links", tmp, "--force-reinstall",
              "--no-deps", str(wheel)])
    after = status()
    if not after.current:
        raise ShimError("pip installed the shim, but this environment's laya reads %s; is "
                        "another site-packages ahead of this one?" % after.version)
    return after


def uninstall() -> Status:
    """Remove the shim with pip. A real laya is left alone: kime did not install it."""
    before = status()
    if before.version is None:
        return before
    if not before.is_shim:
        raise ShimError("the laya installed here is laya %s, not kime's shim; kime leaves it "
                        "alone (pip uninstall laya removes it)" % before.version)
    _pip(["uninstall", "-y", "laya"])
    return status()


__all__ = ["ShimError", "Status", "install", "status", "uninstall"]
