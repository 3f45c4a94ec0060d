"""`kime.laya.lang` (script and language detection for routing) against what Laya 0.4.15's
`laya.lang` answered on the same states (`tools/goldens_router.py` -> `tests/goldens/lang.json`):
every field of `analyse`, the `explain` diagnostic, and the helpers on the flattened text. Plus
property tests: detection never raises on arbitrary JSON-like states, and its fields keep their
invariants.
"""
from __future__ import annotations

import json
import math
from typing import Any, Dict, List

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kime.laya import lang

from ..paths import GOLDENS

DATA = json.loads((GOLDENS / "lang.json").read_text(encoding="utf-8"))
STATES: List[Dict[str, Any]] = DATA["states"]
FIELDS = ["script", "script_profile", "language", "is_english", "language_undecided",
          "diacritic_rate", "non_latin_fraction", "mixed_segment"]


def test_the_goldens_cover_what_the_issue_asks():
    assert len(STATES) >= 200
    scripts = {s["analyse"]["script"] for s in STATES}
    languages = {s["analyse"]["language"] for s in STATES} - {None}
    # thirty languages and scripts at least, counted from Laya's own verdicts
    assert len(scripts - {"latin"}) + len(languages) >= 30, (scripts, languages)
    kinds = {type(s["state"]).__name__ for s in STATES}
    assert {"str", "dict", "list"} <= kinds
    assert any(s["analyse"]["mixed_segment"] for s in STATES)
    assert any(s["explain"]["stage"] == "value" for s in STATES)


@pytest.mark.parametrize("case", STATES, ids=[s["id"] for s in STATES])
def test_analyse_agrees_with_laya(case):
    got = lang.analyse(case["state"])
    # the same fields in the same order, the same values bit for bit (same arithmetic)
    assert list(got) == FIELDS
    assert got == case["analyse"]
    assert lang.analyse(case["state"], explain=True)["diagnostic"] == case["explain"]
    assert lang.is_english(case["state"]) is case["is_english"]
    text = lang.state_text(case["state"])
    assert text == case["state_text"]
    assert lang.detect_script(text) == case["detect_script"]
    assert lang.script_profile(text) == case["script_profile"]
    assert list(lang.script_profile(text)) == list(case["script_profile"])
    assert lang.latin_profile(text) == case["latin_profile"]
    assert lang.guess_latin_language(text) == case["guess_latin_language"]


def test_state_text_caps_and_joins():
    state = {"a": "x" * 10, "b": ["yy", {"c": "zzz"}], "n": 5}
    assert lang.state_text(state) == "xxxxxxxxxx yy zzz"
    assert lang.state_text(state, max_chars=12) == "xxxxxxxxxx y"
    assert lang.state_text(b"caf\xc3\xa9") == "café"
    assert lang.state_text(b"\xff\xfe") == ""


def test_a_letter_newer_than_this_interpreter_still_counts_as_non_latin():
    # U+10570 (Vithkuqi) is unassigned before Unicode 14; a script no block names is "other"
    text = "\U00010570\U00010571\U00010572"
    assert lang.detect_script(text) == "other"
    assert lang.analyse(text)["is_english"] is False


def test_detection_is_not_quadratic_on_one_long_token():
    """The per-token patterns have a fixed width, so none can backtrack over a long token (an
    open-ended `[^\\W_]+[._/]...` took seconds on 20,000 letters). The pattern's shape is what
    is checked, not the time, which a loaded machine changes; the long token still reads."""
    try:
        import re._parser as parser  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # Python 3.10
        import sre_parse as parser

    assert parser.parse(lang._JOINED.pattern).getwidth() == (3, 3)
    result = lang.analyse({"x": "a" * 20_000, "y": "hello there, how are you"})
    assert result["is_english"] is True


# --- properties ---------------------------------------------------------------------------------

TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=80) | st.sampled_from(
    ["Mein Konto wurde zweimal belastet", "MON DES EST LA", "注文した商品", "I was charged twice",
     "Voce pode me mandar a nota fiscal?", "x = foo(bar)", "Дмитрий Петрович", "\n", ""])
LEAF = TEXT | st.integers() | st.floats(allow_nan=True) | st.booleans() | st.none()
JSONISH = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=4)
                       | st.dictionaries(st.text(max_size=8) | st.integers(), inner, max_size=4),
                       max_leaves=20)


@pytest.mark.slow  # hypothesis: a few hundred states
@given(JSONISH)
def test_analyse_never_raises_and_keeps_its_invariants(state):
    found = lang.analyse(state, explain=True)
    assert list(found)[:len(FIELDS)] == FIELDS
    assert found["script"] in {"unknown", "latin", "other"} | {
        name for name, _ in lang._SCRIPT_BLOCKS}
    profile = found["script_profile"]
    assert all(0 < share <= 1 for share in profile.values())
    assert not profile or math.isclose(sum(profile.values()), 1.0)
    assert 0 <= found["non_latin_fraction"] <= 1 and 0 <= found["diacritic_rate"] <= 1
    assert found["is_english"] is lang.is_english(state)
    if found["script"] not in ("latin", "unknown"):
        assert found["is_english"] is False
    if found["mixed_segment"] is not None:
        assert found["is_english"] is False and found["language"] is not None
    assert found["diagnostic"]["stage"] in {"whole_state", "segment", "value"}
    json.dumps(found)  # it serialises as it is, into a response's `routing`


@given(TEXT)
def test_the_script_helpers_agree_with_each_other(text):
    profile = lang.script_profile(text)
    script = lang.detect_script(text)
    if not profile:
        assert script == "unknown"
    else:
        assert profile[script] == max(profile.values())
