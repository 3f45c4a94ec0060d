"""The bench's checkpoint cache and workloads: states of exact token lengths and question sets.

Every workload is built from the checkpoint's own tokenizer (`tokenizer/tokenizer.json`, read
with the `tokenizers` library, the way kime and Laya read it) and then checked against kime's
layout (`Kime.rows_for`), so "a 300-token state" means 300 state tokens in every row, not 300
words. Everything here is deterministic: the same shape gives the same states and questions.

Workloads (state tokens are the state's own tokens; a row adds the question's head):

- W1: a 96-token state, one choice of 4 options (the single-decision latency case).
- W2: a 300-token state, 5 questions: a choice of 6, two scores of 4 levels, two nouls.
- W3: a state of `max_len` tokens (512 on the published English shape), so every row is exactly
  `max_len` tokens and the state is cut to fit; 10 mixed questions.
- W4: the W3 state with 50 mixed questions.
- W9: `predict_batch` over 16 different 300-token states with the W2 questions (80 rows),
  reported in questions per second.

On a shape whose `max_len` is below a workload's state length (the test shape `tiny` has 160),
the state is cut to fit like any long state; the report prints each workload's row lengths.
"""
from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

__all__ = ["Workload", "WORKLOAD_NAMES", "build_workloads", "cached_checkpoint",
           "exact_tokens_text", "questions_w1", "questions_w2", "questions_w3", "questions_w4"]

WORKLOAD_NAMES = ("W1", "W2", "W3", "W4", "W9")

DEFAULT_CACHE = os.path.join("~", ".cache", "kime", "bench")


# --- the checkpoint --------------------------------------------------------------------------

