"""`kime gate --mixed`: each layer's precision chosen on the user's own requests.

INT8 fails a checkpoint one layer at a time. Pretrained encoders carry a few hidden dimensions
that are tens of times larger than the rest after some of their norms (the "outlier features"
that SmoothQuant and LLM.int8() were built around), so per-token INT8 activations lose the
other dimensions in those layers and nowhere else. `mixed_gate` keeps FP32's answers by
running each layer in the lowest precision that holds them: INT8, else BF16, else FP32.

The search runs the request set once in FP32, then as many mixes as it needs, each a complete
forward pass over every request (a mix is packed in memory, never written to the packed cache).
A mix passes when, on every question type, at least `threshold` of the questions keep FP32's
argmax, and no probability of any answer (an option's, or the act probability) moves further
from FP32's than the precision contract allows (docs/precision.md): `int8_deviation` when a
layer runs INT8, else `bf16_deviation`. The layers are tried as a group, and a group that fails
is halved (adaptive group testing): with d sensitive layers among L it takes about 2d log2(L/d)
passes, one when every layer holds. Every layer's INT8 is tried first, then BF16 for the layers
INT8 left in FP32, with the INT8 choice in place; what neither holds stays FP32. Every mix it
keeps was itself run and passed, so the choice it returns has been measured whole.

The choice is written for `precision="mixed"` to load (`kime.layer_choice`): beside the
checkpoint, or in kime's cache where that directory is not writable.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import BadOption
from .layer_choice import LayerChoice, checkpoint_digest, write_choice

AGREEMENT = 0.999
"""Share of FP32's argmaxes a mix keeps on every question type (`--threshold`)."""
INT8_DEVIATION = 0.071
"""Largest probability change a mix with INT8 layers may make: ONNX Runtime's
`quantize_dynamic` INT8 moved answers by up to 0.071 from torch FP32 (W2 on the contract's
scale-1 random base checkpoint, issue 55's table; docs/precision.md)."""
BF16_DEVIATION = 0.012
"""Largest probability change a mix of BF16 and FP32 layers may make: Laya's own CPU autocast
(`LAYA_CPU_AMP=bf16`) moved answers by up to 0.012 there (W3)."""


@dataclass
class Trial:
    """One mix run over the whole request set, and how it compared with FP32."""

    layers: Tuple[str, ...]
    what: str
    agreement: Dict[str, float]
    flips: int
    max_prob_diff: float
    bound: float
    passed: bool
    seconds: float


@dataclass
class MixedReport:
    """What `mixed_gate` tried and chose. `choice` is the mix it kept; `written` the file
    holding it (None when it was not written)."""

    model: str
    source: str
    requests: int
    questions: int
    threshold: float
    bounds: Dict[str, float]
    encoder_layers: int
    choice: LayerChoice
    trials: List[Trial]
    f32_seconds: float
    written: Optional[str] = None
    devices: Dict[str, str] = field(default_factory=dict)

    @property
    def kept(self) -> Trial:
        """The trial of the chosen mix (all-FP32's stand-in when nothing below it held)."""
        for t in reversed(self.trials):
            if t.passed and t.layers == self.choice.layers:
                return t
        n = len(self.choice.layers)
        return Trial(("f32",) * n, "FP32", {}, 0, 0.0, self.bounds["bf16"], True,
                     self.f32_seconds)

    def to_dict(self) -> Dict[str, Any]:
        return {"model": self.model, "source": self.source, "requests": self.requests,
                "questions": self.questions, "threshold": self.threshold, "bounds": self.bounds,
                "choice": self.choice.to_json(), "counts": self.choice.counts(),
                "written": self.written, "f32_seconds": self.f32_seconds,
                "trials": [t.__dict__ | {"layers": list(t.layers)} for t in self.trials],
                "devices": self.devices}

    def format(self) -> str:
        c = self.choice.counts()
        lines = ["kime gate --mixed: %s, %d requests (%s), %d questions" % (
            self.model, self.requests, self.source, self.questions),
            "  a mix passes when every question type keeps %g%% of FP32's argmaxes and no "
            "probability moves more than %g (with INT8 layers) or %g (BF16 and FP32)"
            % (100 * self.threshold, self.bounds["int8"], self.bounds["bf16"]),
            "  f32: %.1f s" % self.f32_seconds, "",
            "  %-44s %9s %6s %9s  %s" % ("mix tried", "agreement", "flips", "max |dp|",
                                         "verdict")]
        for t in self.trials:
            low = min(t.agreement.values()) if t.agreement else 1.0
            lines.append("  %-44s %8.2f%% %6d %9.4f  %s (%.1f s)" % (
                t.what[:44], 100 * low, t.flips, t.max_prob_diff,
                "pass" if t.passed else "FAIL", t.seconds))
        lines += ["", "  chosen: %s" % self.choice.describe(),
                  "  %d of %d layers INT8, %d BF16, %d FP32 (%d encoder layers, then %d of the "
                  "decision head)" % (c["int8"], len(self.choice.layers), c["bf16"], c["f32"],
                                      self.encoder_layers,
                                      len(self.choice.layers) - self.encoder_layers)]
        kept = self.kept
        lines.append("  the chosen mix: agreement %.2f%% (lowest type), max |dp| %.4f, %.1f s "
                     "against FP32's %.1f s" % (
                         100 * min(kept.agreement.values(), default=1.0), kept.max_prob_diff,
                         kept.seconds, self.f32_seconds))
        if self.written:
            lines.append("  written to %s; load it with precision=\"mixed\"" % self.written)
        return "\n".join(lines)


