"""The version in one place, `kime --version`, and doctor's advice on which CuPy fits the driver
(the driver and the installed CuPy are stood in for, so these run on any machine)."""
from __future__ import annotations

import json
import re
import sys
from importlib import metadata

import pytest

import kime
from kime import cli
from kime._cuda import device

from ..paths import ROOT as SOURCE


def test_version_flag(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == "kime %s\n" % kime.__version__


def test_installed_metadata_carries_the_one_version():
    """pyproject reads the version from kime/_version.py, so the metadata cannot disagree."""
    assert metadata.version("kime") == kime.__version__


def test_pyproject_and_changelog_take_the_version_from_kime():
    if not (SOURCE / "pyproject.toml").is_file():
        pytest.skip("not a source checkout (the suite runs against an installed wheel)")
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((SOURCE / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == "kime._version.__version__"
    changelog = (SOURCE / "CHANGELOG.md").read_text()
    assert re.search(r"^## \[?%s\]?" % re.escape(kime.__version__), changelog, re.M), \
        "CHANGELOG.md has no section for %s" % kime.__version__
    assert re.search(r"^## \[?Unreleased\]?", changelog, re.M)


@pytest.mark.parametrize("driver, installed, expected", [
    (12040, None, "cupy-cuda12x for the driver's CUDA 12.4: pip install 'kime[cuda12]'"),
    (13000, None, "cupy-cuda13x for the driver's CUDA 13.0: pip install 'kime[cuda13]'"),
    (14010, None, "cupy-cuda13x for the driver's CUDA 14.1: pip install 'kime[cuda13]'"),
    (12080, "cupy-cuda12x", "cupy-cuda12x (installed) for the driver's CUDA 12.8"),
    (12020, "cupy-cuda13x", "cupy-cuda12x for the driver's CUDA 12.2: pip uninstall cupy-cuda13x, "
     "then pip install 'kime[cuda12]' (the installed cupy-cuda13x needs a newer driver)"),
    (13010, "cupy-cuda12x", "cupy-cuda13x for the driver's CUDA 13.1: pip uninstall cupy-cuda12x, "
     "then pip install 'kime[cuda13]' (the installed cupy-cuda12x runs on it)"),
    (12040, "cupy", "cupy-cuda12x for the driver's CUDA 12.4: pip uninstall cupy, then pip "
     "install 'kime[cuda12]' (the installed cupy is built from source)"),
    (11080, None, "none: the driver runs CUDA 11.8, and kime's CuPy builds need CUDA 12 or "
     "newer; update the NVIDIA driver"),
    (None, "cupy-cuda12x", "none: no NVIDIA driver here; kime runs on the CPU"),
])
def test_cupy_advice(driver, installed, expected):
    why = "no NVIDIA driver here" if driver is None else ""
    assert device.cupy_advice(driver, installed, why=why) == expected


def test_nvidia_smi_banner_parses():
    banner = ("| NVIDIA-SMI 550.54.15    Driver Version: 550.54.15    CUDA Version: 12.4     |\n")
    assert device.parse_smi_version(banner) == 12040
    assert device.parse_smi_version("| CUDA Version: 13.0 |") == 13000
    assert device.parse_smi_version("NVIDIA-SMI has failed") is None


def test_driver_version_falls_back_to_nvidia_smi(monkeypatch):
    monkeypatch.setattr(device, "_driver_api_version", lambda: None)
    monkeypatch.setattr(device, "_smi_version", lambda: 12060)
    assert device.driver_cuda_version() == (12060, "nvidia-smi")
    monkeypatch.setattr(device, "_driver_api_version", lambda: 13000)
    assert device.driver_cuda_version() == (13000, "driver API")
    monkeypatch.setattr(device, "_driver_api_version", lambda: None)
    monkeypatch.setattr(device, "_smi_version", lambda: None)
    version, why = device.driver_cuda_version()
    assert version is None and "no NVIDIA driver" in why


def test_installed_cupy_reads_metadata(monkeypatch):
    present = {"cupy-cuda13x": "14.2.0"}

    def version(name):
        if name not in present:
            raise metadata.PackageNotFoundError(name)
        return present[name]

    monkeypatch.setattr(metadata, "version", version)
    assert device.installed_cupy() == "cupy-cuda13x"
    present.clear()
    assert device.installed_cupy() is None


@pytest.mark.parametrize("driver, installed, advice", [
    (12040, None, "cupy-cuda12x for the driver's CUDA 12.4: pip install 'kime[cuda12]'"),
    (None, None, "none: no NVIDIA driver found (fake); kime runs on the CPU"),
])
def test_doctor_says_which_cupy_fits(capsys, monkeypatch, driver, installed, advice):
    why = "driver API" if driver else "no NVIDIA driver found (fake)"
    monkeypatch.setattr(device, "driver_cuda_version", lambda: (driver, why))
    monkeypatch.setattr(device, "installed_cupy", lambda: installed)
    assert cli.main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^cupy for this driver: +%s$" % re.escape(advice), out, re.M), out
    assert cli.main(["doctor", "--json"]) == 0
    gpu = json.loads(capsys.readouterr().out)["gpu"]
    assert gpu["driver_cuda"] == (None if driver is None else "12.4")
    assert gpu["driver_cuda_from"] == (None if driver is None else "driver API")
    assert gpu["cupy_for_driver"] == advice


def test_serve_without_the_extra_says_what_to_install(capsys, monkeypatch):
    """Without the serve extra (no pydantic, so no declared flags) `kime serve` with the flags a
    user would pass names the extra, instead of an argparse error about the flags."""
    monkeypatch.setitem(sys.modules, "kime.serve", None)  # import fails as without the extra
    monkeypatch.setitem(sys.modules, "kime.serve.settings", None)
    assert cli.main(["serve", "--model", "laya", "--port", "8000"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("kime: error: kime serve needs the HTTP stack: pip install 'kime[serve]'")
    with pytest.raises(SystemExit) as exc:
        cli.main(["doctor", "--port", "8000"])  # other commands still refuse unknown flags
    assert exc.value.code == 2
    assert "unrecognized arguments: --port 8000" in capsys.readouterr().err
