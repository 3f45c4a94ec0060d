"""kime.names: what a model string is (a built-in or alias, an hf:// reference, the bundle id,
a repo id or a path), with the disk asked only to tell a path from a name, as Laya 0.4.15 does."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kime import names
from kime.errors import ModelNotFound
from kime.names import CONFIG_FILE, Kind, parse

SPELLINGS = sorted(set(names.ALIASES) | set(names.MODELS))
SEGMENT = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,10}", fullmatch=True)
PADDING = st.text(alphabet=" \t\r\n", max_size=3)
# Strings that hit the rules' edges: separators, a leading `.`/`~`, `hf://`, and anything else.
AWKWARD = st.one_of(
    st.text(alphabet=st.sampled_from(list("aZ0./\\~-_: hf")), max_size=24),
    st.text(max_size=24),
    st.builds(lambda a, b: "hf://" + a + b, st.text(max_size=10),
              st.text(alphabet="/.a-", max_size=10)),
)


@pytest.fixture(scope="module")
def empty_cwd(tmp_path_factory):
    """An empty working directory, so no bare string names a directory by accident."""
    where = tmp_path_factory.mktemp("empty")
    before = os.getcwd()
    os.chdir(where)
    yield where
    os.chdir(before)


def _checkpoint(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / CONFIG_FILE).write_text("{}")
    return directory


# --- built-ins and aliases -------------------------------------------------------------------

@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(SPELLINGS), st.lists(st.booleans(), min_size=24, max_size=24),
       PADDING, PADDING)
def test_aliases_in_any_case_and_padding_name_their_builtin(empty_cwd, spelling, upper, left,
                                                           right):
    odd = "".join(c.upper() if up else c for c, up in zip(spelling, upper))
    text = left + odd + right
    want = names.ALIASES.get(spelling, spelling)
    got = parse(text)
    assert got.kind is Kind.BUILTIN and got.builtin == want
    assert (got.repo, got.subfolder, got.path) == (names.BUNDLE_REPO, names.MODELS[want], None)
    assert got.name == odd
    assert names.canonical_name(text) == names.builtin(text) == want
    assert names.builtin_spec(text) == (names.BUNDLE_REPO, names.MODELS[want])


@given(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,12}", fullmatch=True))
def test_a_name_that_is_no_builtin_canonicalises_to_itself(key):
    if key in names.ALIASES or key in names.MODELS:
        return
    assert names.canonical_name(" %s " % key.upper()) == key
    assert names.builtin(key) is None and names.builtin_spec(key) is None
    assert names.is_checkpoint_name(" %s\t" % key.upper())


def test_unknown_and_empty_names_say_what_is_accepted(empty_cwd):
    with pytest.raises(ModelNotFound, match="unknown model 'englsh'; known names: english"):
        parse("englsh")
    for blank in ("", "   ", "\t\n"):
        with pytest.raises(ModelNotFound, match="empty model name.*hf://org/repo"):
            parse(blank)


# --- hf:// references --------------------------------------------------------------------------

@given(st.sampled_from(["hf://", "HF://", "Hf://"]), SEGMENT, SEGMENT,
       st.lists(SEGMENT, max_size=3), st.booleans())
def test_good_hf_references(prefix, org, repo, subs, trailing):
    ref = prefix + org + "/" + repo + "".join("/" + s for s in subs) + ("/" if trailing else "")
    got = parse(ref)
    assert got.kind is Kind.HF_REF and got.path is None and got.builtin is None
    assert (got.repo, got.subfolder) == (org + "/" + repo, "/".join(subs) or None)
    if subs:
        assert got.describe() == "subfolder %r of Hugging Face repo %s/%s" % (
            "/".join(subs), org, repo)


@given(SEGMENT, SEGMENT, st.lists(SEGMENT, max_size=2), st.sampled_from([".", ".."]),
       st.integers(0, 3))
def test_a_dot_segment_anywhere_is_a_bad_reference(org, repo, subs, dot, at):
    parts = [org, repo] + subs
    parts.insert(min(at, len(parts)), dot)
    with pytest.raises(ModelNotFound, match="bad Hub reference"):
        parse("hf://" + "/".join(parts))


@pytest.mark.parametrize("ref", ["hf://", "hf:///", "hf://org", "hf://org/", "hf://-org/repo",
                                 "hf://org/_repo", "hf://o rg/repo", "hf://org/re po/x",
                                 "hf://.org/repo"])
def test_bad_hf_references(ref):
    with pytest.raises(ModelNotFound, match="bad Hub reference.*hf://org/repo/sub/folder"):
        parse(ref)


# --- repo ids and the bundle -------------------------------------------------------------------

@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(SEGMENT, SEGMENT)
def test_an_absent_org_repo_is_a_repo_id_and_reads_as_its_hf_reference(empty_cwd, org, repo):
    text = org + "/" + repo
    got = parse(text)
    bundle = text.lower() == names.BUNDLE_REPO
    assert got.kind is (Kind.BUNDLE if bundle else Kind.REPO_ID)
    assert (got.repo, got.subfolder, got.path) == (text, None, None)
    again = parse("hf://" + text)
    assert (again.repo, again.subfolder) == (got.repo, got.subfolder)


def test_the_bundle_and_the_published_ids(empty_cwd):
    assert parse("convaiinnovations/laya").kind is Kind.BUNDLE
    assert parse("ConvAIInnovations/Laya").kind is Kind.BUNDLE
    assert names.is_bundle_id(" ConvAIInnovations/LAYA ")
    published = parse("convaiinnovations/laya-multilingual")
    assert published.kind is Kind.REPO_ID and published.builtin is None
    assert names.published_builtin(" Convaiinnovations/Laya-Typed-Decisions ") == "typed-decisions"
    assert names.published_builtin("convaiinnovations/laya") is None  # holds all three
    assert names.published_builtin("laya-multilingual") is None  # an alias, not an id


def test_hub_checkpoint_names_a_split_source():
    inner = names.hub_checkpoint("org/repo", "a/b")
    assert (inner.name, inner.kind, inner.repo, inner.subfolder) == (
        "org/repo/a/b", Kind.HF_REF, "org/repo", "a/b")
    assert names.hub_checkpoint(names.BUNDLE_REPO).kind is Kind.BUNDLE
    assert names.hub_checkpoint("org/repo").describe() == "root of Hugging Face repo org/repo"


# --- paths on disk -----------------------------------------------------------------------------

def test_a_checkpoint_directory_named_like_an_alias_is_the_directory(tmp_path, monkeypatch):
    # Laya loads ./laya from disk when it holds a checkpoint, and the alias otherwise.
    monkeypatch.chdir(tmp_path)
    for alias in ("laya", "ML", "typed-decisions"):
        (tmp_path / alias).mkdir()
        assert parse(alias).kind is Kind.BUILTIN
        assert not names.is_local_checkpoint_arg(alias)
        _checkpoint(tmp_path / alias)
        got = parse(alias)
        assert got.kind is Kind.PATH and got.path == tmp_path / alias and got.repo is None
        assert names.is_local_checkpoint_arg(alias) and names.holds_checkpoint(alias)
        assert not names.written_as_source(alias)  # the spelling alone says name


def test_a_bare_directory_without_a_checkpoint(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine").mkdir()
    got = parse("mine")
    assert got.kind is Kind.PATH and got.path == tmp_path / "mine"
    assert not names.holds_checkpoint("mine")
    with pytest.raises(ModelNotFound, match="unknown model 'theirs'"):
        parse("theirs")


def test_an_org_repo_directory_wins_over_the_hub(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert parse("org/repo").kind is Kind.REPO_ID
    (tmp_path / "org" / "repo").mkdir(parents=True)  # no checkpoint in it: still the path
    got = parse("org/repo")
    assert got.kind is Kind.PATH and got.path == tmp_path / "org" / "repo"


@pytest.mark.parametrize("text", ["./x", "../x", "x/", ".hidden", "a\\b", "./laya", "~nobody-xyz",
                                  "/no/such/dir"])
def test_spelled_paths_stay_paths_whether_or_not_they_exist(tmp_path, monkeypatch, text):
    monkeypatch.chdir(tmp_path)
    got = parse(text)
    assert got.kind is Kind.PATH and got.path is not None and got.path.is_absolute()
    assert names.written_as_source(text) and names.is_local_checkpoint_arg(text)


def test_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    _checkpoint(tmp_path / "models" / "laya")
    got = parse("~/models/laya")
    assert got.kind is Kind.PATH and got.path == tmp_path / "models" / "laya"
    assert got.describe() == "local directory %s" % (tmp_path / "models" / "laya")


def test_the_empty_string_is_never_a_path(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _checkpoint(tmp_path)  # `""` joined with the config file would find this one
    assert names.holds_checkpoint(".") and not names.holds_checkpoint("")
    assert not names.is_local_checkpoint_arg("") and not names.written_as_source("")


@pytest.mark.parametrize("text, explicit", [
    ("/abs/path", True), ("./here", True), ("../up", True), ("org/repo", False),
    ("~/models", False), ("laya", False), (".hidden", False), ("hf://org/repo", False)])
def test_explicit_paths_are_absolute_or_dot_relative(text, explicit):
    assert names.is_explicit_path(text) is explicit


@pytest.mark.parametrize("text, separator, source", [
    ("org/repo", True, True), ("a\\b", True, True), ("~foo", False, True), (".x", False, True),
    ("jev-1", False, False), ("laya", False, False), ("", False, False)])
def test_separator_and_source_spellings(text, separator, source):
    # A single-model server refuses only a separator; a routed body also a leading `.`/`~`.
    assert names.has_separator(text) is separator
    assert names.written_as_source(text) is source


# --- every string --------------------------------------------------------------------------------

@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=300)
@given(AWKWARD)
def test_any_string_parses_to_a_consistent_kind_or_model_not_found(empty_cwd, text):
    try:
        got = parse(text)
    except ModelNotFound as e:
        assert str(e)
        return
    assert got.name == text.strip()
    if got.kind is Kind.PATH:
        assert got.path is not None and got.path.is_absolute() and got.repo is None
    else:
        assert got.path is None and names.REPO_ID.match(got.repo or "")
    if got.kind is Kind.BUILTIN:
        assert got.builtin == names.builtin(text) and got.repo == names.BUNDLE_REPO
    else:
        assert got.builtin is None
    if got.kind in (Kind.BUNDLE, Kind.REPO_ID):
        assert got.repo == got.name and got.subfolder is None
        assert names.is_local_checkpoint_arg(got.name)  # an org/repo is spelled as a path
    if names.written_as_source(text.strip()) and not text.strip().lower().startswith("hf://"):
        assert got.kind in (Kind.PATH, Kind.REPO_ID, Kind.BUNDLE)
