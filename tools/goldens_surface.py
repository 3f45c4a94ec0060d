"""Record the rest of Laya 0.4.15's surface: `tests/goldens/surface.json`.

Run only with the oracle interpreter (the real laya + torch; kime never imports them):

    .oracle/bin/python tools/goldens_surface.py

What it records:

- `all`: laya's `__all__`, in order, and `names`: per name, what it is (`kind`: module, class,
  function or the type of a value), its signature (`inspect.signature`: each parameter's name,
  kind and default, a default as its value when it is a plain literal, else its type's name),
  the built-in exception a class derives from, and a constant's value;
- `submodules`: per import path (`laya.presets`, `laya.email`, `laya.router`, `laya.hooks`,
  `laya.confidence`, `laya.structured`, `laya.lang`), the public names laya defines there (its
  functions and classes, and its UPPER_CASE constants);
- `cases`: pure calls and their results or refusals: every preset over its arguments, the email
  helpers over hand-written and seeded generated emails (quoted replies, signatures, footers,
  disclaimers, HTML, Unicode, empty bodies, wrong types), `render_options` per question type,
  `ece_score`, `proper_reward`, `td_lambda_targets`, `QTYPES`/`QTYPE_NAMES`, and the calibration
  fitters on fixed records.

A case: `{"id", "call", "args": [...], "kwargs": {...}, "result", "error": null | {"type",
"message"}, "kime": null | [field, ...]}`. `kime` marks a call where Laya fails from deep inside
(an AttributeError or TypeError from `str.replace`, say) and kime refuses the argument by name:
the replay expects kime's `InvalidRequest` naming that field (a `TypeError` too where Laya's was
one). Bytes are written as `{"__bytes__": text}`; a dict with non-string keys as
`{"__items__": [[key, value], ...]}`; `proper_reward` and `td_lambda_targets` get their arrays as
torch tensors here and as NumPy arrays in kime, and return lists.
"""
from __future__ import annotations

import inspect
import json
import random
import sys
import types
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np
import torch

import laya
import laya.calibrate
import laya.common
import laya.email
import laya.presets

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "goldens" / "surface.json"
SUBMODULES = ("presets", "email", "router", "hooks", "confidence", "structured", "lang")


# ------------------------------------------------------------------------------------ encoding

def to_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        if all(isinstance(k, str) for k in obj):
            return {k: to_json(v) for k, v in obj.items()}
        return {"__items__": [[to_json(k), to_json(v)] for k, v in obj.items()]}
    if isinstance(obj, (list, tuple)):
        return [to_json(v) for v in obj]
    if isinstance(obj, bytes):
        return {"__bytes__": obj.decode("utf-8")}
    if isinstance(obj, (np.generic,)):
        return obj.item()
    if isinstance(obj, (np.ndarray, torch.Tensor)):
        return obj.tolist()
    return obj


