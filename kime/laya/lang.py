"""Script and language detection for routing, with Laya 0.4.15's fields and decisions
(`laya.lang`): `analyse`, `detect_script`, `is_english`, `script_profile`, `state_text`,
`latin_profile` and `guess_latin_language`.

The Router asks one question of a state: can the English checkpoint read it? (It collapses,
confidently, on text it has no tokens for.) The first signal is the script, exact; the second
whether Latin text is English, from function words and diacritics, best effort. Every threshold,
word list and tie-break is Laya's: a different decision is a different checkpoint, so a different
answer. Pure Python, no model; what counts as a letter never depends on the interpreter's
Unicode database (`_is_letter`), so every supported Python routes a text the same way.
"""
from __future__ import annotations

import bisect
import re
import unicodedata
from collections import Counter
from collections.abc import Mapping
from typing import Any, Dict, FrozenSet, Iterator, List, Optional, Tuple, Union

StateLike = Union[str, bytes, bytearray, Mapping, list, tuple, None]

# --- scripts ------------------------------------------------------------------------------------

_SCRIPT_BLOCKS: Tuple[Tuple[str, Tuple[Tuple[int, int], ...]], ...] = (
    ("greek", ((0x0370, 0x03FF), (0x1F00, 0x1FFF))),
    ("cyrillic", ((0x0400, 0x052F), (0x2DE0, 0x2DFF), (0xA640, 0xA69F))),
    ("armenian", ((0x0530, 0x058F),)), ("hebrew", ((0x0590, 0x05FF),)),
    ("arabic", ((0x0600, 0x06FF), (0x0750, 0x077F), (0x08A0, 0x08FF), (0xFB50, 0xFDFF),
                (0xFE70, 0xFEFF))),
    ("devanagari", ((0x0900, 0x097F), (0xA8E0, 0xA8FF))), ("bengali", ((0x0980, 0x09FF),)),
    ("gurmukhi", ((0x0A00, 0x0A7F),)), ("gujarati", ((0x0A80, 0x0AFF),)),
    ("oriya", ((0x0B00, 0x0B7F),)), ("tamil", ((0x0B80, 0x0BFF),)),
    ("telugu", ((0x0C00, 0x0C7F),)), ("kannada", ((0x0C80, 0x0CFF),)),
    ("malayalam", ((0x0D00, 0x0D7F),)), ("sinhala", ((0x0D80, 0x0DFF),)),
    ("thai", ((0x0E00, 0x0E7F),)), ("lao", ((0x0E80, 0x0EFF),)), ("tibetan", ((0x0F00, 0x0FFF),)),
    ("myanmar", ((0x1000, 0x109F),)), ("georgian", ((0x10A0, 0x10FF),)),
    ("ethiopic", ((0x1200, 0x137F),)), ("khmer", ((0x1780, 0x17FF),)),
    ("hangul", ((0x1100, 0x11FF), (0x3130, 0x318F), (0xAC00, 0xD7AF))),
    ("kana", ((0x3040, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF))),
    ("han", ((0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF))),
)
"""The blocks of the scripts the English checkpoint cannot read (Laya's table)."""

_BLOCKS = sorted((lo, hi, name) for name, spans in _SCRIPT_BLOCKS for lo, hi in spans)
_BLOCK_STARTS = [lo for lo, _, _ in _BLOCKS]

