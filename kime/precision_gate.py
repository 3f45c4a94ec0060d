"""The precision gate: does `precision="int8"` (or `"bf16"`) give this checkpoint's FP32 answers?

`gate(model)` runs one request set through the model twice, in FP32 and in the candidate
precision (INT8 by default, or BF16 on a CPU with AVX512_BF16), and compares the answers
question by question: how often the argmax agrees (per question type and overall),
how far the probabilities move (largest and mean absolute difference over every option), and,
for requests that carry labels, the accuracy and the expected calibration error under each
precision. It passes when the argmax agrees on at least `threshold` (99.5% by default) of the
questions of every type.

The request set is a JSON list or a JSON-lines file of `{"state", "questions"[, "labels"]}`
objects (`labels` maps a question id to the right answer: an option key for `choice`, a level
index for `score`, true or false for `noul`), or, by default, a built-in varied set.

Random checkpoints are a harder case than trained ones: their probabilities are close to
uniform, so the smallest perturbation can swap two near-tied options. The report therefore also
counts the disagreements where FP32's top two options were within `TIE_MARGIN` of each other.
"""
from __future__ import annotations

import json
import random
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import numpy as np

from .errors import BadOption, Problem, problem
from .render import Question
from .request import check_questions, raise_if

THRESHOLD = 0.995
PRECISIONS = ("int8", "bf16")
"""The CPU precisions the gate compares with FP32."""
TIE_MARGIN = 0.01
"""FP32 top-1 minus top-2 probability below which a flipped argmax is a near-tie."""
ECE_BINS = 10
TYPES = ("choice", "score", "noul")


@dataclass
class TypeStats:
    """One question type's comparison."""

    questions: int = 0
    agree: int = 0
    near_ties: int = 0  # disagreements where FP32's top two were within TIE_MARGIN
    max_prob_diff: float = 0.0
    sum_prob_diff: float = 0.0
    options: int = 0

    @property
    def agreement(self) -> float:
        return self.agree / self.questions if self.questions else 1.0

    @property
    def mean_prob_diff(self) -> float:
        return self.sum_prob_diff / self.options if self.options else 0.0


@dataclass
class Calibration:
    """Accuracy and expected calibration error on the labelled questions, per precision."""

    labelled: int
    accuracy: Dict[str, float]
    ece: Dict[str, float]


@dataclass
class Disagreement:
    request: int
    question: str
    qtype: str
    f32: str
    other: str  # the candidate precision's argmax; the report names it after the precision
    f32_margin: float  # FP32's top-1 minus top-2 probability
    prob_diff: float


