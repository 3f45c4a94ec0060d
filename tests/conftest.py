"""Shared fixtures: small checkpoints written by kime's own writer, once per session."""
from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kime.synthetic import write_checkpoint

from . import ray_local  # noqa: F401  # Ray's loopback settings, before any test imports Ray


@pytest.fixture(scope="session", autouse=True)
def _packed_cache(tmp_path_factory: pytest.TempPathFactory):
    """Packed weights go to a temporary cache, never the user's ~/.cache/kime."""
    import os

    old = os.environ.get("KIME_CACHE")
    os.environ["KIME_CACHE"] = str(tmp_path_factory.mktemp("kime-cache"))
    yield
    if old is None:
        del os.environ["KIME_CACHE"]
    else:
        os.environ["KIME_CACHE"] = old


@pytest.fixture(scope="session", autouse=True)
def _no_laya_cpu_amp():
    """Laya's CPU autocast switch changes what `laya.load` computes in, so an ambient
    `LAYA_CPU_AMP` never reaches the tests; the tests of it set it themselves."""
    import os

    old = os.environ.pop("LAYA_CPU_AMP", None)
    yield
    if old is not None:
        os.environ["LAYA_CPU_AMP"] = old


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ck") / "tiny", shape="tiny", seed=1,
                            odd_temperatures=True)


@pytest.fixture(scope="session")
def ml_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_checkpoint(tmp_path_factory.mktemp("ck") / "ml", shape="multilingual-tiny",
                            seed=1, odd_temperatures=True)


@pytest.fixture(scope="session")
def engine(tiny_path: Path):
    import kime

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return kime.Kime(str(tiny_path), device="cpu", threads=1)


@pytest.fixture(scope="session")
def agent(engine):
    import kime

    return kime.Agent(engine)


def _hypothesis_profiles() -> None:
    """A few hundred examples per property in CI; `--hypothesis-profile=long` for 10,000;
    `quick` (what `-m "not slow"` runs) for the inner loop."""
    try:
        from hypothesis import settings
    except ImportError:  # hypothesis is a dev dependency; only the property tests need it
        return
    settings.register_profile("default", max_examples=200, deadline=None)
    settings.register_profile("long", max_examples=10_000, deadline=None)
    settings.register_profile("quick", max_examples=25, deadline=None)
    settings.load_profile("default")


_hypothesis_profiles()


def pytest_configure(config: pytest.Config) -> None:
    """The fast tier (`-m "not slow"`) runs the properties at `quick` strength, unless a
    profile is named; the whole suite (`.ci/run`) at `default`."""
    if (config.getoption("markexpr", "") or "").strip() == "not slow" and \
            config.getoption("hypothesis_profile", None) is None:
        try:
            from hypothesis import settings
        except ImportError:
            return
        settings.load_profile("quick")
