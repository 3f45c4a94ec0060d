"""`laya.lang` at kime's path (`from kime.lang import detect_script`): script and language
detection for routing, from `kime.laya.lang`."""
from .laya.lang import (ENGLISH_RESCUE_DIACRITIC_RATE, NON_EN_DIACRITIC_RATE, NON_LATIN_FRACTION,
                        NON_LATIN_MIN_FRACTION, NON_LATIN_MIN_LETTERS, analyse, detect_script,
                        guess_latin_language, is_english, latin_profile, script_profile,
                        state_text)

__all__ = ["ENGLISH_RESCUE_DIACRITIC_RATE", "NON_EN_DIACRITIC_RATE", "NON_LATIN_FRACTION",
           "NON_LATIN_MIN_FRACTION", "NON_LATIN_MIN_LETTERS", "analyse", "detect_script",
           "guess_latin_language", "is_english", "latin_profile", "script_profile", "state_text"]