@dataclass
class GateReport:
    """What `gate` measured. `passed` is the verdict; `format()` is the CLI's text."""

    model: str
    requests: int
    threshold: float
    by_type: Dict[str, TypeStats]
    calibration: Optional[Calibration]
    disagreements: List[Disagreement]
    seconds: Dict[str, float]
    devices: Dict[str, str]
    source: str = "built-in"
    precision: str = "int8"
    """The precision compared with FP32; `seconds`, `devices` and the calibration are keyed by
    `f32` and by it."""

    @property
    def questions(self) -> int:
        return sum(s.questions for s in self.by_type.values())

    @property
    def agreement(self) -> float:
        n = self.questions
        return sum(s.agree for s in self.by_type.values()) / n if n else 1.0

    @property
    def max_prob_diff(self) -> float:
        return max((s.max_prob_diff for s in self.by_type.values()), default=0.0)

    @property
    def mean_prob_diff(self) -> float:
        n = sum(s.options for s in self.by_type.values())
        return sum(s.sum_prob_diff for s in self.by_type.values()) / n if n else 0.0

    @property
    def passed(self) -> bool:
        return all(s.agreement >= self.threshold for s in self.by_type.values() if s.questions)

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "model": self.model, "source": self.source, "precision": self.precision,
            "requests": self.requests,
            "questions": self.questions, "threshold": self.threshold, "passed": self.passed,
            "agreement": self.agreement, "max_prob_diff": self.max_prob_diff,
            "mean_prob_diff": self.mean_prob_diff,
            "by_type": {t: dict(asdict(s), agreement=s.agreement, mean_prob_diff=s.mean_prob_diff)
                        for t, s in self.by_type.items()},
            "calibration": asdict(self.calibration) if self.calibration else None,
            "disagreements": [{self.precision if k == "other" else k: v
                               for k, v in asdict(d).items()} for d in self.disagreements],
            "seconds": self.seconds, "devices": self.devices,
        }
        return out

    def format(self) -> str:
        lines = ["kime gate: %s, %d requests (%s), %d questions" % (
            self.model, self.requests, self.source, self.questions),
            "  f32:  %s, %.1f s" % (self.devices["f32"], self.seconds["f32"]),
            "  %-5s %s, %.1f s" % (self.precision + ":", self.devices[self.precision],
                                   self.seconds[self.precision]),
            "",
            "  %-7s %9s %10s %10s %12s %12s" % ("type", "questions", "agreement", "near-ties",
                                                 "max |dp|", "mean |dp|")]
        for t, s in self.by_type.items():
            if s.questions:
                lines.append("  %-7s %9d %9.2f%% %10d %12.4f %12.5f" % (
                    t, s.questions, 100 * s.agreement, s.near_ties, s.max_prob_diff,
                    s.mean_prob_diff))
        lines.append("  %-7s %9d %9.2f%% %10d %12.4f %12.5f" % (
            "all", self.questions, 100 * self.agreement,
            sum(s.near_ties for s in self.by_type.values()), self.max_prob_diff,
            self.mean_prob_diff))
        if self.calibration is not None:
            c = self.calibration
            lines += ["", "  %d labelled questions:   accuracy   ECE" % c.labelled]
            for p in ("f32", self.precision):
                lines.append("    %-20s %8.2f%% %6.4f" % (p, 100 * c.accuracy[p], c.ece[p]))
        if self.disagreements:
            lines += ["", "  disagreements (near-ties are FP32 margins under %g):" % TIE_MARGIN]
            for d in self.disagreements[:10]:
                lines.append("    request %d %r (%s): f32 %r, %s %r, f32 margin %.4f" % (
                    d.request, d.question, d.qtype, d.f32, self.precision, d.other,
                    d.f32_margin))
            if len(self.disagreements) > 10:
                lines.append("    ... and %d more" % (len(self.disagreements) - 10))
        if self.passed:
            verdict = ("PASS: argmax agreement >= %g%% on every question type"
                       % (100 * self.threshold))
        else:
            low = [t for t, st in self.by_type.items()
                   if st.questions and st.agreement < self.threshold]
            verdict = "FAIL: argmax agreement below %g%% on %s" % (100 * self.threshold,
                                                                   ", ".join(low))
        lines += ["", "  " + verdict]
        return "\n".join(lines)


# --- request sets ---------------------------------------------------------------------------

_QUESTIONS: List[Dict[str, Any]] = [
    {"type": "choice", "instructions": "Which team should handle this?",
     "criteria": {"billing": "payments, invoices and refunds", "tech": "bugs, outages and errors",
                  "sales": "new plans and upgrades"}},
    {"type": "choice", "instructions": "What is the sentiment of the text?",
     "criteria": ["positive", "neutral", "negative"]},
    {"type": "choice", "instructions": "Is this spam?", "criteria": {"yes": "unsolicited bulk",
                                                                     "no": "a genuine message"}},
    {"type": "choice", "instructions": "Which language is the text mostly written in?",
     "criteria": ["English", "German", "French", "Spanish", "Japanese", "other"]},
    {"type": "choice", "instructions": "What kind of document is this?",
     "criteria": {"email": "a message to someone", "report": "findings or numbers",
                  "story": "a narrative", "record": "structured data", "chat": "a conversation",
                  "notice": "an announcement", "manual": "instructions",
                  "review": "an opinion about a product"}},
    {"type": "choice", "instructions": "Pick the month the text most likely refers to.",
     "criteria": ["January", "February", "March", "April", "May", "June", "July", "August",
                  "September", "October", "November", "December"]},
    {"type": "score", "instructions": "How urgent is it?", "criteria": ["low", "normal", "high"]},
    {"type": "score", "instructions": "How formal is the writing?",
     "criteria": ["very casual", "casual", "neutral", "formal", "very formal"]},
    {"type": "score", "instructions": "How satisfied does the writer seem, from 0 to 9?",
     "criteria": [str(i) for i in range(10)]},
    {"type": "score", "instructions": "How long would a reply take to write?",
     "criteria": ["seconds", "minutes", "an hour", "a day"]},
    {"type": "noul", "instructions": "Does the writer ask for money back?"},
    {"type": "noul", "instructions": "Is the text about travel?",
     "criteria": {"true": "trains, flights, trips, delays or journeys"}},
    {"type": "noul", "instructions": "Does the text contain a number?"},
    {"type": "noul", "instructions": "Should a human read this today?",
     "criteria": {"true": "anything urgent, a complaint or a legal question",
                  "false": "routine news or small talk"}},
]


