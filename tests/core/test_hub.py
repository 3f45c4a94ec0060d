"""kime.hub: names, aliases, hf:// references and paths, against a fake offline HF cache."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from kime import hub
from kime.errors import ModelNotFound

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def make_checkpoint(directory: Path) -> Path:
    (directory / "tokenizer").mkdir(parents=True)
    (directory / "encoder").mkdir()
    (directory / "rl_agent_config.json").write_text("{}")
    (directory / "model.safetensors").write_bytes(b"")
    (directory / "tokenizer" / "tokenizer.json").write_text("{}")
    (directory / "encoder" / "config.json").write_text("{}")
    return directory


def fake_cache(root: Path, repo: str, subfolders: list[str | None]) -> Path:
    """huggingface_hub's layout: models--org--repo/{refs/main, snapshots/<commit>/...}."""
    storage = root / ("models--" + repo.replace("/", "--"))
    (storage / "refs").mkdir(parents=True)
    (storage / "refs" / "main").write_text(COMMIT)
    snapshot = storage / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    for sub in subfolders:
        make_checkpoint(snapshot / sub if sub else snapshot)
    return snapshot


@pytest.mark.parametrize("name, subfolder", [
    ("english", None), ("en", None), ("laya", None), ("default", None), ("  English ", None),
    ("multilingual", "multilingual"), ("multi", "multilingual"), ("ml", "multilingual"),
    ("laya-multilingual", "multilingual"), ("ML", "multilingual"),
    ("typed-decisions", "typed-decisions"), ("typed", "typed-decisions"),
    ("typed_decisions", "typed-decisions"), ("laya-typed-decisions", "typed-decisions"),
    ("decisions", "typed-decisions"),
])
def test_aliases(name, subfolder):
    source = hub.locate(name)
    assert (source.repo, source.subfolder, source.path) == (hub.BUNDLE_REPO, subfolder, None)


def test_every_alias_names_a_model():
    assert set(hub.ALIASES.values()) <= set(hub.MODELS)


def test_describe():
    assert hub.describe("ml") == ("subfolder 'multilingual' of Hugging Face repo "
                                  "convaiinnovations/laya")
    assert hub.describe("en") == "root of Hugging Face repo convaiinnovations/laya"
    assert hub.describe("hf://org/repo/a/b") == "subfolder 'a/b' of Hugging Face repo org/repo"


def test_unknown_bare_name():
    with pytest.raises(ModelNotFound, match="unknown model 'englsh'.*english"):
        hub.resolve("englsh")


def test_local_directory(tmp_path):
    checkpoint = make_checkpoint(tmp_path / "ckpt")
    assert hub.resolve(str(checkpoint)) == checkpoint


def test_local_directory_named_like_an_alias_wins(tmp_path, monkeypatch):
    # Laya loads ./laya from disk when it holds a checkpoint, and resolves the alias otherwise.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "laya").mkdir()
    assert hub.locate("laya").repo == hub.BUNDLE_REPO
    make_checkpoint(tmp_path / "multi")
    assert hub.resolve("multi") == tmp_path / "multi"


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    checkpoint = make_checkpoint(tmp_path / "models" / "laya")
    assert hub.resolve("~/models/laya") == checkpoint


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(ModelNotFound, match=re.escape(f"no directory at {missing}")):
        hub.resolve(str(missing))
    with pytest.raises(ModelNotFound, match="nowhere"):
        hub.resolve("./nowhere")


def test_directory_without_config(tmp_path):
    with pytest.raises(ModelNotFound, match="no rl_agent_config.json"):
        hub.resolve(str(tmp_path))


def test_org_repo_is_a_hub_id_unless_it_is_a_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert (hub.locate("org/repo").repo, hub.locate("org/repo").path) == ("org/repo", None)
    make_checkpoint(tmp_path / "org" / "repo")
    assert hub.resolve("org/repo") == tmp_path / "org" / "repo"


@pytest.mark.parametrize("ref, repo, subfolder", [
    ("hf://org/repo", "org/repo", None),
    ("hf://org/repo/", "org/repo", None),
    ("hf://org/repo/sub", "org/repo", "sub"),
    ("HF://Org/Repo.v2/sub/folder", "Org/Repo.v2", "sub/folder"),
])
def test_hf_reference(ref, repo, subfolder):
    source = hub.locate(ref)
    assert (source.repo, source.subfolder) == (repo, subfolder)


@pytest.mark.parametrize("ref", ["hf://", "hf://org", "hf://org/../x", "hf://-bad/repo"])
def test_bad_hf_reference(ref):
    with pytest.raises(ModelNotFound, match="bad Hub reference"):
        hub.locate(ref)


def test_cache_hit_with_subfolder(tmp_path):
    snapshot = fake_cache(tmp_path, "org/repo", ["sub"])
    assert hub.resolve("hf://org/repo/sub", cache_dir=str(tmp_path)) == snapshot / "sub"


def test_cache_hit_for_builtin_names(tmp_path, monkeypatch):
    import huggingface_hub.constants

    snapshot = fake_cache(tmp_path, hub.BUNDLE_REPO, [None, "multilingual"])
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert hub.resolve("english") == snapshot
    assert hub.resolve("ml") == snapshot / "multilingual"
    assert hub.resolve(hub.BUNDLE_REPO) == snapshot


def test_cache_miss_names_repo_and_cache(tmp_path):
    with pytest.raises(ModelNotFound) as caught:
        hub.resolve("hf://org/absent", cache_dir=str(tmp_path))
    message = str(caught.value)
    assert "org/absent" in message and str(tmp_path) in message
    assert "hf download org/absent" in message


def test_snapshot_without_the_subfolder(tmp_path):
    # The root was pulled but not the multilingual subfolder: same commit, folder absent.
    fake_cache(tmp_path, hub.BUNDLE_REPO, [None])
    with pytest.raises(ModelNotFound) as caught:
        hub.resolve("multilingual", cache_dir=str(tmp_path))
    message = str(caught.value)
    assert "subfolder 'multilingual' of Hugging Face repo convaiinnovations/laya" in message
    assert str(tmp_path) in message
    assert "kime pull multilingual" in message
    assert "--include 'multilingual/*'" in message


def test_model_not_found_is_a_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        hub.resolve(str(tmp_path / "absent"))