Evaluate = Callable[[Tuple[str, ...], str], Trial]


def layer_names(layers: Sequence[int], encoder_layers: int) -> str:
    """Layer indices (the encoder's, then the decision head's) in words: `encoder 0-2, 5;
    head 1`."""
    def spans(xs: List[int]) -> str:
        out: List[str] = []
        for x in xs:
            if out and out[-1].split("-")[-1] == str(x - 1):
                out[-1] = out[-1].split("-")[0] + "-" + str(x)
            else:
                out.append(str(x))
        return ", ".join(out)
    enc = [i for i in layers if i < encoder_layers]
    head = [i - encoder_layers for i in layers if i >= encoder_layers]
    return "; ".join(part for part in (enc and "encoder " + spans(enc),
                                        head and "head " + spans(head)) if part)


def grow(evaluate: Evaluate, base: Tuple[str, ...], candidates: Sequence[int], precision: str,
         encoder_layers: int) -> List[int]:
    """The layers of `candidates` that run in `precision` on top of `base` (a mix that passes),
    found by adaptive group testing: the whole group is tried, and a failing group is halved,
    the second half tried on top of what the first half kept. Every layer returned was part of
    a mix that was run and passed with all the others returned."""
    if not candidates:
        return []

    def mix(layers: Sequence[int]) -> Tuple[str, ...]:
        out = list(base)
        for i in layers:
            out[i] = precision
        return tuple(out)

    what = "%s %s" % (layer_names(candidates, encoder_layers), precision)
    if evaluate(mix(candidates), what).passed:
        return list(candidates)
    if len(candidates) == 1:
        return []
    half = len(candidates) // 2
    first = grow(evaluate, base, candidates[:half], precision, encoder_layers)
    return first + grow(evaluate, mix(first), candidates[half:], precision, encoder_layers)