def builtin_requests(n: int = 200, seed: int = 0) -> List[Dict[str, Any]]:
    """`n` varied requests: states from one word to about 800 tokens (prose, tickets, JSON,
    other languages, dict states and conversations), each with one question of every type
    drawn from a bank of choice (2 to 12 options), score (3 to 10 levels) and noul questions."""
    from ._corpus import corpus_lines

    lines = [ln for ln in corpus_lines() if ln.strip()]
    rng = random.Random(seed)
    by_type = {t: [q for q in _QUESTIONS if q["type"] == t] for t in TYPES}
    out: List[Dict[str, Any]] = []
    for i in range(n):
        kind = i % 5
        start = rng.randrange(len(lines))
        count = rng.choice((1, 1, 2, 3, 5, 8, 13, 21))
        text = " ".join(lines[(start + j) % len(lines)] for j in range(count))
        state: Any = text
        if kind == 1:
            state = {"id": rng.randrange(10000), "subject": lines[start][:60], "body": text}
        elif kind == 2:
            state = [{"role": "user" if j % 2 == 0 else "assistant",
                      "content": lines[(start + j) % len(lines)]} for j in range(1 + count % 6)]
        elif kind == 3:
            state = text.split(" ")[0]  # one word
        questions = {t: dict(rng.choice(by_type[t])) for t in TYPES}
        out.append({"state": state, "questions": questions})
    return out


