"""Is Latin-script text English, and if not, which language: Laya 0.4.15's second routing signal
(`laya.lang`'s function-word and diacritic evidence), best effort where the script is exact.

Every list, threshold and tie-break is Laya's (the lists are in `lang_data`): a different
decision is a different checkpoint, so a different answer. `lang` asks this module about the
Latin text it finds, whole or line by line.
"""
from __future__ import annotations

import re
from collections import Counter
from typing import Any, Dict, FrozenSet, List, Optional

from .lang_data import FOREIGN_LETTERS, NORDIC_SHARED, ONCE_ONLY, SHORT_SWEDISH, STOP_WORDS


def _words(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


STOP: Dict[str, FrozenSet[str]] = {lang: _words(text) for lang, text in STOP_WORDS.items()}
"""Laya's function words per language, in Laya's order (ties between languages go to the
earlier one)."""
_SHORT_SWEDISH = _words(SHORT_SWEDISH)
_FOREIGN_LETTERS = frozenset(FOREIGN_LETTERS)
_NORDIC_SHARED = _words(NORDIC_SHARED)
# A word in several lists says "not English" without saying which language.
_SHARED = frozenset(w for w in set().union(*STOP.values())
                    if sum(w in words for words in STOP.values()) > 1) | _NORDIC_SHARED
_ENGLISH_ONLY = STOP["en"] - _SHARED
# English-looking words some foreign list holds count once per text (see lang_data.ONCE_ONLY).
_ONCE_ONLY = _words(ONCE_ONLY) & frozenset(
    w for lang, words in STOP.items() if lang != "en" for w in words)

WORD = re.compile(r"[^\W\d_]+")
# Domains, e-mail addresses and dotted versions are not prose (`com` is Portuguese, `o` its
# article). The lookbehind anchors a match at a run's start, which keeps the scan linear.
_IDENTIFIER = re.compile(r"(?<![\w-])[\w-]*(?:[.@][\w-]+)+")

NON_EN_DIACRITIC_RATE = 0.02
"""Non-English letters per character above which Latin text counts as non-English evidence."""
ENGLISH_RESCUE_DIACRITIC_RATE = 0.06
"""Below this rate, two English-only function words can outvote one accented loanword."""


def _rescued_as_english(words: List[str], rate: float) -> bool:
    """English wins over a marginal diacritic rate with two distinct English-only words and at
    most one word carrying a foreign letter (one loanword is not a foreign vocabulary)."""
    if rate >= ENGLISH_RESCUE_DIACRITIC_RATE or len(set(words) & _ENGLISH_ONLY) < 2:
        return False
    return sum(1 for w in set(words) if any(ch in _FOREIGN_LETTERS for ch in w)) <= 1


def latin_profile(text: str) -> Dict[str, Any]:
    """The evidence behind the Latin-script guess: `language` (None when undecided),
    `english_hits`, `diacritic_rate` and `looks_non_english`. A language other than English is
    named only when it matched a word no other list holds, by a margin over English."""
    return latin_evidence(text)


def latin_evidence(text: str, diagnostic: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """`latin_profile`, and the reason for its verdict in `diagnostic["reason"]` when given
    (what `analyse(..., explain=True)` reports)."""
    # `İ` lowers to `i` plus a combining dot, which no list holds
    words = WORD.findall(_IDENTIFIER.sub(" ", text).replace("İ", "i").lower())
    lowered = text.lower()
    rate = sum(1 for ch in lowered if ch in _FOREIGN_LETTERS) / max(1, len(lowered))
    foreign = rate >= NON_EN_DIACRITIC_RATE
    seen = set(words)
    nordic = bool(seen & _NORDIC_SHARED) and not seen & _ENGLISH_ONLY

    def verdict(language: Optional[str], hits: int, looks: bool, reason: str) -> Dict[str, Any]:
        if diagnostic is not None:
            diagnostic["reason"] = reason
        return {"language": language, "english_hits": hits, "diacritic_rate": rate,
                "looks_non_english": looks}

    if 1 < len(words) < 4 and seen & _SHORT_SWEDISH:
        return verdict("sv", 0, foreign, "short_swedish")
    if len(words) < 4:
        return verdict(None, 0, foreign or nordic, "insufficient_words")
    counts = Counter(words)
    scores = {lang: sum(1 if w in _ONCE_ONLY else n for w, n in counts.items() if w in listed)
              for lang, listed in STOP.items()}
    english = scores["en"]
    # A language whose every match is a shared word is out of the running, not merely behind.
    evidenced = {lang: score for lang, score in scores.items()
                 if lang != "en" and any(w not in _SHARED for w in seen & STOP[lang])}
    best_lang, best = max(evidenced.items(), key=lambda item: item[1], default=(None, 0))
    language: Optional[str] = None
    if best_lang and best >= max(2, english + 2):
        language = best_lang
    elif (best_lang == "sv" and "inte" in seen and "kan" in seen
          and words[0] in ("kan", "jag", "vi") and english <= 1):
        language = best_lang  # "kan inte logga in": Swedish despite the English-shaped `in`
    elif best_lang and foreign and best >= max(2, english):
        language = best_lang
    elif english and (not foreign or _rescued_as_english(words, rate)):
        language = "en"
    return verdict(language, english, foreign or (language is None and nordic),
                   "language_evidence" if language else "no_language_evidence")


def guess_latin_language(text: str) -> Optional[str]:
    """The language code of Latin-script `text`, or None when undecided (short text usually
    is, on purpose)."""
    return latin_profile(text)["language"]


__all__ = ["ENGLISH_RESCUE_DIACRITIC_RATE", "NON_EN_DIACRITIC_RATE", "STOP", "WORD",
           "guess_latin_language", "latin_evidence", "latin_profile"]