# Letters that Unicode assigned after 14.0 (and the scripts 14.0 introduced, for 3.10's 13.0): an
# older interpreter calls them unassigned, so `isalpha()` alone would make text in them "no
# letters" on one Python and non-Latin on another. Laya's table, generated from the databases.
_LATE_LETTERS: Tuple[Tuple[int, int], ...] = (
    (0x01C89, 0x01C8A), (0x0A7CB, 0x0A7CD), (0x0A7DA, 0x0A7DC), (0x10570, 0x1057A),
    (0x1057C, 0x1058A), (0x1058C, 0x10592), (0x10594, 0x10595), (0x10597, 0x105A1),
    (0x105A3, 0x105B1), (0x105B3, 0x105B9), (0x105BB, 0x105BC), (0x105C0, 0x105F3),
    (0x10D4A, 0x10D65), (0x10D6F, 0x10D85), (0x10EC2, 0x10EC4), (0x10F70, 0x10F81),
    (0x1123F, 0x11240), (0x11380, 0x11389), (0x1138B, 0x1138B), (0x1138E, 0x1138E),
    (0x11390, 0x113B5), (0x113B7, 0x113B7), (0x113D1, 0x113D1), (0x113D3, 0x113D3),
    (0x11BC0, 0x11BE0), (0x11F02, 0x11F02), (0x11F04, 0x11F10), (0x11F12, 0x11F33),
    (0x12F90, 0x12FF0), (0x1342F, 0x1342F), (0x13441, 0x13446), (0x13460, 0x143FA),
    (0x16100, 0x1611D), (0x16A70, 0x16ABE), (0x16D40, 0x16D6C), (0x18CFF, 0x18CFF),
    (0x1B132, 0x1B132), (0x1B155, 0x1B155), (0x1DF25, 0x1DF2A), (0x1E030, 0x1E06D),
    (0x1E290, 0x1E2AD), (0x1E4D0, 0x1E4EB), (0x1E5D0, 0x1E5ED), (0x1E5F0, 0x1E5F0),
    (0x2B739, 0x2B739), (0x2EBF0, 0x2EE5D), (0x31350, 0x323AF),
)


def _is_letter(ch: str) -> bool:
    """Whether `ch` is a letter as the newest Unicode says, on any supported interpreter. The
    table is consulted only for what this interpreter calls unassigned, so ASCII and ordinary
    text cost one `isalpha()` and a compare."""
    if ch.isalpha():
        return True
    cp = ord(ch)
    if cp < _LATE_LETTERS[0][0] or unicodedata.category(ch) != "Cn":
        return False
    return any(lo <= cp <= hi for lo, hi in _LATE_LETTERS)


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


# --- function words -----------------------------------------------------------------------------

def _words(text: str) -> FrozenSet[str]:
    return frozenset(text.split())


