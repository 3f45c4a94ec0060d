"""laya's module paths and the `laya` shim distribution: third-party code that imports laya runs
on kime unedited, and its `laya` requirement installs no PyTorch.

    paths.py  the one table of laya's module paths, and the import hook that serves it
    wheel.py  the `laya` distribution: metadata, console scripts and the `.pth` that installs
              the hook at interpreter start (`kime shim wheel DIR`)
    manage.py `kime shim install | uninstall | status`, through pip

`kime.install_as_laya()` installs the hook in one interpreter, as `pymysql.install_as_MySQLdb()`
does for its own alias.
"""
from .paths import LAYA_VERSION, MAPPED, REFUSED, install, installed

__all__ = ["LAYA_VERSION", "MAPPED", "REFUSED", "install", "installed"]