def mixed_gate(model: str, requests: Optional[Sequence[Mapping[str, Any]]] = None, *,
               threads: int = 0, threshold: float = AGREEMENT,
               int8_deviation: float = INT8_DEVIATION, bf16_deviation: float = BF16_DEVIATION,
               limit: Optional[int] = None, write: bool = True,
               progress: Optional[Callable[[str], None]] = None,
               source: Optional[str] = None) -> MixedReport:
    """Choose a precision per layer of `model` (a local checkpoint or a name kime resolves) on
    `requests` (the built-in set when None), as the module docstring says, and write the choice
    for `precision="mixed"` unless `write` is False. Raises `InvalidRequest` (every problem, by
    request index) before any forward pass when a request or label is invalid, `BadOption` for
    a threshold or bound out of range."""
    from .backend import Precision, cpu_count
    from .engine import Kime
    from .executor import Executor
    from .factory import bf16_missing, open_layers
    from .precision_gate import builtin_requests, check_labels, compare
    from .request import raise_if

    if not (isinstance(threshold, (int, float)) and 0.0 < threshold <= 1.0):
        raise BadOption("threshold must be in (0, 1], got %r" % (threshold,))
    for name, bound in (("int8_deviation", int8_deviation), ("bf16_deviation", bf16_deviation)):
        if not (isinstance(bound, (int, float)) and 0.0 <= bound <= 1.0):
            raise BadOption("%s must be a probability change in [0, 1], got %r" % (name, bound))
    if limit is not None and limit < 1:
        raise BadOption("limit must be a positive number of requests, got %r" % (limit,))
    reqs = list(builtin_requests(limit or 200) if requests is None else requests)[:limit]
    if not reqs:
        raise BadOption("the gate needs at least one request")
    raise_if(check_labels(reqs))
    plain = [{k: v for k, v in r.items() if k != "labels"} for r in reqs]
    say = progress or (lambda msg: None)
    threads = threads or cpu_count()
    with Kime(model, device="cpu", precision=Precision.F32, threads=threads,
              answer_cache=0) as eng:
        ck = eng.checkpoint
        jobs = eng.lay_out(plain, cache=False)
        rows = [row for job in jobs for row in job.rows]
        qtypes = [q.type_index for job in jobs for q in job.questions]

        def answers(executor: Executor) -> Tuple[List[Any], float]:
            t0 = time.perf_counter()
            outputs, _ = executor.run(rows, qtypes, cache=False)
            seconds = time.perf_counter() - t0
            out, at = [], 0
            for job in jobs:
                out.append(eng.respond(job, outputs[at:at + len(job.rows)]))
                at += len(job.rows)
            return out, seconds

        say("running %d requests (%d rows) in FP32 on %s" % (len(reqs), len(rows), eng.device))
        f32, f32_seconds = answers(eng.executor)
        n_layers = len(ck.graph.layers) + len(ck.graph.head)
        trials: List[Trial] = []

        def evaluate(layers: Tuple[str, ...], what: str) -> Trial:
            backend = open_layers(ck, threads, layers)
            try:
                got, seconds = answers(Executor(backend, 0))
            finally:
                backend.close()
            cmp = compare(reqs, f32, got, "mixed")
            by_type = {t: s for t, s in cmp["by_type"].items() if s.questions}
            bound = int8_deviation if "int8" in layers else bf16_deviation
            # every probability Laya returns: the options' and the act probability
            acts = [abs(float(a.answers[q].act_probability) - float(b.answers[q].act_probability))
                    for a, b in zip(f32, got) for q in a.answers]
            worst = max([s.max_prob_diff for s in by_type.values()] + acts, default=0.0)
            agreement = {t: s.agreement for t, s in by_type.items()}
            trial = Trial(layers, what, agreement,
                          sum(s.questions - s.agree for s in by_type.values()), worst, bound,
                          all(a >= threshold for a in agreement.values()) and worst <= bound,
                          seconds)
            trials.append(trial)
            say("%-40s %s: lowest agreement %.2f%%, max |dp| %.4f (%.1f s)" % (
                what, "pass" if trial.passed else "FAIL",
                100 * min(agreement.values(), default=1.0), worst, seconds))
            return trial

        choice = ["f32"] * n_layers
        n_enc = len(ck.graph.layers)
        for i in grow(evaluate, tuple(choice), range(n_layers), "int8", n_enc):
            choice[i] = "int8"
        rest = [i for i, p in enumerate(choice) if p == "f32"]
        why = bf16_missing()
        if rest and why is None:
            for i in grow(evaluate, tuple(choice), rest, "bf16", n_enc):
                choice[i] = "bf16"
        elif rest:
            say("BF16 does not run here (%s): the layers INT8 did not hold stay FP32" % why)
        origin = source or ("built-in" if requests is None else "given")
        gate: Dict[str, Any] = {"threshold": threshold, "int8_deviation": int8_deviation,
                "bf16_deviation": bf16_deviation, "requests": len(reqs),
                "source": origin,
                "trials": len(trials), "date": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
        layer_choice = LayerChoice(tuple(choice[:len(ck.graph.layers)]),
                                   tuple(choice[len(ck.graph.layers):]),
                                   checkpoint_digest(ck.path), gate)
        report = MixedReport(model=str(model), source=origin, requests=len(reqs),
                             questions=len(rows), threshold=float(threshold),
                             bounds={"int8": float(int8_deviation), "bf16": float(bf16_deviation)},
                             encoder_layers=len(ck.graph.layers), choice=layer_choice,
                             trials=trials, f32_seconds=f32_seconds,
                             devices={"f32": eng.device})
        kept = report.kept
        gate.update(agreement=kept.agreement, max_prob_diff=kept.max_prob_diff)
        if write:
            report.written = write_choice(ck.path, layer_choice)
            say("wrote %s" % report.written)
    return report