# Laya's lists, in Laya's language order (ties between languages go to the earlier one). The
# Romance lists carry unaccented spellings because pipelines that strip accents leave function
# words as the only evidence; words that are also common English are left out of the others.
_STOP: Dict[str, FrozenSet[str]] = {
    "en": _words("""
        after already always and any are aren as at be because been before being between both but
        can could couldn didn didnt does doesn doesnt doing done dont down during each ever every
        few for from has hasn have haven havent here him his how i if in into is isn isnt it ive
        many might much must never nor not of on only onto our please shall she should some than
        that thats the their them then there these they this those through to too until very was
        wasn wasnt we were weren what whats when where which while who whom why will with within
        without won wont would wouldn yet you your youre yours"""),
    "fr": _words("""
        alors au aux avec bien bonjour ce ces cette comment dans des deux dois doit donc du elle
        elles est et fait fois il ils je jour jours la le les ma mais merci mes mois mon nous ont ou
        pas peut peux plus pour pourquoi quand que qui sa ses sont sur ta tes ton tous tout toute
        trois très tu une veut veux vous être"""),
    "de": _words("""
        aber auch auf aus bei bitte das dem den der dich die diese diesen dieser dieses dir ein eine
        einem einen einer für gibt habe haben heute ich im in ist jetzt kann kannst mein meine
        meinem meinen meiner mich mir mit nach nicht noch oder sich sind und uns von wann was welche
        werden wie wir wird wo wurde zu zum zur"""),
    "es": _words("""
        al algo aquí aunque como con cuando del donde dos el entre es esa ese eso esta este esto
        está fue fueron gracias han hay hemos hoy la las le les lo los mi muy más nada necesito ni
        nos para pero por porque puede pueden que quiero se ser sobre son su sus también tengo tiene
        tienen todo tres tu un una y ya"""),
    "pt": _words("""
        agora ainda alguem alguém ali antes ao aos aqui as até boa cadê com como consigo da das
        depois deu do dois dos e em entao então era esta estamos estava este estou está eu ficou fiz
        foi gostaria hoje isso isto ja já mais mas meu meus minha minhas muito na nada nao nas
        nenhum nenhuma ninguem ninguém noite nos nossa nosso não o obrigada obrigado olá onde ontem
        os para pela pelo pode podem por porque pra preciso quando que quero sao se ser seu sou sua
        são tambem também tarde tem tenho três tudo tá um uma vc vcs voce voces você vocês é"""),
    "it": _words("""
        abbiamo adesso agli alla alle anche ancora avete che ci ciao col come con da dagli dal dalla
        dallo degli dei del della delle dello deve devo devono di dove e ed era fra già gli grazie
        ha hai hanno ho ieri il la le lo mai mi mia mio molto ne negli nel nell nella non o oggi per
        perche più poco quando questa questo scusa sempre si sono stata stato su sua sul sulla sulle
        tra tuo un una uno voglio vorrei è"""),
    "nl": _words("""aan dat deze door een het is maar met naar niet ook op te van voor worden
        wordt zijn"""),
    "sv": _words("""
        appen aterbetala aterbetalning att behover behöver blivit debiterade dessa detta faktura fel
        från får ganger gång gånger gör göra hittar hjalp hjalpa hjälp hjälpa här installningarna
        installningen inställningarna inställningen inte jag kommer kraschar kvittot losenord
        lösenord mig min mitt måste nar när nästa och också om oppnar paket ska skicka skulle
        sparningen spårningen säger till tva två upp uppdaterats utan vi vill är återbetala
        återbetalning öppnar"""),
    "ro": _words("""aceasta această acest acesta acum ale care dar din după este foarte fost fără
        lui mi nu pentru până sunt să trebuie vreau vă în și ți"""),
    "bn": _words("""
        abar ajke akhon amader amake amar ami amra apnake apnar apnara apni ar asbe bhai bhalo bolte
        bolun chai chaina dhonnobad dilam dite diye diyechi dorkar duibar ei eita ekbar ekhon ekhono
        ekta ferot geche gese hobe hocche hoise hoye hoyeche hoyni jabe jodi jonno kalke keno keu
        kharap khub ki kibhabe kichu kintu kivabe kobe kokhon korbo korchi kore koreche korechi
        koren korlam korsi korte korun kothay koto lagbe moddhe nai niye oi oita onek ota pabo paini
        parben parbo parchi parchina peyechi sathe shathe shob shomossa somossa tader tahole taka
        theke tomake tomar tomra tumi valo"""),
    "az": _words("""
        amma ancaq artiq artıq bir biz bu cox daha deyil də eger görə həm hər ile ilə isə kimi lakin
        mən nə olan olmasa olub onlar siz sonra sən ucun var ve və yalniz yalnız yox yoxdur çox üçün
        əgər"""),
}

# Two- and three-word Swedish support fragments are named by these alone; generic words such as
# `fel` or `paket` are not enough. ASCII spellings sit beside the Swedish ones.
_SHORT_SWEDISH = _words("""
    abonnemanget aterbetalning atkomst behover behöver betalningen fakturan felmeddelande glomt
    glömt inloggningen installningen inställningen kvitto kvittot losenord lösenord sparningen
    spårningen återbetalning åtkomst""")

# Letters ordinary English does not use: the evidence that catches a Latin-script language with
# no list here (Polish, Czech, Turkish, ...). Matched on lowercased text.
_FOREIGN_LETTERS = frozenset("àâäãáåçéèêëíìîïñóòôöõøúùûüýÿßæœăâîșțşţąćęłńśźżčďěňřšťůžőűğı"
                             "āēģīķļņūžđə")

# Words Danish shares with the Swedish list: they may count toward Swedish but never name it.
_NORDIC_SHARED = _words("får hej ja jo kommer mig min nej om skulle tack vi")
# A word in several lists says "not English" without saying which language.
_SHARED = frozenset(w for w in set().union(*_STOP.values())
                    if sum(w in words for words in _STOP.values()) > 1) | _NORDIC_SHARED