def from_json(obj: Any) -> Any:
    if isinstance(obj, dict):
        if set(obj) == {"__items__"}:
            return {from_json(k): from_json(v) for k, v in obj["__items__"]}
        if set(obj) == {"__bytes__"}:
            return obj["__bytes__"].encode("utf-8")
        return {k: from_json(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [from_json(v) for v in obj]
    return obj


# ------------------------------------------------------------------------------------ names

PLAIN = (type(None), bool, int, float, str)


def describe_signature(obj: Any) -> Optional[List[Dict[str, Any]]]:
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = []
    for p in sig.parameters.values():
        entry: Dict[str, Any] = {"name": p.name, "kind": p.kind.name}
        if p.default is inspect.Parameter.empty:
            entry["required"] = True
        elif isinstance(p.default, PLAIN):
            entry["default"] = p.default
        else:
            entry["default_type"] = type(p.default).__name__
        params.append(entry)
    return params


def describe(obj: Any) -> Dict[str, Any]:
    if isinstance(obj, types.ModuleType):
        return {"kind": "module"}
    if isinstance(obj, type):
        out: Dict[str, Any] = {"kind": "class", "signature": describe_signature(obj)}
        builtin = [b.__name__ for b in obj.__mro__ if b.__module__ == "builtins"
                   and issubclass(b, BaseException)]
        if builtin:
            out["exception"] = builtin[0]
        return out
    if callable(obj):
        return {"kind": "function", "signature": describe_signature(obj),
                "coroutine": inspect.iscoroutinefunction(obj)}
    out = {"kind": type(obj).__name__}
    if isinstance(obj, (dict, tuple, list, frozenset, str)):
        out["value"] = to_json(sorted(obj) if isinstance(obj, frozenset) else obj)
    return out


def submodule_names(name: str) -> List[str]:
    module = getattr(laya, name)
    found = []
    for attr in dir(module):
        if attr.startswith("_"):
            continue
        value = getattr(module, attr)
        if isinstance(value, types.ModuleType):
            continue
        defined_by_laya = str(getattr(value, "__module__", "") or "").startswith("laya")
        if (callable(value) and defined_by_laya) or (attr.isupper() and not callable(value)):
            found.append(attr)
    return found


# ------------------------------------------------------------------------------------ cases

def case(id: str, call: str, *args: Any, kime: Optional[List[Any]] = None, **kwargs: Any
         ) -> Dict[str, Any]:
    return {"id": id, "call": call, "args": list(args), "kwargs": kwargs, "kime": kime}


def preset_cases() -> List[Dict[str, Any]]:
    out = [case(name, name) for name in ("triage_questions", "email_questions", "guard_questions",
                                          "moderation_questions", "router_questions")]
    teams = {"billing": "invoices", "support": "bugs and outages", "legal": None}
    out += [
        case("email_questions_custom", "email_questions", teams),
        case("email_questions_keyword", "email_questions", categories={"a": "x", "b": "y"}),
        case("email_questions_none", "email_questions", None),
        case("email_questions_empty_dict", "email_questions", {}),
        case("email_questions_list", "email_questions", ["sales", "support"]),
        case("email_questions_unicode", "email_questions", {"facturação": "boletos", "技术": "故障"}),
        case("error_triage_positional", "triage_questions", 1),
        case("error_email_two_positional", "email_questions", {"a": "b"}, {"c": "d"}),
        case("error_guard_keyword", "guard_questions", strict=True),
        case("error_email_unknown_keyword", "email_questions", teams=teams),
        case("error_router_positional", "router_questions", "x"),
        case("error_moderation_keyword", "moderation_questions", lang="pt"),
    ]
    for name in ("triage_questions", "email_questions", "guard_questions", "moderation_questions",
                 "router_questions"):
        out.append(case("state_field_" + name, "state_field", getattr(laya.presets, name)()))
    out += [
        case("state_field_several", "state_field", {
            "a": {"type": "noul", "instructions": "Is `body` rude?"},
            "b": {"type": "noul", "instructions": "Is `subject` rude?"}}),
        case("state_field_none_named", "state_field", {
            "a": {"type": "noul", "instructions": "Is it rude?"}, "b": {"type": "noul"}}),
        case("state_field_repeated", "state_field", {
            "a": {"type": "noul", "instructions": "Is `text` rude? Does `text` shout?"}}),
        case("state_field_empty", "state_field", {}),
    ]
    return out


HANDWRITTEN = {
    "plain": "Hi,\n\nMy invoice is wrong, please fix it.\n\nThanks",
    "gmail_reply": ("Yes, please go ahead with the refund.\n\nOn Mon, Jan 8, 2024 at 9:12 AM "
                    "Ana Lima <ana@example.com> wrote:\n> Should we refund order 1234?\n> Ana"),
    "gmail_wrapped_attribution": ("Cancel it please.\n\nOn Tue, Feb 6, 2024 at 10:00 AM Support Team <\n"
                                  "support@example.com> wrote:\n> Your plan renews tomorrow."),
    "outlook_original": ("The server is down again.\n\n-----Original Message-----\nFrom: Ops "
                         "<ops@example.com>\nSent: Monday\nSubject: status\n\nAll green."),
    "outlook_bare_from": ("Please send the contract.\n\nFrom: Maria Souza\nSent: Monday, June 3, "
                          "2024 10:00 AM\nTo: Legal\nSubject: contract"),
    "from_in_prose": "From: my side the integration works, but please refund the second charge.",
    "portuguese_reply": ("Preciso do boleto atualizado.\n\nEm seg., 3 de jun. de 2024 às 10:00, "
                         "Ana <ana@x.com.br> escreveu:\n> Segue o boleto.\n\nAtenciosamente,\nJoão"),
    "portuguese_body_text": "Em resposta ao que você escreveu:\nnão recebi o reembolso.",
    "spanish_reply": ("Necesito la factura.\n\nEl lun, 3 jun 2024 a las 10:00, Juan "
                      "<juan@x.es> escribió:\n> Adjunto la factura.\n\nSaludos cordiales"),
    "french_reply": ("Merci de rembourser la commande.\n\nLe lun. 3 juin 2024 à 10:00, Marie "
                     "<marie@x.fr> a écrit :\n> Votre commande est partie.\n\nCordialement,\nPaul"),
    "french_outlook": ("Le colis n'est pas arrivé.\n\nDe : Marie Dupont\nEnvoyé : lundi 3 juin "
                       "2024 10:00\nÀ : Service client"),
    "leave_request": "De: 10/09 a 15/09\nPara: 15/09\nPreciso tirar férias nesse período.",
    "signature_dashes": "Reset my password please.\n\n--\nBob Smith\nACME Corp\n+1 555 0100",
    "signoff_name": "Line one.\nLine two.\nLine three.\nBest regards,\nJohn",
    "signoff_sentence": "I want a refund.\nThanks for the quick reply, but it is still broken.",
    "signoff_lowercase_name": "a\nb\nc\nThanks, żaneta",
    "signoff_unicode_name": "a\nb\nc\nRegards, Łukasz",
    "signoff_combining": "a\nb\nc\nThanks, Jose\u0301",
    "signoff_caseless": "a\nb\nc\nThanks, 山田",
    "device_footer": "Call me back.\n\nSent from my iPhone",
    "device_footer_pt": "Me liga.\n\nEnviado do meu smartphone Samsung Galaxy.",
    "device_footer_request": "x\ny\nz\nEnviado do meu celular o comprovante ontem.",
    "outlook_app": "Ok.\n\nGet Outlook for iOS",
    "disclaimer_en": ("Please cancel my subscription.\n\nThis e-mail and any attachments are "
                      "confidential and intended solely for the addressee."),
    "disclaimer_wrapped": ("Refund please.\n\nThe information in this message is\nconfidential and "
                           "may be privileged."),
    "disclaimer_fused": ("my account is locked\nThis message is confidential and intended only for "
                         "the recipient."),
    "confidential_request": "Is this confidential? Confidential: I need a refund.",
    "disclaimer_pt": ("Quero cancelar.\n\nEsta mensagem é confidencial e destinada exclusivamente "
                      "ao destinatário. Antes de imprimir, pense no meio ambiente."),
    "disclaimer_fr": ("Annulez ma commande.\n\nCe message est confidentiel. Si vous avez reçu ce "
                      "message par erreur, supprimez-le."),
    "html": ("<html><body><p>Hello,</p><p>My <b>order</b> never arrived.</p>"
             "<div>Best regards,<br>Ann</div></body></html>"),
    "crlf": "Hello\r\nI need help\r\n\r\nOn Mon, 1 Jan 2024 Bob <b@x.com> wrote:\r\n> old",
    "cr_only": "Hello\rI need help\r> quoted",
    "literal_backslash_n": "Hello\\nI need help\\n> quoted\\nBye",
    "tabs_and_spaces": "Too   many\t\tspaces   here.\n\n\n\nAnd    here.",
    "quote_only_first": "> everything quoted\n> still quoted",
    "attribution_first_line": "On Mon, Jan 8, 2024 Ana <ana@x.com> wrote:\nreply below",
    "cjk": "注文した商品が届きません。\n返金をお願いします。",
    "cyrillic": "Здравствуйте,\nзаказ не пришёл.\nС уважением,\nДмитрий",
    "emoji": "Refund 🙏🙏 please!!\n\nSent from my iPhone",
    "empty": "",
    "whitespace": " \n\t \n ",
    "long_signature_window": "\n".join("line %d of the request." % i for i in range(30)) + "\nCheers",
    "underscores": "Answer above.\n________________\nFrom: X\nold thread",
}

FRAGMENTS = [
    "Hi team,", "Hello", "I need a refund for order 1234.", "my account is locked",
    "This e-mail is confidential and intended solely for the addressee.",
    "Is this confidential?", "On Mon, Jan 3, 2024 at 10:00 AM Bob <bob@x.com> wrote:",
    "On Monday Bob wrote:", "> quoted line", ">> deeper", "-----Original Message-----",
    "-----Mensagem original-----", "----- Message d'origine -----", "________________",
    "From: Maria <maria@x.com>", "From: Maria Souza", "Sent: Monday, 3 June 2024",
    "Date: 3 June 2024", "De: 10/09 a 15/09", "De : Marie Dupont", "Envoyé : lundi 3 juin 2024",
    "Em 3 de jun. de 2024, Ana escreveu:", "El 3 jun 2024, Juan escribió:",
    "Le lun. 3 juin 2024, Marie a écrit :", "fulano@x.com> escreveu:", "Best regards,",
    "Best regards, John", "Thanks for the quick reply.", "Thanks, żaneta", "Regards, Łukasz",
    "Cheers", "Warmest regards", "Atenciosamente,", "Obrigado pelo retorno, mas ainda não recebi.",
    "Saludos cordiales", "Cordialement,", "Merci d'avance", "--", "Sent from my iPhone",
    "Envoyé depuis mon iPhone", "Get Outlook for Android", "",
    "Esta mensagem é confidencial e destinada exclusivamente ao destinatário.",
    "Antes de imprimir, pense no meio ambiente.", "Ce message est confidentiel.",
    "If you received this email in error please delete it", "Please call me ASAP!! It is urgent.",
    "日本語のメールです。", "Привет, Дмитрий", "Line with   many    spaces\tand tabs", "John",
    "<p>html <b>bold</b></p>",
]
SEPARATORS = ["\n", "\r\n", "\r", "\\n", "\n\n", " "]


def generated_emails(n: int, seed: int) -> List[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        parts = [rng.choice(FRAGMENTS) + rng.choice(SEPARATORS) for _ in range(rng.randint(1, 16))]
        out.append("".join(parts))
    return out


def email_cases() -> List[Dict[str, Any]]:
    out = []
    for name, body in HANDWRITTEN.items():
        out.append(case("clean_" + name, "clean_email_body", body))
    for i, body in enumerate(generated_emails(100, seed=23)):
        out.append(case("clean_generated_%03d" % i, "clean_email_body", body,
                        max_chars=[3000, 3000, 3000, 120, 40, 7][i % 6]))
    reply = HANDWRITTEN["gmail_reply"]
    out += [
        case("clean_budget_zero", "clean_email_body", reply, 0),
        case("clean_budget_negative", "clean_email_body", reply, -5),
        case("clean_budget_negative_large", "clean_email_body", reply, -1000),
        case("clean_budget_small", "clean_email_body", reply, max_chars=10),
        case("clean_budget_bool", "clean_email_body", reply, True),
        case("clean_none", "clean_email_body", None),
        case("clean_zero_int", "clean_email_body", 0),
        case("error_clean_int", "clean_email_body", 123, kime=["body"]),
        case("error_clean_bytes", "clean_email_body", b"hello", kime=["body"]),
        case("error_clean_list", "clean_email_body", ["a", "b"], kime=["body"]),
        case("error_clean_budget_str", "clean_email_body", reply, "100", kime=["max_chars"]),
        case("error_clean_budget_float", "clean_email_body", reply, 2.5, kime=["max_chars"]),
        case("error_clean_budget_none", "clean_email_body", reply, None, kime=["max_chars"]),
        case("error_clean_keyword", "clean_email_body", reply, limit=10),
        case("state_basic", "email_state", "  Refund request ", reply),
        case("state_sender", "email_state", "Hi", "Body", sender="ana@example.com"),
        case("state_sender_empty", "email_state", "Hi", "Body", sender=""),
        case("state_no_clean", "email_state", "Hi", reply, clean=False),
        case("state_no_clean_dict_body", "email_state", "Hi", {"text": "x"}, clean=False),
        case("state_no_clean_budget_ignored", "email_state", "Hi", reply, clean=False,
             max_chars=None),
        case("state_budget", "email_state", "Hi", reply, max_chars=12),
        case("state_extra", "email_state", "Hi", "Body", thread_id="t-1", tags=["vip"],
             priority=2),
        case("state_extra_none_dropped", "email_state", "Hi", "Body", thread_id=None),
        case("state_extra_from_overrides", "email_state", "Hi", "Body", sender="a@x",
             **{"from": "b@x"}),
        case("state_none_subject_body", "email_state", None, None),
        case("state_unicode", "email_state", " Reembolso ", HANDWRITTEN["portuguese_reply"],
             sender="joão@x.com.br"),
        case("state_html", "email_state", "Order", HANDWRITTEN["html"]),
        case("error_state_subject_int", "email_state", 42, "Body", kime=["subject"]),
        case("error_state_body_int", "email_state", "Hi", 42, kime=["body"]),
        case("error_state_budget_float", "email_state", "Hi", "Body", max_chars=1.5,
             kime=["max_chars"]),
        case("error_state_missing_body", "email_state", "Hi"),
        case("error_state_two_subjects", "email_state", "Hi", "Body", subject="x"),
    ]
    return out


def common_cases() -> List[Dict[str, Any]]:
    out = [case("QTYPES", "QTYPES"), case("QTYPE_NAMES", "QTYPE_NAMES")]
    out += [
        case("render_choice_plain", "render_options", {"t": "choice", "crit": {"a": None, "b": ""}}),
        case("render_choice_described", "render_options",
             {"t": "choice", "crit": {"refund": "money back", "other": "anything else"}}),
        case("render_choice_int_labels", "render_options", {"t": "choice", "crit": {1: None, 2: "two"}}),
        case("render_choice_structured", "render_options",
             {"t": "choice", "crit": {"a": {"desc": "x", "n": 1}, "b": [1, 2], "c": 0, "d": False}}),
        case("render_choice_unicode", "render_options", {"t": "choice", "crit": {"café": "naïve ☕"}}),
        case("render_score", "render_options", {"t": "score", "crit": ["low", "mid", "high"]}),
        case("render_score_structured", "render_options", {"t": "score", "crit": [{"x": 1}, 2, None]}),
        case("render_score_tuple", "render_options", {"t": "score", "crit": ("a", "b")}),
        case("render_noul_default", "render_options", {"t": "noul", "crit": None}),
        case("render_noul_missing_crit", "render_options", {"t": "noul"}),
        case("render_noul_described", "render_options",
             {"t": "noul", "crit": {"true": "it holds", "false": "it does not"}}),
        case("render_noul_half", "render_options", {"t": "noul", "crit": {"true": "", "false": "no"}}),
        case("render_noul_labels", "render_options",
             {"t": "noul", "crit": None, "labels": {"false": " no ", "true": "yes"}}),
        case("render_unknown_type_as_noul", "render_options", {"t": "ranking", "crit": None}),
        case("error_render_labels_on_choice", "render_options",
             {"t": "choice", "crit": {"a": None}, "labels": {"false": "n", "true": "y"}}),
        case("error_render_noul_labels_equal", "render_options",
             {"t": "noul", "labels": {"false": "same", "true": " same "}}),
        case("error_render_noul_labels_keys", "render_options", {"t": "noul", "labels": {"yes": "y"}}),
        case("error_render_no_type", "render_options", {"crit": {"a": None}}, kime=["q", "t"]),
        case("error_render_choice_no_crit", "render_options", {"t": "choice"}, kime=["q", "crit"]),
        case("error_render_choice_list_crit", "render_options", {"t": "choice", "crit": ["a", "b"]},
             kime=["q", "crit"]),
        case("error_render_score_no_crit", "render_options", {"t": "score"}, kime=["q", "crit"]),
        case("error_render_not_a_dict", "render_options", ["choice"], kime=["q"]),
    ]
    conf = [0.0, 1 / 15, 0.2, 0.5, 0.51, 0.9, 0.99, 1.0]
    correct = [1, 0, 0, 1, 1, 1, 0, 1]
    out += [
        case("ece_basic", "ece_score", conf, correct),
        case("ece_bins_4", "ece_score", conf, correct, bins=4),
        case("ece_one_bin", "ece_score", conf, correct, 1),
        case("ece_empty", "ece_score", [], []),
        case("ece_perfect", "ece_score", [1.0, 1.0, 0.0], [1, 1, 0]),
        case("error_ece_bins_zero", "ece_score", conf, correct, 0),
        case("error_ece_bins_bool", "ece_score", conf, correct, True),
        case("error_ece_bins_float", "ece_score", conf, correct, 2.5),
        case("error_ece_bins_negative", "ece_score", conf, correct, bins=-1),
    ]
    q = [[0.7, 0.2, 0.1], [0.25, 0.5, 0.25], [0.0, 1.0, 0.0], [0.4, 0.6, 0.0]]
    target = [[1.0, 0.0, 0.0], [0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 1.0, 0.0]]
    mask = [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    out += [
        case("reward_mixed", "proper_reward", q, target, [0, 1, 2, 1], mask),
        case("reward_no_score", "proper_reward", q, target, [0, 2, 2, 0], mask),
        case("reward_weights", "proper_reward", q, target, [1, 1, 1, 1], mask, w_sph=0.0, w_rps=2.5,
             log_floor=-3.0),
        case("reward_batched", "proper_reward", [q, [row[::-1] for row in q]], target, [0, 1, 2, 1],
             mask),
    ]
    batch = {"target": [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.3, 0.7]],
             "ep_group": [0, 0, 1, 1, -1], "ep_step": [1, 0, 0, 1, 0]}
    p_true = [0.2, 0.6, 0.9, 0.4, 0.5]
    out += [
        case("td_two_episodes", "td_lambda_targets", p_true, batch, 0.5),
        case("td_lambda_one", "td_lambda_targets", p_true, batch),
        case("td_lambda_zero", "td_lambda_targets", p_true, batch, lam=0.0),
        case("td_no_groups", "td_lambda_targets", p_true, {"target": batch["target"]}),
        case("td_three_steps", "td_lambda_targets", [0.1, 0.8, 0.3],
             {"target": [[0.0, 1.0], [1.0, 0.0], [1.0, 0.0]], "ep_group": [4, 4, 4],
              "ep_step": [2, 0, 1]}, 0.7),
    ]
    return out


def records(seed: int, n: int, qtypes: List[int], ks: List[int], spread: float, true_t: float,
            with_k: bool = False) -> List[List[Any]]:
    """Seeded records `[qtype, logits, target]` (or with `k`, over a longer vector): logits
    ~ N(0, spread), the label drawn from softmax(logits / true_t)."""
    rng = np.random.RandomState(seed)
    out: List[List[Any]] = []
    for i in range(n):
        k, qt = ks[i % len(ks)], qtypes[i % len(qtypes)]
        z = np.round(rng.normal(0.0, spread, k), 4)
        p = np.exp(z / true_t - (z / true_t).max())
        label = int(rng.choice(k, p=p / p.sum()))
        target = [0.0] * k
        target[label] = 1.0
        if with_k:
            out.append([qt, z.tolist() + [9.0, -9.0], target + [0.0, 0.0], k])
        else:
            out.append([qt, z.tolist(), target])
    return out


def fit_cases() -> List[Dict[str, Any]]:
    mixed = records(1, 90, [0, 1, 2], [3, 5, 2], 2.0, 1.6)
    with_k = records(2, 40, [0, 2], [4, 2], 1.5, 0.8, with_k=True)
    big = records(3, 2600, [2], [2], 1.2, 0.7)
    pairs = [r[1:] for r in records(4, 40, [0], [4], 2.0, 2.5)]
    t, tb = [1.3, 0.9, 0.7], {"choice:3-5": 1.1}
    binning = {"choice:3-5": {"bins": 4, "values": [0.1, 0.4, 0.6, 0.95]}}
    bad = mixed[:3]
    out = [
        case("fit_map_mixed", "fit_temperature_map", mixed),
        case("fit_temperatures_alias", "fit_temperatures", mixed),
        case("fit_map_with_k", "fit_temperature_map", with_k),
        case("fit_map_empty", "fit_temperature_map", []),
        case("fit_map_ece_small", "fit_temperature_map", mixed, compute_ece=True),
        case("fit_map_ece_split", "fit_temperature_map", big + mixed, True, 3),
        case("fit_map_ece_seed_none_small", "fit_temperature_map", mixed[:20], compute_ece=True,
             seed=None),
        case("fit_one", "fit_one_temperature", pairs, 10),
        case("fit_one_default_floor", "fit_one_temperature", pairs),
        case("fit_one_below_floor", "fit_one_temperature", pairs, min_n=41),
        case("binning_mixed", "fit_binning_map", mixed, t, tb, bins=5, min_bucket_n=10),
        case("binning_default_floor", "fit_binning_map", mixed, t, tb),
        case("binning_empty_records", "fit_binning_map", [], None, None),
        case("thresholds_mixed", "fit_abstention_thresholds", mixed, t, tb, min_bucket_n=10),
        case("thresholds_binned", "fit_abstention_thresholds", mixed, t, tb, binning_map=binning,
             min_bucket_n=10),
        case("thresholds_loose", "fit_abstention_thresholds", mixed, t, tb, target_error=0.4,
             conservative=False, min_bucket_n=5),
        case("thresholds_default_floor", "fit_abstention_thresholds", mixed, t, tb),
        case("apply_binning_in_map", "apply_binning_map", 0.55, "choice:3-5", binning),
        case("apply_binning_top", "apply_binning_map", 1.0, "choice:3-5", binning),
        case("apply_binning_below", "apply_binning_map", -0.2, "choice:3-5", binning),
        case("apply_binning_other_bucket", "apply_binning_map", 0.55, "noul:2", binning),
        case("apply_binning_empty_map", "apply_binning_map", 0.3, "noul:2", {}),
    ]
    refusals = {
        "record_short": [[0, [1.0, 2.0]]],
        "record_not_tuple": ["abc"],
        "qtype_out_of_range": [[3, [1.0, 2.0], [0.0, 1.0]]],
        "qtype_bool": [[True, [1.0, 2.0], [0.0, 1.0]]],
        "qtype_float": [[1.0, [1.0, 2.0], [0.0, 1.0]]],
        "logits_2d": [[0, [[1.0, 2.0]], [0.0, 1.0]]],
        "logits_strings": [[0, ["a", "b"], [0.0, 1.0]]],
        "logits_bools": [[0, [True, False], [0.0, 1.0]]],
        "logits_nan": [[0, [float("nan"), 1.0], [0.0, 1.0]]],
        "target_inf": [[0, [0.0, 1.0], [float("inf"), 1.0]]],
        "length_mismatch": [[0, [1.0, 2.0, 3.0], [0.0, 1.0]]],
        "target_not_a_distribution": [[0, [1.0, 2.0], [0.5, 0.6]]],
        "target_negative": [[0, [1.0, 2.0], [-0.5, 1.5]]],
        "k_zero": [[0, [1.0, 2.0], [0.0, 1.0], 0]],
        "k_none": [[0, [1.0, 2.0], [0.0, 1.0], None]],
        "k_too_big": [[0, [1.0, 2.0], [0.0, 1.0], 3]],
        "k_cuts_target_mass": [[0, [1.0, 2.0, 3.0], [0.0, 0.0, 1.0], 2]],
        "empty_vectors": [[0, [], []]],
        "second_record_bad": bad + [[0, [1.0], [2.0]]],
    }
    for name, recs in refusals.items():
        out.append(case("error_fit_" + name, "fit_temperature_map", recs))
    out += [
        case("error_fit_seed_negative", "fit_temperature_map", mixed, seed=-1),
        case("error_fit_seed_bool", "fit_temperature_map", mixed, seed=True),
        case("error_fit_seed_float", "fit_temperature_map", mixed, seed=1.5),
        case("error_fit_seed_huge", "fit_temperature_map", mixed, seed=2 ** 32),
        case("error_fit_one_min_n_zero", "fit_one_temperature", pairs, 0),
        case("error_fit_one_min_n_bool", "fit_one_temperature", pairs, min_n=True),
        case("error_fit_one_not_a_pair", "fit_one_temperature", [[1.0, 2.0, 3.0]]),
        case("error_fit_one_bad_target", "fit_one_temperature", [[[1.0, 2.0], [1.0, 1.0]]]),
        case("error_binning_bins_zero", "fit_binning_map", mixed, t, tb, bins=0),
        case("error_binning_bins_bool", "fit_binning_map", mixed, t, tb, bins=True),
        case("error_binning_floor_float", "fit_binning_map", mixed, t, tb, min_bucket_n=2.0),
        case("error_binning_bad_record", "fit_binning_map", refusals["qtype_out_of_range"], t, tb),
        case("error_thresholds_error_high", "fit_abstention_thresholds", mixed, t, tb,
             target_error=1.5),
        case("error_thresholds_error_bool", "fit_abstention_thresholds", mixed, t, tb,
             target_error=True),
        case("error_thresholds_error_nan", "fit_abstention_thresholds", mixed, t, tb,
             target_error=float("nan")),
        case("error_thresholds_floor_zero", "fit_abstention_thresholds", mixed, t, tb,
             min_bucket_n=0),
        case("error_thresholds_positional_map", "fit_abstention_thresholds", mixed, t, tb, binning),
        case("error_thresholds_temperature_none", "fit_abstention_thresholds", mixed, None, tb,
             kime=["temperature"]),
        case("error_binning_options_list", "fit_binning_map", mixed, t, [1.0],
             kime=["temperature_by_options"]),
        case("error_fit_records_int", "fit_temperature_map", 5, kime=["records"]),
    ]
    return out


# ------------------------------------------------------------------------------------ running

TENSOR_CALLS = ("proper_reward", "td_lambda_targets")


def _tensors(call: str, args: List[Any], kwargs: Dict[str, Any]) -> None:
    if call == "proper_reward":
        for i in range(4):
            args[i] = torch.tensor(args[i], dtype=torch.long if i == 2 else torch.float32)
    elif call == "td_lambda_targets":
        args[0] = torch.tensor(args[0], dtype=torch.float32)
        batch = dict(args[1])
        batch["target"] = torch.tensor(batch["target"], dtype=torch.float32)
        for key in ("ep_group", "ep_step"):
            if key in batch:
                batch[key] = torch.tensor(batch[key], dtype=torch.long)
        args[1] = batch


FUNCTIONS = {
    **{name: getattr(laya.presets, name) for name in (
        "triage_questions", "email_questions", "guard_questions", "moderation_questions",
        "router_questions", "state_field")},
    "clean_email_body": laya.email.clean_email_body, "email_state": laya.email.email_state,
    "render_options": laya.common.render_options, "proper_reward": laya.common.proper_reward,
    "td_lambda_targets": laya.common.td_lambda_targets,
    **{name: getattr(laya.calibrate, name) for name in (
        "fit_temperatures", "fit_one_temperature", "fit_temperature_map",
        "fit_abstention_thresholds", "fit_binning_map", "apply_binning_map")},
}


def run(spec: Dict[str, Any]) -> Dict[str, Any]:
    call = spec["call"]
    args, kwargs = from_json(to_json(spec["args"])), from_json(to_json(spec["kwargs"]))
    result, error = None, None
    try:
        if call in ("QTYPES", "QTYPE_NAMES"):
            result = getattr(laya.common, call)
        elif call == "ece_score":
            result = laya.common.ece_score(np.asarray(args[0], dtype=float),
                                           np.asarray(args[1], dtype=float), *args[2:], **kwargs)
        else:
            _tensors(call, args, kwargs)
            result = FUNCTIONS[call](*args, **kwargs)
    except Exception as exc:  # every refusal is recorded, whatever its type
        error = {"type": type(exc).__name__, "message": str(exc)}
    if spec["id"].startswith("error_") != (error is not None):
        raise AssertionError("case %s: expected %s, got %r" % (
            spec["id"], "an error" if spec["id"].startswith("error_") else "a result", error))
    out = dict(spec)
    out["args"], out["kwargs"] = to_json(spec["args"]), to_json(spec["kwargs"])
    out.update(result=to_json(result), error=error)
    return out


def main() -> int:
    specs = preset_cases() + email_cases() + common_cases() + fit_cases()
    ids = [s["id"] for s in specs]
    assert len(set(ids)) == len(ids), "case ids must be unique"
    cases = [run(s) for s in specs]
    payload = {
        "laya_version": laya.__version__,
        "all": list(laya.__all__),
        "names": {name: describe(getattr(laya, name)) for name in laya.__all__},
        "submodules": {name: submodule_names(name) for name in SUBMODULES},
        "cases": cases,
    }
    # one case per line: readable in a diff, without a line per number of the long record lists
    head = json.dumps({k: v for k, v in payload.items() if k != "cases"}, ensure_ascii=False,
                      allow_nan=True)
    text = head[:-1] + ', "cases": [\n' + ",\n".join(
        json.dumps(c, ensure_ascii=False, allow_nan=True) for c in cases) + "\n]}"
    OUT.write_text(text + "\n", encoding="utf-8")
    kinds: Dict[str, int] = {}
    for c in cases:
        kinds[c["call"]] = kinds.get(c["call"], 0) + 1
    print("%d names, %d cases (%d refusals): %s" % (
        len(payload["all"]), len(cases), sum(c["error"] is not None for c in cases),
        ", ".join("%s %d" % kv for kv in sorted(kinds.items()))))
    print("wrote %s (%d bytes)" % (OUT, len(text)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
