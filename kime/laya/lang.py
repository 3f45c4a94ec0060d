"""Script and language detection for routing, with Laya 0.4.15's fields and decisions
(`laya.lang`): `analyse`, `detect_script`, `is_english`, `script_profile`, `state_text`,
`latin_profile` and `guess_latin_language`.

The Router asks one question of a state: can the English checkpoint read it? (It collapses,
confidently, on text it has no tokens for.) The first signal is the script, exact; the second
whether Latin text is English, from function words and diacritics, best effort (`latin`). Every
threshold, word list and tie-break is Laya's: a different decision is a different checkpoint, so
a different answer. The tables are in `lang_data`; this module holds the rules that read them.
Pure Python, no model; what counts as a letter never depends on the interpreter's Unicode
database (`_is_letter`), so every supported Python routes a text the same way.
"""
from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Mapping
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

from .lang_data import LATE_LETTERS, SCRIPT_BLOCKS
from .latin import (ENGLISH_RESCUE_DIACRITIC_RATE, NON_EN_DIACRITIC_RATE, STOP, WORD,
                    guess_latin_language, latin_evidence, latin_profile)

StateLike = Union[str, bytes, bytearray, Mapping, list, tuple, None]

# --- scripts ------------------------------------------------------------------------------------

_SCRIPT_BLOCKS = SCRIPT_BLOCKS  # the name tests/**/test_laya_lang.py reads

_BLOCKS = sorted((lo, hi, name) for name, spans in _SCRIPT_BLOCKS for lo, hi in spans)
_BLOCK_STARTS = [lo for lo, _, _ in _BLOCKS]


def _is_letter(ch: str) -> bool:
    """Whether `ch` is a letter as the newest Unicode says, on any supported interpreter. The
    table is consulted only for what this interpreter calls unassigned, so ASCII and ordinary
    text cost one `isalpha()` and a compare."""
    if ch.isalpha():
        return True
    cp = ord(ch)
    if cp < LATE_LETTERS[0][0] or unicodedata.category(ch) != "Cn":
        return False
    return any(lo <= cp <= hi for lo, hi in LATE_LETTERS)


def _latin_code(cp: int, first_non_latin: int) -> bool:
    """Latin (Basic to Extended-B, plus Extended Additional and the fullwidth letters)."""
    return (cp < first_non_latin or 0x1E00 <= cp <= 0x1EFF or 0xFF21 <= cp <= 0xFF3A
            or 0xFF41 <= cp <= 0xFF5A)


def _block_of(cp: int) -> Optional[str]:
    i = bisect.bisect_right(_BLOCK_STARTS, cp) - 1
    return _BLOCKS[i][2] if i >= 0 and cp <= _BLOCKS[i][1] else None


def _script_counts(text: str) -> Dict[str, int]:
    """Letters per script, scripts in order of first appearance and "latin" always last: `max`
    keeps the first of equal counts, so a named script wins a tie against Latin. A letter no
    block claims counts as "other", which is non-Latin: an unlisted script must not read as
    "no letters" and be handed to the English checkpoint."""
    counts: Dict[str, int] = {}
    latin = 0
    for ch in text:
        if not _is_letter(ch):
            continue
        cp = ord(ch)
        if _latin_code(cp, 0x02B0):
            latin += 1
            continue
        name = _block_of(cp) or "other"
        counts[name] = counts.get(name, 0) + 1
    counts["latin"] = latin
    return counts


def _dominant(counts: Dict[str, int]) -> str:
    if not any(counts.values()):
        return "unknown"
    return max(counts.items(), key=lambda item: item[1])[0]


def _fractions(counts: Dict[str, int]) -> Dict[str, float]:
    """Each script's share of the letters, Latin first (the order Laya reports)."""
    total = sum(counts.values())
    if not total:
        return {}
    order = ["latin"] + [name for name in counts if name != "latin"]
    return {name: counts[name] / total for name in order if counts.get(name)}


def detect_script(text: str) -> str:
    """The dominant script of `text` (`latin`, `han`, `cyrillic`, ...; `other` for a script
    with no name here), or `unknown` when it has no letters."""
    return _dominant(_script_counts(text))


def script_profile(text: str) -> Dict[str, float]:
    """The fraction of `text`'s letters in each script present."""
    return _fractions(_script_counts(text))


# --- non-Latin letters inside Latin text --------------------------------------------------------