def load_requests(path: str) -> List[Dict[str, Any]]:
    """A JSON list, or JSON lines, of `{"state", "questions"[, "labels"]}` objects."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise BadOption("cannot read the request file %s: %s" % (path, e.strerror)) from e
    try:
        data = json.loads(text)
        items = data if isinstance(data, list) else [data]
    except ValueError:
        items = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except ValueError as e:
                    raise BadOption("%s line %d is not JSON: %s" % (path, n, e)) from e
    problems = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or "state" not in item or "questions" not in item:
            problems.append("request %d: expected an object with 'state' and 'questions'" % i)
        elif "labels" in item and not isinstance(item["labels"], dict):
            problems.append("request %d: 'labels' must map question ids to answers" % i)
    if not items:
        problems.append("no requests in the file")
    if problems:
        raise BadOption("%s: %s" % (path, "; ".join(problems)))
    return items


# --- the comparison -------------------------------------------------------------------------

def _label_index(q: Question, label: Any) -> Optional[int]:
    """The option index a label names (before any `option_order`), or None when it names none."""
    if q.qtype == "noul":
        if isinstance(label, bool) or label in (0, 1):
            return int(label)
        if isinstance(label, str) and label.lower() in ("true", "false", "yes", "no"):
            return int(label.lower() in ("true", "yes"))
        return None
    if q.qtype == "score":
        if isinstance(label, int) and not isinstance(label, bool) and 0 <= label < q.n_options:
            return label
        return None
    keys = q.labels_out()
    return keys.index(label) if label in keys else None


def check_labels(requests: Sequence[Mapping[str, Any]]) -> List[Problem]:
    """Every label that names no option of its question, or no question, located by request."""
    problems: List[Problem] = []
    for i, req in enumerate(requests):
        labels = req.get("labels") or {}
        questions = req.get("questions")
        if not labels or not isinstance(questions, dict):
            continue
        for qid, label in labels.items():
            loc = ["requests", i, "labels", qid]
            if qid not in questions:
                problems.append(problem(loc, "request %d: label for %r, which is not one of its "
                                        "questions" % (i, qid), "value_error.label", label))
                continue
            qs, bad = check_questions({qid: questions[qid]})
            if bad:
                continue  # the engine reports the question itself
            if _label_index(qs[0], label) is None:
                want = {"choice": "one of its option keys", "score": "a level index 0..%d"
                        % (qs[0].n_options - 1), "noul": "true or false"}[qs[0].qtype]
                problems.append(problem(loc, "request %d, question %r: label %r is not %s"
                                        % (i, qid, label, want), "value_error.label", label))
    return problems


def _ece(conf: np.ndarray, correct: np.ndarray, bins: int = ECE_BINS) -> float:
    """Expected calibration error of top-1 confidence, in equal-width bins."""
    if conf.size == 0:
        return 0.0
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    total = 0.0
    for b in range(bins):
        sel = idx == b
        if sel.any():
            total += abs(float(correct[sel].mean()) - float(conf[sel].mean())) * int(sel.sum())
    return total / conf.size


def _option_name(answer: Any, i: int) -> str:
    if answer.type == "choice":
        return str(answer.question.labels_out()[i])
    if answer.type == "noul":
        return "true" if i == 1 else "false"
    return str(i)


def compare(requests: Sequence[Mapping[str, Any]], f32: Sequence[Any],
            other: Sequence[Any], precision: str = "int8") -> Dict[str, Any]:
    """The per-question comparison of two lists of `Response`s for the same requests: FP32's,
    and `other` in `precision` (which keys its calibration). Raises `InvalidRequest` listing
    every label that names no option."""
    raise_if(check_labels(requests))
    by_type = {t: TypeStats() for t in TYPES}
    disagreements: List[Disagreement] = []
    conf: Dict[str, List[float]] = {"f32": [], precision: []}
    right: Dict[str, List[bool]] = {"f32": [], precision: []}
    labelled = 0
    for i, (req, a, b) in enumerate(zip(requests, f32, other)):
        labels = req.get("labels") or {}
        for qid, fa in a.answers.items():
            ib = b.answers[qid]
            s = by_type[fa.type]
            pa, pb = fa.probabilities.astype(np.float64), ib.probabilities.astype(np.float64)
            diff = np.abs(pa - pb)
            s.questions += 1
            s.options += pa.size
            s.sum_prob_diff += float(diff.sum())
            s.max_prob_diff = max(s.max_prob_diff, float(diff.max()))
            ta, tb = int(pa.argmax()), int(pb.argmax())
            if ta == tb:
                s.agree += 1
            else:
                top = np.sort(pa)[::-1]
                margin = float(top[0] - top[1])
                s.near_ties += int(margin < TIE_MARGIN)
                disagreements.append(Disagreement(i, str(qid), fa.type, _option_name(fa, ta),
                                                  _option_name(fa, tb), margin, float(diff.max())))
            if qid in labels:
                want = _label_index(fa.question, labels[qid])
                labelled += 1
                for name, p, top_i in (("f32", pa, ta), (precision, pb, tb)):
                    conf[name].append(float(p.max()))
                    right[name].append(top_i == want)
    calibration = None
    if labelled:
        calibration = Calibration(
            labelled=labelled,
            accuracy={p: float(np.mean(right[p])) for p in conf},
            ece={p: _ece(np.asarray(conf[p]), np.asarray(right[p], dtype=float)) for p in conf})
    disagreements.sort(key=lambda d: -d.f32_margin)
    return {"by_type": by_type, "calibration": calibration, "disagreements": disagreements}


def gate(model: str, requests: Optional[Sequence[Mapping[str, Any]]] = None, *,
         threads: int = 0, threshold: float = THRESHOLD, limit: Optional[int] = None,
         progress: Optional[Callable[[str], None]] = None,
         source: Optional[str] = None, precision: str = "int8") -> GateReport:
    """Run `requests` (the built-in set when None) through `model` in FP32 and in `precision`
    (`int8`, or `bf16` where the CPU has AVX512_BF16) on the CPU and compare the answers.
    `source` names the set in the report. Raises `InvalidRequest` (every problem, by request
    index) when a request or label is invalid, before any forward pass runs; `Unsupported` when
    this CPU cannot run `precision`."""
    from .backend import Precision
    from .engine import Kime
    from .factory import check_options

    if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
        raise BadOption("threshold must be in (0, 1], got %r" % (threshold,))
    candidate = Precision.parse(precision).value
    if candidate not in PRECISIONS:
        raise BadOption("the gate compares FP32 with %s, not %r" % (" or ".join(PRECISIONS),
                                                                    precision))
    check_options("cpu", candidate, threads)  # a CPU without BF16 is refused before any pass
    source = source or ("built-in" if requests is None else "given")
    if limit is not None and limit < 1:
        raise BadOption("limit must be a positive number of requests, got %r" % (limit,))
    reqs = list(builtin_requests(limit or 200) if requests is None else requests)
    if limit is not None:
        reqs = reqs[:limit]
    if not reqs:
        raise BadOption("the gate needs at least one request")
    raise_if(check_labels(reqs))
    plain = [{k: v for k, v in r.items() if k != "labels"} for r in reqs]
    results: Dict[str, List[Any]] = {}
    seconds: Dict[str, float] = {}
    devices: Dict[str, str] = {}
    for name in ("f32", candidate):
        with Kime(model, device="cpu", precision=name, threads=threads, answer_cache=0) as eng:
            if progress:
                progress("running %d requests in %s on %s" % (len(reqs), name, eng.device))
            t0 = time.perf_counter()
            results[name] = eng.decide_batch(plain, cache=False)
            seconds[name] = time.perf_counter() - t0
            devices[name] = eng.device
    cmp = compare(reqs, results["f32"], results[candidate], candidate)
    return GateReport(model=str(model), requests=len(reqs), threshold=float(threshold),
                      by_type=cmp["by_type"], calibration=cmp["calibration"],
                      disagreements=cmp["disagreements"], seconds=seconds, devices=devices,
                      source=source, precision=candidate)

