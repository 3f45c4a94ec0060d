"""Laya's email helpers (`laya.email`): `clean_email_body` keeps the new message of an email and
drops what would mislead the model (quoted history, which is often a different request, sign-offs,
device footers and confidentiality disclaimers), and `email_state` builds the state the email
presets read. English, Portuguese, Spanish and French clients are recognised; the markers are
`email_data`, the rules that read them are here, each as Laya 0.4.15 applies it.

Both are pure functions. Laya reads a body through `body or ""`, so any empty value is the empty
body; anything else must be a string, and a wrong type is refused naming the argument (Laya
fails inside `str.replace` or `str.strip` instead).
"""
from __future__ import annotations

import operator
import re
import unicodedata
from typing import Any, Dict, List, Optional

from ..errors import InvalidArgument, problem
from . import email_data as data
from .presets import email_questions

_I = re.IGNORECASE


def _attribution(word: str, verb: str, dated: bool) -> "re.Pattern[str]":
    return re.compile(r"^\s*%s %s.{0,300}%s\s*$" % (word, r"(?=.*\d)" if dated else "", verb), _I)


_QUOTE_HEADERS = [
    *(_attribution(*a) for a in data.ATTRIBUTIONS),
    re.compile(r"^\s*-{2,}\s*(%s)\s*-{2,}" % "|".join(data.SEPARATORS), _I),
    re.compile(r"^\s*_{8,}\s*$"),
    *(re.compile(r"^\s*%s\s.*[@<]" % label, _I) for label in data.SENDER_LABELS),
]
_ATTRIBUTION_TAIL = re.compile(r"^.{0,120}\S@\S+\s+(%s)\s*:\s*$" % data.ATTRIBUTION_VERBS, _I)
_ATTRIBUTION_HEAD = re.compile(r"^\s*(%s) (?=.*\d)" % "|".join(w for w, _, _ in data.ATTRIBUTIONS),
                               _I)
_SENDER_NAME = re.compile(r"^\s*" + data.SENDER_NAME, _I)
_HEADER_NEXT = re.compile(r"^\s*(%s)" % "|".join(data.HEADER_NEXT), _I)

_DASHES = re.compile(r"^\s*--\s*$")
_ENGLISH_CLOSING = re.compile(r"^\s*(%s)(%s)?" % ("|".join(data.ENGLISH_CLOSINGS),
                                                 "|".join(data.ENGLISH_CLOSING_TAILS)), _I)
# After the closing word: punctuation and at most three name-like words. Whether each word
# starts like a name is judged by its Unicode category (`_names_only`), which `re` cannot say.
_CLOSING_TAIL = re.compile(r"^[\s,;:!.]*(?:[^\W\d_][\w'-]*[\s,.]*){0,3}$")
_WORD = re.compile(r"[^\W\d_][\w'-]*")
_OTHER_CLOSING = re.compile(r"^\s*(%s)[\s,!.]*$" % "|".join(data.OTHER_CLOSINGS), _I)
_DEVICE_FOOTER = re.compile(
    r"^\s*((%s) (%s)( (%s))*|%s)[\s.!]*$" % (
        "|".join(data.DEVICE_INTROS), "|".join(data.DEVICES),
        "|".join(data.DEVICES + data.DEVICE_EXTRAS), data.OUTLOOK_APP_FOOTER), _I)
_DISCLAIMER = re.compile("(%s)" % "|".join(data.DISCLAIMERS), _I)
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_PARAGRAPH_BREAK = re.compile(r"\n\s*\n")
_BLANKS = re.compile(r"[ \t]+")

SIGN_OFF_MAX = 40
"""The longest line (stripped) that can be a sign-off or a `--` separator."""
FOOTER_MAX = 60
"""The longest line that can be a device footer (Samsung's default is longer than a sign-off)."""


def _without_riding_marks(text: str) -> str:
    """`text` less every combining mark that rides on a preceding non-space character, so the
    letter under it answers the case question (`Jose\\u0301` reads as `José`); a mark with no
    base stays and still separates words."""
    out: List[str] = []
    for ch in text:
        if out and not out[-1].isspace() and unicodedata.category(ch).startswith("M"):
            continue
        out.append(ch)
    return "".join(out)


def _names_only(tail: str) -> bool:
    """Whether what follows a closing word is punctuation and at most a short name: each word
    starting with an uppercase, titlecase or caseless letter (`Łukasz`, `山田`), never a
    lowercase one (`Thanks for the reply`)."""
    tail = _without_riding_marks(tail)
    return (_CLOSING_TAIL.match(tail) is not None
            and all(unicodedata.category(w[0]) in ("Lu", "Lt", "Lo") for w in _WORD.findall(tail)))


def _is_sign_off(line: str) -> bool:
    if _DASHES.match(line) or _OTHER_CLOSING.match(line):
        return True
    head = _ENGLISH_CLOSING.match(line)
    return head is not None and _names_only(line[head.end():])