NON_LATIN_FRACTION = 0.2
"""A share of non-Latin letters that makes Latin-plurality text non-Latin on its own..."""
NON_LATIN_MIN_FRACTION = 0.1
NON_LATIN_MIN_LETTERS = 10
"""...or this smaller share, with at least this many non-Latin letters (a long payload)."""


def _non_latin_carries(fraction: float, letters: int) -> bool:
    return (fraction >= NON_LATIN_FRACTION
            or (fraction >= NON_LATIN_MIN_FRACTION and letters >= NON_LATIN_MIN_LETTERS))


def _non_latin_words(text: str) -> List[str]:
    """Runs of one named non-Latin script that read as words: two letters or more and not
    capitalised, so a symbol (`α`), a proper name (`Дмитрий`) or a transcription inside English
    prose is not counted. Combining marks stay inside their word."""
    runs: List[str] = []
    run, script = "", None
    for ch in text:
        if unicodedata.combining(ch):
            continue
        cp = ord(ch)
        name = None if _latin_code(cp, 0x0250) else _block_of(cp)
        if name is not None and name == script:
            run += ch
            continue
        if run:
            runs.append(run)
        run, script = (ch, name) if name is not None else ("", None)
    if run:
        runs.append(run)
    return [w for w in runs if len(w) >= 2 and not w[0].isupper()]


# --- lines and fields ---------------------------------------------------------------------------

# A line with code syntax is not prose in any language (`os.path` reads as Portuguese).
_CODE_LINE = re.compile(r"[=;{}\[\]]|\w\(")
# `Nav/Com`, `C:\DOS`, `v1.2`: a token joining letters or digits is a name (fixed width on
# purpose: an open-ended pattern backtracks quadratically on user input).
_JOINED = re.compile(r"[^\W_][._/\\][^\W_]")
_LETTER_RUN = re.compile(r"[^\W\d_]{2,}")
# An all-caps line (`MON DES EST LA`) must show more than acronyms: a word of five letters, and
# a matched function word of four or a foreign diacritic (Laya's measured bars).
_SHOUTED_MINSTOPWORD = 4
_SHOUTED_MIN_WORD = 5


def _shouted(text: str) -> bool:
    """Cased text written entirely in capitals (caseless scripts are never shouting)."""
    return any(ch.isupper() for ch in text) and not any(ch.islower() for ch in text)


def _shouted_evidence(tokens: List[str], lang: str, rate: float) -> bool:
    if not any(len(t) >= _SHOUTED_MIN_WORD for t in tokens):
        return False
    if rate >= NON_EN_DIACRITIC_RATE:
        return True
    matched = {t.lower() for t in tokens} & STOP.get(lang, frozenset())
    return any(len(w) >= _SHOUTED_MINSTOPWORD for w in matched)


def _blank_acronyms(text: str) -> str:
    return _LETTER_RUN.sub(lambda m: " " if m.group().isupper() else m.group(), text)


def _line_language(line: str) -> Optional[str]:
    """The non-English language one prose line is written in, or None: four words, a language
    `latin_profile` names, two different words of its list; acronyms, compounds and code do not
    count as words."""
    if not line.strip() or _CODE_LINE.search(line):
        return None
    prose = " ".join(tok for tok in line.split() if not _JOINED.search(tok))
    shouted = _shouted(prose)
    if not shouted:
        prose = _blank_acronyms(prose)
    tokens = WORD.findall(prose)
    if len(tokens) < 4:
        return None
    found = latin_profile(prose)
    lang = found["language"]
    if lang in (None, "en"):
        return None
    if shouted and not _shouted_evidence(tokens, lang, float(found["diacritic_rate"])):
        return None
    if len({t.lower() for t in tokens} & STOP.get(lang, frozenset())) < 2:
        return None
    return lang


# --- reading a state ----------------------------------------------------------------------------

_MAX_DEPTH = 6
_Path = Optional[Tuple[Any, ...]]


