"""The markers `kime.laya.email` cleans mail with, Laya 0.4.15's (`laya/email.py`): how English,
Portuguese, Spanish and French clients introduce quoted history, sign off, add device footers and
append confidentiality disclaimers. Data only: each rule is written as the words it matches, and
`email` compiles them and owns every decision that reads them.
"""
from __future__ import annotations

from typing import Tuple

# --- quoted history -----------------------------------------------------------------------------

ATTRIBUTIONS: Tuple[Tuple[str, str, bool], ...] = (
    ("On", "wrote:", False),
    ("Em", "escreveu:", True),
    ("El", "escribi[óo]:", True),
    ("Le", r"a [eé]crit\s*:", True),
)
"""(opening word, closing verb, needs a digit): a reply's attribution line, `On <date>, <name>
wrote:`. Outside English the same opening words start ordinary sentences, so those lines count
only when they carry a digit (every client's attribution has a date). French puts a space before
the colon."""

ATTRIBUTION_VERBS = r"wrote|escreveu|escribi[óo]|a [eé]crit"
"""The verbs of a wrapped attribution's second line (`name@x.com> wrote:`)."""

SEPARATORS: Tuple[str, ...] = (
    "Original Message", "Forwarded Message",
    "Mensagem original", "Mensagem encaminhada", "Mensaje original", "Mensaje reenviado",
    "Message d'origine",
)
"""Outlook's `-----Original Message-----` lines, per language."""

SENDER_LABELS = ("From:", r"De\s*:")
"""Reply headers' sender lines (French Outlook writes `De :`). They open prose too (`From: my
side ...`, `De: 10/09 a 15/09`), so one cuts on its own only with an address (`@` or `<`) on it,
and otherwise only when the header's next line (`HEADER_NEXT`) follows."""

SENDER_NAME = r"(De|From)\s*:\s+\S"
"""A sender line with a name and no address (`De: Maria Souza`)."""

HEADER_NEXT = (r"Enviad[oa]( em| el)?:\s", r"Envoy[ée]( le)?\s*:\s", r"Sent:\s",
               r"(Data|Fecha|Date):\s.*\d{4}")
"""The header line under a bare `From: Name`: `Sent:`/`Enviado:`/`Envoyé :`, or a date line
with a year. `Para:`/`To:` is not enough: `De: 10/09 / Para: 15/09` is how a leave request
reads."""

# --- sign-offs ----------------------------------------------------------------------------------

ENGLISH_CLOSINGS = ("best", "kind", "warmest", "warm", "many thanks", "thanks", "thank you",
                    "regards", "cheers", "sincerely")
"""English closing words, in the order they are tried (`warmest` before `warm`)."""

ENGLISH_CLOSING_TAILS = (r"\s+(?:and|&)\s+regards",
                         r"\s+(?:regards|wishes|again|in advance|a lot|so much|very much)")
"""What may extend a closing word (`Best regards`, `Thanks in advance`), tried in this order."""

OTHER_CLOSINGS = (
    # Portuguese
    "atenciosamente", "att", "abraços?", "abs", "um abraço", "cordialmente", "grat[oa]",
    "(muito )?obrigad[oa]s?( desde já| pela atenção)?", "(com os melhores )?cumprimentos",
    "saudações",
    # Spanish
    "(un )?saludos?( cordiales)?", "atentamente", "(muchas )?gracias( de antemano)?",
    # French
    "(bien )?cordialement", "salutations( distinguées)?", "bien à vous", "merci( d'avance)?",
    "bonne journée",
)
"""Portuguese, Spanish and French closings. Unlike English ones they count only alone on their
line (with punctuation): `Obrigado pelo retorno, mas ...` is a request."""

DEVICES = ("iphone", "ipad", "android", "ios", "mobile", "celular", "telemóvel", "móvil",
           "galaxy", "smartphone", "samsung", "tablet", "outlook", "yahoo", "mail", "e-?mail",
           "gmail", "windows")
"""The devices and mail apps a `Sent from my ...` footer names."""

DEVICE_INTROS = (
    "enviad[oa] (do|pelo|pela|via|desde|a partir do)( meu| minha| mi)?",
    "sent from( my)?",
    "envoy[ée] (depuis|de)( mon| ma| mes)?",
)
"""How a device footer opens, per language."""

DEVICE_EXTRAS = ("para", "for", "no", "na", r"\d+", "phone", "device", "pro", "max", "mini",
                 "plus", "using [a-z][a-z0-9_.+-]*")
"""Words that may follow the device (`iPhone 15 Pro Max`, `Outlook for iOS`)."""

OUTLOOK_APP_FOOTER = "(obter o|get) outlook (para|for) (ios|android)"

# --- disclaimers --------------------------------------------------------------------------------

DISCLAIMERS: Tuple[str, ...] = (
    # English: a disclaimer noun, `confidential`, then a disclaimer tail (the bare word is in
    # ordinary requests too: "Is this confidential?"). [^.] spans a wrapped footer's newline.
    r"\b(e-?mail|message|information|communication|transmission|contents?)\b[^.]{0,60}"
    r"\bconfidential\b[^.]{0,60}\b(intended|solely|addressee|recipient|privileged|"
    r"disclos|unauthori[sz]ed)",
    r"\bconfidential\b[^.]{0,60}\b(and (may|is) (also )?privileged)",
    r"if you (have )?received this (e-?mail|message) in error",
    # Portuguese and Spanish: tied to "this message" rather than `confidencial` alone
    r"\b(esta|este) (mensagem|e-?mail|mensaje|correo)\b[^.]{0,80}"
    r"(confidencia|sigilos|privilegiad)",
    r"\b(uso exclusivo|exclusivamente|únicamente|unicamente)\b[^.]{0,30}"
    r"(destinatári|destinatari|pessoa|persona|entidade|entidad)",
    r"\b(recebeu|recebido|receber) (esta|este) (mensagem|e-?mail)\b[^.]{0,20} por (engano|erro)",
    r"\b(ha recibido|recibió|recibe) (este|esta) (mensaje|correo)\b[^.]{0,20} por error",
    # "think before printing", by its environmental ending (a request says `antes de imprimir`)
    r"\bantes de imprimir\b[^.]{0,100}"
    r"(meio ambiente|medio ambiente|natureza|planeta|realmente necess)",
    r"\b(meio|medio) ambiente\b[^.]{0,30}antes de imprimir",
    # French: tied to "ce message" rather than `confidentiel` alone
    r"\b(ce|cet|cette) (message|e-?mail|mail|courriel)\b[^.]{0,80}(confidentiel|privil[eé]gi)",
    r"\bavez re[çc]u (ce|cet|cette) (message|e-?mail|mail)\b[^.]{0,20} par erreur",
    r"\b(usage exclusif|exclusivement|uniquement)\b[^.]{0,30}destinataire",
)
"""Boilerplate sentences (case-insensitive, found anywhere in a sentence)."""