def _new_message(lines: List[str]) -> List[str]:
    """The lines before the quoted history, without `>` quotes and trailing blanks.

    History starts at an attribution (`On ... wrote:`, a separator, an address header), at a
    bare `From: Name` header followed by its `Sent:`/dated line, or at the tail of a wrapped
    attribution, which takes its `On ...` head on the line above with it. None of these count on
    the first kept line: a message cannot be all history."""
    kept: List[str] = []
    for i, line in enumerate(lines):
        if kept:
            if any(p.match(line) for p in _QUOTE_HEADERS):
                break
            if (_SENDER_NAME.match(line) and i + 1 < len(lines)
                    and _HEADER_NEXT.match(lines[i + 1])):
                break
            if _ATTRIBUTION_TAIL.match(line):
                if _ATTRIBUTION_HEAD.match(kept[-1]):
                    kept.pop()
                break
        if line.lstrip().startswith(">"):
            continue
        kept.append(line.rstrip())
    return kept


def _before_signature(lines: List[str]) -> List[str]:
    """`lines` up to the first sign-off or device footer in the message's last part (from 60% of
    the way down, or the last eight lines of a long one, never the first line)."""
    n = len(lines)
    for i in range(max(1, min(int(n * 0.6), n - 8)), n):
        size = len(lines[i].strip())
        if ((size <= SIGN_OFF_MAX and _is_sign_off(lines[i]))
                or (size <= FOOTER_MAX and _DEVICE_FOOTER.match(lines[i]))):
            return lines[:i]
    return lines


def _starts_sentence(line: str) -> bool:
    """Whether the first letter is uppercase: a new sentence rather than a wrapped line (a line in
    an uncased script never starts one, so wrapped boilerplate there drops whole)."""
    letter = next((ch for ch in line if ch.isalpha()), "")
    return letter.isupper()


def _unfused(sentence: str) -> List[str]:
    """A boilerplate sentence split where a line starts a new sentence, so an unpunctuated request
    glued to a disclaimer survives it; lowercase continuation lines stay with their sentence."""
    if "\n" not in sentence:
        return [sentence]
    pieces: List[str] = []
    for line in filter(None, (part.strip() for part in sentence.split("\n"))):
        if pieces and _starts_sentence(line):
            pieces.append(line)
        elif pieces:
            pieces[-1] += " " + line
        else:
            pieces.append(line)
    return pieces


def _without_disclaimers(paragraph: str) -> str:
    """The paragraph less its boilerplate sentences; one without any keeps its line structure."""
    if not _DISCLAIMER.search(paragraph):
        return paragraph
    pieces: List[str] = []
    for sentence in filter(None, (s.strip() for s in _SENTENCE_END.split(paragraph))):
        pieces.extend(_unfused(sentence) if _DISCLAIMER.search(sentence) else [sentence])
    return " ".join(p for p in pieces if not _DISCLAIMER.search(p))


def _text(value: Any, name: str) -> str:
    """`value or ""` as Laya reads it, refusing a non-empty value that is not a string."""
    if isinstance(value, str):
        return value
    try:
        empty = not value
    except Exception:  # an object without a truth value (an array) is not an empty body either
        empty = False
    if not empty:
        raise InvalidArgument([problem([name], "%s must be a string, got %s"
                                       % (name, type(value).__name__), "type_error.str", value)])
    return ""


def _budget(max_chars: Any) -> int:
    try:
        return operator.index(max_chars)
    except TypeError:
        raise InvalidArgument([problem(["max_chars"], "max_chars must be an integer, got %r"
                                       % (max_chars,), "type_error.integer", max_chars)]) from None


def clean_email_body(body: str, max_chars: int = 3000) -> str:
    """`body` without quoted history, signature, device footer and disclaimers, whitespace runs
    collapsed, cut to `max_chars` characters.

    Laya's budget arithmetic, which its other ports are tested against: the text is first cut to
    `4 * max_chars` characters (bounding the regular expressions' work, so a footer past that
    window is not recognised), and the result to `max_chars`. So 0 gives the empty string and a
    negative budget cuts from the end (`5 * |max_chars|` in all); "no limit" is a budget larger
    than the body. Line breaks may be `\\r\\n`, `\\r` or a literal backslash-n."""
    text = _text(body, "body")
    limit = _budget(max_chars)
    text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\\n", "\n")
    if len(text) > limit * 4:
        text = text[:limit * 4]
    lines = _before_signature(_new_message(text.split("\n")))
    paragraphs = (_without_disclaimers(p).strip()
                  for p in _PARAGRAPH_BREAK.split("\n".join(lines)))
    return _BLANKS.sub(" ", "\n\n".join(p for p in paragraphs if p))[:limit]


def email_state(subject: str, body: str, sender: Optional[str] = None, clean: bool = True,
                max_chars: int = 3000, **extra: Any) -> Dict[str, Any]:
    """The state the email presets read: `subject` (stripped), `body` (through
    `clean_email_body` with `max_chars`, or as given when `clean` is false), `from` when `sender`
    is given (not empty), then every other keyword whose value is not None, as fields the model
    reads (a None keyword is left out, not sent as null)."""
    state: Dict[str, Any] = {
        "subject": _text(subject, "subject").strip(),
        "body": clean_email_body(body, max_chars=max_chars) if clean else (body or ""),
    }
    if sender:
        state["from"] = sender
    state.update((key, value) for key, value in extra.items() if value is not None)
    return state


__all__ = ["clean_email_body", "email_questions", "email_state"]