def cached_checkpoint(shape: str, cache_dir: Optional[str] = None, seed: int = 0,
                      log: Callable[[str], None] = lambda s: None) -> str:
    """The directory of a random checkpoint of `shape`, written once under
    `<cache_dir>/<shape>-seed<seed>` and reused while its `model.safetensors` is there.

    It is written into a temporary sibling and renamed into place, so an interrupted write never
    leaves a half checkpoint that a later run would trust.
    """
    from kime.synthetic import write_checkpoint

    root = os.path.expanduser(cache_dir or DEFAULT_CACHE)
    path = os.path.join(root, "%s-seed%d" % (shape, seed))
    if os.path.isfile(os.path.join(path, "model.safetensors")):
        return path
    os.makedirs(root, exist_ok=True)
    log("writing a random %s checkpoint to %s" % (shape, path))
    tmp = tempfile.mkdtemp(prefix=".%s-seed%d." % (shape, seed), dir=root)
    try:
        write_checkpoint(tmp, shape=shape, seed=seed)
        if os.path.isdir(path):  # a partial directory without weights
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        if os.path.isdir(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return path


# --- texts of an exact token length ------------------------------------------------------------

_SENTENCES = [
    "I ordered a pair of running shoes three weeks ago and they still have not arrived.",
    "The tracking page has said 'label created' since the second of the month.",
    "Yesterday I was charged twice for the same order, once at 49.90 and again at 49.90.",
    "Your support line kept me on hold for forty minutes before the call dropped.",
    "Could you please tell me whether the parcel was lost or is simply delayed?",
    "If it cannot be delivered by Friday I would like a full refund instead.",
    "I have been a customer for six years and this is the first time something went wrong.",
    "The invoice lists a different billing address than the one on my account.",
    "My colleague had the same problem last month and was told to wait another week.",
    "The app crashes every time I open the order history on my phone.",
    "I tried logging in from a laptop as well, but the password reset email never came.",
    "Please do not close this ticket until the money is back on my card.",
    "The box that finally came was damaged and one of the shoes was the wrong size.",
    "Your website says returns are free, yet the courier asked me to pay for the label.",
    "I would rather exchange them for a larger size than send them back for good.",
    "Nobody answered the two emails I sent last Tuesday and Thursday.",
    "To be fair, the agent I spoke to on the chat was friendly and tried to help.",
    "She promised a callback within 24 hours, which did not happen.",
    "I need the shoes for a half marathon on the 14th, so the date really matters.",
    "Order number 58213-KX, placed on the web shop, paid by credit card.",
    "Is there a manager I can speak to about this, or a complaints address?",
    "I am not angry, just tired of explaining the same thing to different people.",
    "The discount code from your newsletter was not applied at checkout either.",
    "Thanks in advance for looking into it, and sorry for the long message.",
]


def source_text(seed: int, sentences: int = 400) -> str:
    """A long support-ticket style text; a different seed gives a different text."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_SENTENCES) for _ in range(sentences))


_FILLERS = (" a", " I", " ok", " so", ".", ",", " the", " and")


def exact_tokens_text(encode: Callable[[str], Sequence[int]], text: str, n: int) -> str:
    """A prefix of `text`, cut at a word boundary and topped up with one-token words, that
    `encode` turns into exactly `n` tokens. Raises ValueError when `text` is too short."""
    def count(s: str) -> int:
        return len(encode(s))

    words = text.split(" ")
    if count(text) < n:
        raise ValueError("source text has only %d tokens, %d needed" % (count(text), n))
    lo, hi = 0, len(words)  # the largest word count whose prefix has at most n tokens
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid])) <= n:
            lo = mid
        else:
            hi = mid - 1
    out = " ".join(words[:lo])
    have = count(out)
    while have < n:
        for filler in _FILLERS:
            if count(out + filler) == have + 1:
                out += filler
                have += 1
                break
        else:
            raise ValueError("cannot reach exactly %d tokens (stuck at %d)" % (n, have))
    if count(out) != n:
        raise ValueError("built a %d-token text, %d wanted" % (count(out), n))
    return out


def tokenizer_encoder(checkpoint: str) -> Callable[[str], List[int]]:
    """The checkpoint's own tokenizer, as ids without special tokens."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer", "tokenizer.json"))
    return lambda s: tok.encode(s, add_special_tokens=False).ids


# --- questions ---------------------------------------------------------------------------------

def questions_w1() -> Dict[str, Dict[str, Any]]:
    """One choice of 4 options."""
    return {
        "team": {"type": "choice", "instructions": "Which team should handle this ticket?",
                 "criteria": {"billing": "payments, invoices and refunds",
                              "technical": "bugs, crashes and error messages",
                              "account": "logins, passwords and profile changes",
                              "shipping": "deliveries, tracking and returns"}},
    }


def questions_w2() -> Dict[str, Dict[str, Any]]:
    """A choice of 6, two scores of 4 levels, two nouls."""
    return {
        "intent": {"type": "choice", "instructions": "What does the customer mainly want?",
                   "criteria": {"refund": "money back for an order",
                                "exchange": "a different size or item",
                                "status": "to know where an order is",
                                "complaint": "to report bad service",
                                "bug": "to report a problem with the app or website",
                                "other": "anything else"}},
        "urgency": {"type": "score", "instructions": "How urgent is this ticket?",
                    "criteria": ["low: can wait a week", "normal: answer within two days",
                                 "high: answer today", "critical: answer within the hour"]},
        "sentiment": {"type": "score", "instructions": "How does the customer feel?",
                      "criteria": ["very negative", "negative", "neutral", "positive"]},
        "asks_refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
        "has_deadline": {"type": "noul",
                         "instructions": "Does the message name a date or a deadline?",
                         "criteria": {"true": "a date or deadline is named",
                                      "false": "no date is named"}},
    }


def questions_w3() -> Dict[str, Dict[str, Any]]:
    """W2's five and five more: choices of 3 and 8, a score of 5, two nouls."""
    q = questions_w2()
    q.update({
        "language": {"type": "choice", "instructions": "Which language is the message in?",
                     "criteria": ["english", "german", "other"]},
        "product": {"type": "choice", "instructions": "Which product is it about?",
                    "criteria": ["shoes", "jackets", "shirts", "trousers", "socks", "bags",
                                 "watches", "gift cards"]},
        "effort": {"type": "score", "instructions": "How much work will resolving it take?",
                   "criteria": ["none", "a reply", "a lookup", "a refund or exchange",
                                "an investigation"]},
        "repeat_contact": {"type": "noul",
                           "instructions": "Has the customer contacted support about this before?"},
        "wants_manager": {"type": "noul", "instructions": "Does the customer ask for a manager?",
                          "labels": {"false": "no", "true": "yes"}},
    })
    return q


_CHOICE_POOL = ["refund", "exchange", "repair", "apology", "voucher", "callback", "escalation",
                "nothing", "survey", "manual"]
_NOUL_POOL = ["the customer is polite", "an order number is given",
              "a payment problem is mentioned", "the customer threatens to leave",
              "the message mentions a phone call", "the parcel was damaged",
              "a discount code is mentioned", "the customer uses the app",
              "more than one order is involved", "the customer gives a deadline"]
_SCORE_POOL = [["none", "some", "a lot"], ["unlikely", "possible", "likely", "certain"],
               ["trivial", "small", "medium", "large", "huge"]]


def questions_w4() -> Dict[str, Dict[str, Any]]:
    """W3's ten and forty generated ones (choices of 2 to 7, scores of 3 to 5, nouls): 50."""
    q = questions_w3()
    for i in range(40):
        kind = ("choice", "score", "noul")[i % 3]
        if kind == "choice":
            k = 2 + (i // 3) % 6
            labels = [_CHOICE_POOL[(i + j) % len(_CHOICE_POOL)] for j in range(k)]
            q["next_step_%02d" % i] = {
                "type": "choice", "instructions": "Which next step fits best (variant %d)?" % i,
                "criteria": labels}
        elif kind == "score":
            q["scale_%02d" % i] = {"type": "score",
                                   "instructions": "Rate the ticket on aspect number %d." % i,
                                   "criteria": list(_SCORE_POOL[i % len(_SCORE_POOL)])}
        else:
            q["fact_%02d" % i] = {
                "type": "noul",
                "instructions": "Is it true that %s?" % _NOUL_POOL[i % len(_NOUL_POOL)]}
    assert len(q) == 50
    return q


# --- workloads ---------------------------------------------------------------------------------

@dataclass
class Workload:
    """One timed call: `predict(states[0], questions)` or `predict_batch(states, questions)`."""

    name: str
    title: str
    kind: str  # "predict" or "predict_batch"
    states: List[str]
    questions: Dict[str, Dict[str, Any]]
    state_tokens: int  # tokens of each state before any cut
    row_tokens: List[int] = field(default_factory=list)  # every row's length, from kime's layout
    rows_cut: int = 0  # rows whose state was cut to fit max_len

    @property
    def rows(self) -> int:
        return len(self.row_tokens)

    def rows_text(self) -> str:
        lo, hi = min(self.row_tokens), max(self.row_tokens)
        span = "%d tokens" % lo if lo == hi else "%d-%d tokens" % (lo, hi)
        text = "%d row%s of %s" % (self.rows, "" if self.rows == 1 else "s", span)
        if self.rows_cut:
            text += ", state cut to fit"
        return text

    def payload(self) -> Dict[str, Any]:
        """What a peer process needs to run it."""
        return {"kind": self.kind, "states": self.states, "questions": self.questions}

    def describe(self) -> Dict[str, Any]:
        return {"name": self.name, "title": self.title, "kind": self.kind,
                "states": len(self.states), "questions": len(self.questions),
                "state_tokens": self.state_tokens, "rows": self.rows,
                "row_tokens": {"min": min(self.row_tokens), "max": max(self.row_tokens),
                               "mean": sum(self.row_tokens) / len(self.row_tokens)},
                "rows_cut": self.rows_cut}


def build_workloads(checkpoint: str, engine: Any,
                    names: Sequence[str] = WORKLOAD_NAMES) -> List[Workload]:
    """Build the named workloads for `checkpoint` and check them against `engine` (a
    `kime.Kime`): every state has exactly its token count, W3/W4 rows are exactly `max_len`."""
    encode = tokenizer_encoder(checkpoint)
    max_len = engine.max_row_tokens
    unknown = [n for n in names if n not in WORKLOAD_NAMES]
    if unknown:
        raise ValueError("unknown workload(s) %s; choose from %s"
                         % (unknown, ", ".join(WORKLOAD_NAMES)))

    texts: Dict[int, str] = {}

    def state(n: int, seed: int) -> str:
        key = n * 1000 + seed
        if key not in texts:
            texts[key] = exact_tokens_text(encode, source_text(seed, sentences=max(40, n // 8)), n)
        return texts[key]

    specs = {
        "W1": ("96-token state, 1 choice of 4", "predict", [state(96, 1)], questions_w1(), 96),
        "W2": ("300-token state, 5 questions", "predict", [state(300, 2)], questions_w2(), 300),
        "W3": ("%d-token state, 10 questions" % max_len, "predict", [state(max_len, 3)],
               questions_w3(), max_len),
        "W4": ("%d-token state, 50 questions" % max_len, "predict", [state(max_len, 3)],
               questions_w4(), max_len),
        "W9": ("predict_batch: 16 x 300-token states, 5 questions", "predict_batch",
               [state(300, 100 + i) for i in range(16)], questions_w2(), 300),
    }
    out = []
    for name in names:
        title, kind, states, questions, n = specs[name]
        w = Workload(name=name, title=title, kind=kind, states=states, questions=questions,
                     state_tokens=n)
        for s in states:
            rows = engine.rows_for({"state": s, "questions": questions})
            for r in rows:
                if r.state_tokens != n:
                    raise AssertionError("%s: kime sees %d state tokens, %d built"
                                         % (name, r.state_tokens, n))
                w.row_tokens.append(len(r.ids))
                w.rows_cut += r.state_tokens_dropped > 0
        if name in ("W3", "W4") and any(t != max_len for t in w.row_tokens):
            raise AssertionError("%s: rows of %s tokens, all should be max_len=%d"
                                 % (name, sorted(set(w.row_tokens)), max_len))
        out.append(w)
    return out