def _leaves(state: Any, depth: int = 0, path: _Path = ()) -> Iterator[Tuple[_Path, str]]:
    """The string values of a state with their paths, depth first; keys are skipped (they are
    usually English field names). Any Mapping counts; bytes count when they are UTF-8. A path
    becomes None under a key too long or too odd to report."""
    if depth > _MAX_DEPTH or state is None:
        return
    if isinstance(state, str):
        yield path, state
    elif isinstance(state, (bytes, bytearray)):
        try:
            yield path, bytes(state).decode("utf-8")
        except UnicodeDecodeError:
            return
    elif isinstance(state, Mapping):
        for key, value in state.items():
            reportable = ((type(key) is str and len(key) <= 128)
                          or (type(key) is int and key.bit_length() <= 63))
            inner = path + (key,) if path is not None and reportable else None
            yield from _leaves(value, depth + 1, inner)
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            yield from _leaves(value, depth + 1, None if path is None else path + (i,))


def state_text(state: StateLike, max_chars: int = 4000) -> str:
    """The state's string values joined by spaces, at most `max_chars` characters: the text
    detection reads."""
    parts: List[str] = []
    room = max_chars
    for _, text in _leaves(state):
        if room <= 0:
            break
        if len(text) > room:
            parts.append(text[:room])
            break
        parts.append(text)
        room -= len(text) + 1
    return " ".join(parts)[:max_chars]


def _source(path: _Path, index: int, line: int) -> Dict[str, Any]:
    return {"leaf_index": index, "path": list(path) if path is not None else None, "line": line}


def _foreign_line(state: Any, diagnostic: Optional[Dict[str, Any]],
                  max_chars: int = 4000) -> Optional[Tuple[str, str]]:
    """(language, line) of the first line or field that is foreign prose on its own, reading
    at most `max_chars` characters: a long English part must not outvote a short foreign one."""
    read = 0
    for index, (path, text) in enumerate(_leaves(state)):
        for number, line in enumerate(text.split("\n"), 1):
            if read >= max_chars:
                return None
            line = line[:max_chars - read]
            read += len(line)
            lang = _line_language(line)
            if lang:
                if diagnostic is not None:
                    diagnostic.update(stage="segment", reason="named_segment",
                                      source=_source(path, index, number))
                return lang, line.strip()
    return None