_ENGLISH_ONLY = _STOP["en"] - _SHARED
# Foreign function words that are also ordinary English words: a repeat counts once, so "do
# more, do less" cannot clear a two-hit bar on one word.
_ONCE_ONLY = _words("come son do care todo im per plus") & frozenset(
    w for lang, words in _STOP.items() if lang != "en" for w in words)

_WORD = re.compile(r"[^\W\d_]+")
# Domains, e-mail addresses and dotted versions are not prose (`com` is Portuguese, `o` its
# article). The lookbehind anchors a match at a run's start, which keeps the scan linear.
_IDENTIFIER = re.compile(r"(?<![\w-])[\w-]*(?:[.@][\w-]+)+")

NON_EN_DIACRITIC_RATE = 0.02
"""Non-English letters per character above which Latin text counts as non-English evidence."""
ENGLISH_RESCUE_DIACRITIC_RATE = 0.06
"""Below this rate, two English-only function words can outvote one accented loanword."""
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
    return _latin_profile(text)


def _latin_profile(text: str, diagnostic: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    # `İ` lowers to `i` plus a combining dot, which no list holds
    words = _WORD.findall(_IDENTIFIER.sub(" ", text).replace("İ", "i").lower())
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
              for lang, listed in _STOP.items()}
    english = scores["en"]
    # A language whose every match is a shared word is out of the running, not merely behind.
    evidenced = {lang: score for lang, score in scores.items()
                 if lang != "en" and any(w not in _SHARED for w in seen & _STOP[lang])}
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


# --- lines and fields ---------------------------------------------------------------------------

# A line with code syntax is not prose in any language (`os.path` reads as Portuguese).
_CODE_LINE = re.compile(r"[=;{}\[\]]|\w\(")
# `Nav/Com`, `C:\DOS`, `v1.2`: a token joining letters or digits is a name (fixed width on
# purpose: an open-ended pattern backtracks quadratically on user input).
_JOINED = re.compile(r"[^\W_][._/\\][^\W_]")
_LETTER_RUN = re.compile(r"[^\W\d_]{2,}")
# An all-caps line (`MON DES EST LA`) must show more than acronyms: a word of five letters, and
# a matched function word of four or a foreign diacritic (Laya's measured bars).
_SHOUTED_MIN_STOPWORD = 4
_SHOUTED_MIN_WORD = 5


def _shouted(text: str) -> bool:
    """Cased text written entirely in capitals (caseless scripts are never shouting)."""
    return any(ch.isupper() for ch in text) and not any(ch.islower() for ch in text)


def _shouted_evidence(tokens: List[str], lang: str, rate: float) -> bool:
    if not any(len(t) >= _SHOUTED_MIN_WORD for t in tokens):
        return False
    if rate >= NON_EN_DIACRITIC_RATE:
        return True
    matched = {t.lower() for t in tokens} & _STOP.get(lang, frozenset())
    return any(len(w) >= _SHOUTED_MIN_STOPWORD for w in matched)


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
    tokens = _WORD.findall(prose)
    if len(tokens) < 4:
        return None
    found = latin_profile(prose)
    lang = found["language"]
    if lang in (None, "en"):
        return None
    if shouted and not _shouted_evidence(tokens, lang, float(found["diacritic_rate"])):
        return None
    if len({t.lower() for t in tokens} & _STOP.get(lang, frozenset())) < 2:
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
    evidence = _latin_profile(text, diagnostic)
    lang = evidence["language"]
    # Acronyms are not words for the whole-text verdict either, unless caseless letters carry
    # the text: the bars below only take Latin evidence away, and cannot see the rest of it.
    if lang not in (None, "en") and not _non_latin_carries(non_latin, non_latin_letters):
        if _shouted(text):
            if not _shouted_evidence(_WORD.findall(text), lang, float(evidence["diacritic_rate"])):
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
                      and len(_WORD.findall(sample)) >= 4):
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