def _detect(text: str, diagnostic: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """The verdict on one flattened text (no per-line scan)."""
    counts = _script_counts(text)
    profile = _fractions(counts)
    script = _dominant(counts)
    non_latin = round(1.0 - profile.get("latin", 0.0), 4) if profile else 0.0
    non_latin_letters = round(non_latin * sum(ch.isalpha() for ch in text))
    # Latin letters can be the plurality (a brand, an order code) while the request is CJK.
    if (script == "latin" and _non_latin_words(text)
            and _non_latin_carries(non_latin, non_latin_letters)):
        script = max((name for name in profile if name != "latin"), key=lambda n: profile[n])

    def verdict(language: Optional[str], english: bool, undecided: bool, rate: float,
                fraction: float) -> Dict[str, Any]:
        return {"script": script, "script_profile": profile, "language": language,
                "is_english": english, "language_undecided": undecided, "diacritic_rate": rate,
                "non_latin_fraction": fraction, "mixed_segment": None}

    if script == "unknown":
        if diagnostic is not None:
            diagnostic["reason"] = "no_letters"
        return verdict(None, True, True, 0.0, 0.0)
    if script != "latin":
        if diagnostic is not None:
            diagnostic["reason"] = "non_latin_script"
        return verdict(None, False, True, 0.0, non_latin)
    evidence = latin_evidence(text, diagnostic)
    lang = evidence["language"]
    # Acronyms are not words for the whole-text verdict either, unless caseless letters carry
    # the text: the bars below only take Latin evidence away, and cannot see the rest of it.
    if lang not in (None, "en") and not _non_latin_carries(non_latin, non_latin_letters):
        if _shouted(text):
            if not _shouted_evidence(WORD.findall(text), lang, float(evidence["diacritic_rate"])):
                lang = None
                if diagnostic is not None:
                    diagnostic["reason"] = "caps_veto"
        else:
            # Only acronym-shaped capitals are blanked: an emphasised word is still a word.
            caps = [m.group() for m in _LETTER_RUN.finditer(text) if m.group().isupper()]
            if caps and not any(len(c) >= _SHOUTED_MIN_WORD for c in caps):
                blanked = _blank_acronyms(text)
                if blanked != text:
                    lang = latin_profile(blanked)["language"]
                    if diagnostic is not None:
                        diagnostic["reason"] = "caps_filtered"
    # Undecided is not English: foreign letters or a Nordic marker still mean "not English".
    undecided = lang is None
    english = lang == "en" or (undecided and not evidence["looks_non_english"])
    if diagnostic is not None and undecided and not english:
        diagnostic["reason"] = "non_english_markers"
    return verdict(lang, english, undecided, round(float(evidence["diacritic_rate"]), 4),
                   non_latin)


def _foreign_value(text: str, diagnostic: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """The verdict on the longest line of one string value that the English checkpoint cannot
    read, or None. Names, code lines, acronyms and compounds stay out, as in the line scan;
    every line is read up to 4000 characters whatever the other fields hold."""
    best: Optional[Dict[str, Any]] = None
    best_letters = -1
    for number, line in enumerate(text.split("\n"), 1):
        if len(line) < 7:  # four words or ten letters cannot fit in fewer characters
            continue
        sample = line[:4000]
        if not sample.strip() or _CODE_LINE.search(sample):
            continue
        found = _detect(sample)
        if found["is_english"]:
            continue
        named = found["language"] not in (None, "en") and _line_language(sample) is not None
        if not named:
            if found["script"] not in ("latin", "unknown"):
                if not (_non_latin_words(sample)
                        and sum(ch.isalpha() for ch in sample) >= NON_LATIN_MIN_LETTERS):
                    continue
            elif not (float(found["diacritic_rate"]) >= NON_EN_DIACRITIC_RATE
                      and len(WORD.findall(sample)) >= 4):
                continue
        letters = sum(ch.isalpha() for ch in sample)
        if letters > best_letters:
            best_letters, best = letters, found
            diagnostic.update(line=number, reason=(
                "named_value" if named else "non_latin_value"
                if found["script"] not in ("latin", "unknown") else "diacritic_value"))
    return best


def analyse(state: StateLike, *, explain: bool = False) -> Dict[str, Any]:
    """Laya's detection result for a state: `script`, `script_profile`, `language` (best
    effort, None when undecided), `is_english`, `language_undecided`, `diacritic_rate`,
    `non_latin_fraction` and `mixed_segment` (the line the segment scan named, else None).

    The joined text is read first. A state that reads English is then read line by line, and a
    structured one value by value, because one foreign line or field is enough to make the
    English checkpoint the wrong one. `explain=True` adds `diagnostic`: the deciding stage
    (`whole_state`, `segment`, `value`), its reason, and for a line or value its leaf index,
    path and line number (never the text).
    """
    diagnostic = {"stage": "whole_state", "reason": None, "source": None} if explain else None
    result = _detect(state_text(state), diagnostic)
    if diagnostic is not None:
        result["diagnostic"] = diagnostic
    if result["script"] == "latin" and result["is_english"]:
        texts = [text for _, text in _leaves(state)]
        if len(texts) > 1 or any("\n" in text for text in texts):
            line = _foreign_line(state, diagnostic)
            if line:
                result = dict(result, language=line[0], is_english=False,
                              language_undecided=False, mixed_segment=line[1])
    if isinstance(state, (str, bytes, bytearray)) or state is None or not result["is_english"]:
        return result
    best: Optional[Dict[str, Any]] = None
    best_letters = -1
    chosen: Dict[str, Any] = {}
    for index, (path, text) in enumerate(_leaves(state)):
        found_at: Dict[str, Any] = {}
        found = _foreign_value(text, found_at)
        if found is None:
            continue
        letters = sum(ch.isalpha() for ch in text[:4000])
        if letters > best_letters:
            best_letters, best = letters, found
            chosen = {"reason": found_at["reason"],
                      "source": _source(path, index, found_at["line"])}
    if best is None:
        return result
    if diagnostic is not None:
        diagnostic.update(stage="value", **chosen)
    return dict(result, language=best["language"], is_english=False,
                language_undecided=best["language_undecided"])


def is_english(state: StateLike) -> bool:
    """Whether the English checkpoint can be expected to read `state`."""
    return bool(analyse(state)["is_english"])


__all__ = ["ENGLISH_RESCUE_DIACRITIC_RATE", "NON_EN_DIACRITIC_RATE", "NON_LATIN_FRACTION",
           "NON_LATIN_MIN_FRACTION", "NON_LATIN_MIN_LETTERS", "analyse", "detect_script",
           "guess_latin_language", "is_english", "latin_profile", "script_profile", "state_text"]
