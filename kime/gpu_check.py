"""The CUDA self-check at load: a GPU answers nothing until a probe's answers agree with the CPU's.

No test here runs on a real GPU, so a wrong tensor-core fragment layout, a cuBLAS kernel that
reduces in another order for another batch size, or TF32 left on by a driver default would
reach a user's probabilities silently. Before an engine on a GPU answers anyone, the factory
hands its CUDA backend to `verify`, which runs a probe through it and through the CPU backend in
FP32 on the same checkpoint:

- every decision output of every probe row (option logits, option probabilities, act-head
  probabilities) and every embedding must lie within the precision's bound of the CPU's
  (`BOUNDS`: the bounds the CUDA backend is held to against Laya);
- each row must give the same bits alone, in a batch with the others (padded; on ModernBERT
  shapes a larger plan than a row alone takes) and when that batch's CUDA graph is replayed.

The probe (`probe_rows`) has a row of each question type: a choice row longer than the local
attention window (local and global layers both act on it), a score row, and a noul row short
enough for the smallest plan; they run together in one batch of rows of different lengths,
padded with copies of row 0. A parallel-layout checkpoint's rows are in that layout. Two
embedding rows check the encoder-only mode the same way.

A GPU that raises while it runs the probe fails too. The verdict is kept on disk per GPU model,
driver, CUDA and CuPy versions, cuBLAS, the backend's numerics, kime's version and the
checkpoint's fingerprint (`verify`), so a restart pays the probe once; a failed verdict is kept
too, and refuses or falls back at once (one that raised is not: it says nothing lasting).
`KIME_CUDA_SELFCHECK=0` skips the check. `last` reads the newest verdict, for `kime doctor`.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ._version import __version__
from .backend import Backend, cache_root
from .batch import Batch, Outputs
from .checkpoint import Checkpoint, fingerprint
from .layout import parallel_layout
from .render import QTYPES

ENV = "KIME_CUDA_SELFCHECK"
PROBE_VERSION = 1
"""Raised when the probe or the comparison changes, so no verdict of the old probe is reused."""


@dataclass(frozen=True)
class Bounds:
    """The largest absolute difference from the CPU's FP32 each output may show. `embedding`
    scales with max(1, the largest |value| of the CPU's vector)."""

    logits: float
    probabilities: float
    act: float
    embedding: float


BOUNDS: Dict[str, Bounds] = {
    # FP16 storage through every layer (issue 5's bounds against Laya's FP32 answers).
    "f16": Bounds(logits=5e-2, probabilities=6e-3, act=6e-3, embedding=5e-2),
    # FP32 with TF32 off: the same float32 sums in another order.
    "f32": Bounds(logits=1e-4, probabilities=1e-5, act=1e-5, embedding=1e-4),
}

OUTPUTS = {"logits": "option logits", "probabilities": "option probabilities",
           "act": "act-head probabilities", "embedding": "embedding"}
"""Each compared output, in words."""

BITS = ("alone and in a batch", "in a batch and in its graph's replay")
"""The runs whose bits must be equal (a `Deviation.run` with bound 0)."""


@dataclass(frozen=True)
class ProbeRow:
    """One row of the probe, and what kind of row it is, in words."""

    kind: str
    ids: List[int]
    markers: List[int]
    qtype: int
    positions: Optional[List[int]] = None
    option_ids: Optional[List[int]] = None


@dataclass(frozen=True)
class Deviation:
    """How far one output of one probe row strayed: from the CPU's (`bound` > 0), or between two
    GPU runs that must give the same bits (`bound` 0, `run` one of `BITS`)."""

    output: str
    row: str
    run: str
    value: float
    bound: float

    @property
    def bits(self) -> bool:
        return self.run in BITS

    @property
    def ratio(self) -> float:
        """The deviation over its bound; above 1 fails (a bit difference is infinite)."""
        if not np.isfinite(self.value):
            return float("inf")
        if self.bits:
            return float("inf") if self.value > 0 else 0.0
        return self.value / self.bound

    @property
    def failed(self) -> bool:
        return self.ratio > 1

    def describe(self, precision: str) -> str:
        what = "the %s of the %s" % (OUTPUTS[self.output], self.row)
        if self.bits:
            return "%s differ by %.3g %s, where they must be the same bits" % (
                what, self.value, self.run)
        return "%s, %s, are %.3g from the CPU's FP32 answer, %s the %s bound of %g" % (
            what, self.run, self.value, "over" if self.failed else "within",
            label(precision), self.bound)


@dataclass(frozen=True)
class GpuCheck:
    """The verdict on one GPU, precision and checkpoint. `worst` is the first failure (a
    difference from the CPU before a bit difference, the largest first), or when all passed
    the deviation closest to its bound."""

    passed: bool
    device: str
    gpu: str
    precision: str
    checkpoint: str
    worst: Optional[Deviation]
    failures: Tuple[Deviation, ...]
    seconds: float
    """The whole check: the CPU backend opened, both sides run, compared."""
    cpu_seconds: float
    """Its CPU part: the CPU backend opened and its forward passes."""
    checked_at: float
    key: Dict[str, str] = field(repr=False)
    cached: bool = False
    """Read from an earlier run's record rather than run now."""
    error: Optional[str] = None
    """What the GPU raised when it ran the probe (it failed; such a verdict is not kept)."""

    def summary(self) -> str:
        """One line: passed or failed, where, and the largest deviation."""
        where = "%s (%s), %s, %s" % (self.device, self.gpu, label(self.precision),
                                     self.checkpoint)
        if self.error is not None:
            return "FAILED on %s: the probe raised %s" % (where, self.error)
        if self.worst is None:
            return "%s on %s" % ("passed" if self.passed else "FAILED", where)
        n = len(self.failures)
        head = "passed" if self.passed else "FAILED (%d output%s outside %s bound%s)" % (
            n, "s" if n > 1 else "", "their" if n > 1 else "its", "s" if n > 1 else "")
        return "%s on %s: %s" % (head, where, self.worst.describe(self.precision))

    def to_json(self) -> Dict[str, Any]:
        out = asdict(self)
        out.pop("cached")
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any], cached: bool = True) -> "GpuCheck":
        worst = data["worst"]
        return cls(passed=bool(data["passed"]), device=str(data["device"]), gpu=str(data["gpu"]),
                   precision=str(data["precision"]), checkpoint=str(data["checkpoint"]),
                   worst=None if worst is None else Deviation(**worst),
                   failures=tuple(Deviation(**d) for d in data["failures"]),
                   seconds=float(data["seconds"]), cpu_seconds=float(data["cpu_seconds"]),
                   checked_at=float(data["checked_at"]),
                   key={str(k): str(v) for k, v in data["key"].items()}, cached=cached,
                   error=data.get("error"))


def label(precision: str) -> str:
    """`f16` as FP16, `f32` as FP32."""
    return "FP" + precision.lstrip("f").upper()


def enabled() -> bool:
    """False when KIME_CUDA_SELFCHECK is 0 (or false, no, off); anything else runs the check."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


# --- the probe ---------------------------------------------------------------------------------

def probe_rows(ck: Checkpoint) -> Tuple[List[ProbeRow], List[ProbeRow]]:
    """The probe's decision rows (one batch) and embedding rows, laid out as Laya lays a row
    (`[CLS] question [SEP] [MASK] option ... [SEP] state [SEP]`) from seeded random tokens."""
    g, tok = ck.graph, ck.tokenizer
    rng = np.random.default_rng(20240601)
    vocab = min(tok.vocab_size, g.spec.vocab)
    limit = min(ck.config.max_len, g.max_positions)
    local = [b.attention.half_window for b in g.layers if b.attention.half_window is not None]
    window = 2 * max(local) if local else 0
    parallel = ck.config.parallel
    style = "parallel-layout " if parallel else ""

    def row(qtype: str, options: int, option_len: int, head_len: int, length: int,
            note: str = "") -> ProbeRow:
        ids = [tok.cls_id] + rng.integers(0, vocab, head_len).tolist() + [tok.sep_id]
        markers = []
        for _ in range(options):
            markers.append(len(ids))
            ids += [tok.mask_id] + rng.integers(0, vocab, option_len).tolist()
        ids.append(tok.sep_id)
        head = len(ids)
        length = max(head + 1, min(limit, length))
        ids += rng.integers(0, vocab, length - head - 1).tolist() + [tok.sep_id]
        kind = "%s%s row of %d tokens%s" % (style, qtype, length, note)
        if not parallel:
            return ProbeRow(kind, ids, markers, QTYPES[qtype])
        positions, option_ids = parallel_layout(markers, head, length)
        return ProbeRow(kind, ids, markers, QTYPES[qtype], positions, option_ids)

    long = min(limit, window + 128)
    past = (", past the %d-token local window" % window) if window and long > window else ""
    rows = [row("choice", 4, 3, 10, long, past), row("score", 5, 2, 8, 40),
            row("noul", 2, 1, 2, 12)]
    embed = [ProbeRow("embedding row of %d tokens" % len(r.ids), r.ids, [], 0)
             for r in rows[1:]]
    return rows, embed


def pack_rows(rows: Sequence[ProbeRow], embed: bool) -> Batch:
    """Probe rows as one batch: decision rows (in their layout) or embedding rows."""
    if embed:
        return Batch.pack_embed([r.ids for r in rows])
    if rows[0].positions is None:
        return Batch.pack([r.ids for r in rows], [r.markers for r in rows],
                          [r.qtype for r in rows])
    return Batch.pack([r.ids for r in rows], [r.markers for r in rows], [r.qtype for r in rows],
                      positions=[r.positions or [] for r in rows],
                      option_ids=[r.option_ids or [] for r in rows])


def _copy(out: Outputs) -> Outputs:
    """Outputs are views of a backend's buffers, valid until its next run."""
    return Outputs(logits=out.logits.copy(), act=out.act.copy(),
                   pooled=None if out.pooled is None else out.pooled.copy())


def _row_outputs(out: Outputs, batch: Batch, r: int) -> Dict[str, np.ndarray]:
    """Row r's raw outputs (float32, as returned)."""
    if batch.embed:
        assert out.pooled is not None
        return {"embedding": out.pooled[r]}
    return {"logits": out.logits[int(batch.mcu[r]):int(batch.mcu[r + 1])], "act": out.act[r]}


def _softmax(logits: np.ndarray) -> np.ndarray:
    x = logits.astype(np.float64)
    e = np.exp(x - x.max())
    return np.asarray(e / e.sum())


def _distance(a: np.ndarray, b: np.ndarray) -> float:
    """The largest |a - b|; infinite where either side is not finite or the shapes differ."""
    if a.shape != b.shape:
        return float("inf")
    if not a.size:
        return 0.0
    d = np.abs(a.astype(np.float64) - b.astype(np.float64))
    return float(d.max()) if np.isfinite(d).all() else float("inf")


def _against_cpu(got: Dict[str, np.ndarray], want: Dict[str, np.ndarray], kind: str, run: str,
                 bounds: Bounds) -> List[Deviation]:
    found = []
    if "logits" in want:
        got = dict(got, probabilities=_softmax(got["logits"]))
        want = dict(want, probabilities=_softmax(want["logits"]))
    for name, ref in want.items():
        bound = getattr(bounds, name)
        if name == "embedding":
            bound *= max(1.0, float(np.abs(ref).max()))
        found.append(Deviation(name, kind, run, _distance(got[name], ref), bound))
    return found


def cpu_answers(groups: Sequence[Tuple[Batch, Sequence[ProbeRow]]],
                cpu: Backend) -> List[Outputs]:
    """The CPU's outputs for each probe batch: what the GPU's are measured against."""
    return [_copy(cpu.run(batch)) for batch, _ in groups]


def compare(groups: Sequence[Tuple[Batch, Sequence[ProbeRow]]], wants: Sequence[Outputs],
            gpu: Backend, bounds: Bounds) -> List[Deviation]:
    """Run each probe batch on the GPU and measure every output against the CPU's (`wants`):
    the batch, then each row alone (a smaller plan), then the batch again (its graph's
    replay)."""
    found: List[Deviation] = []
    for (batch, group), want in zip(groups, wants):
        alone = [pack_rows([r], batch.embed) for r in group]
        first = _copy(gpu.run(batch))
        singles = [_copy(gpu.run(b)) for b in alone]
        again = _copy(gpu.run(batch))
        for r, probe in enumerate(group):
            ref = _row_outputs(want, batch, r)
            together = _row_outputs(first, batch, r)
            one = _row_outputs(singles[r], alone[r], 0)
            replay = _row_outputs(again, batch, r)
            found += _against_cpu(together, ref, probe.kind, "in a batch", bounds)
            found += _against_cpu(one, ref, probe.kind, "alone", bounds)
            for name in ref:
                found.append(Deviation(name, probe.kind, BITS[0],
                                       _distance(one[name], together[name]), 0.0))
                found.append(Deviation(name, probe.kind, BITS[1],
                                       _distance(replay[name], together[name]), 0.0))
    return found


def _verdict(found: Sequence[Deviation]) -> Tuple[Optional[Deviation], Tuple[Deviation, ...]]:
    """(worst, failures): failures against the CPU before bit differences, each the largest
    first; with none, the deviation nearest its bound."""
    failures = tuple(sorted((d for d in found if d.failed), key=lambda d: (d.bits, -d.ratio)))
    if failures:
        return failures[0], failures
    measured = [d for d in found if not d.bits]
    return (max(measured, key=lambda d: d.ratio) if measured else None), ()


# --- the verdict, kept per GPU, stack and checkpoint --------------------------------------------

def records_dir() -> str:
    """Where verdicts are kept: `gpu-check/` under kime's cache directory."""
    return os.path.join(cache_root(), "gpu-check")


def _record_path(key: Mapping[str, str]) -> str:
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:32]
    return os.path.join(records_dir(), digest + ".json")


def _read(path: str, key: Optional[Mapping[str, str]] = None) -> Optional[GpuCheck]:
    """The verdict at `path`, or None when there is none, it does not parse, or (with `key`) it
    was reached for another GPU, stack or checkpoint."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        check = GpuCheck.from_json(data)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if key is not None and check.key != dict(key):
        return None
    return check


def _write(path: str, check: GpuCheck) -> None:
    """Keep the verdict (atomically: a reader never sees half of it). A cache that cannot be
    written costs the probe again on the next load, nothing more."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".check-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(check.to_json(), f, indent=1, allow_nan=True)
        os.replace(tmp, path)
    except OSError:
        pass


def verify(ck: Checkpoint, gpu: Backend, identity: Mapping[str, str],
           open_cpu: Callable[[], Backend]) -> GpuCheck:
    """The verdict on `gpu` (a CUDA backend that has answered nothing yet) for `ck`: the kept
    one when this GPU model, stack (`identity`), kime and checkpoint were checked before, else
    the probe's, run now through `gpu` and the FP32 CPU backend `open_cpu` opens (and kept)."""
    precision = str(gpu.precision)
    key = dict(identity, kime=__version__, checkpoint=fingerprint(ck.path),
               probe=str(PROBE_VERSION))
    path = _record_path(key)
    kept = _read(path, key)
    if kept is not None:
        return kept
    t0 = time.perf_counter()
    rows, embed = probe_rows(ck)
    groups = [(pack_rows(rows, False), rows), (pack_rows(embed, True), embed)]
    cpu = open_cpu()
    try:
        wants = cpu_answers(groups, cpu)  # a CPU that fails is not the GPU's failure: raised
    finally:
        cpu.close()
    cpu_seconds = time.perf_counter() - t0
    error = None
    found: List[Deviation] = []
    try:
        found = compare(groups, wants, gpu, BOUNDS[precision])
    except Exception as e:  # the GPU could not run the probe: it answers nothing either
        error = "%s: %s" % (type(e).__name__, e)
    worst, failures = _verdict(found)
    check = GpuCheck(passed=error is None and not failures, device=str(gpu.device),
                     gpu="%s, %s" % (identity.get("gpu", "GPU"), identity.get("arch", "?")),
                     precision=precision, checkpoint=ck.path, worst=worst, failures=failures,
                     seconds=time.perf_counter() - t0, cpu_seconds=cpu_seconds,
                     checked_at=time.time(), key=key, error=error)
    if error is None:  # a run that raised says nothing lasting about the numerics
        _write(path, check)
    return check


def last() -> Optional[GpuCheck]:
    """The newest verdict kept on this machine (any GPU, checkpoint or kime version), or None."""
    try:
        names = [n for n in os.listdir(records_dir()) if n.endswith(".json")]
    except OSError:
        return None
    found = [c for c in (_read(os.path.join(records_dir(), n)) for n in names) if c is not None]
    return max(found, key=lambda c: c.checked_at) if found else None


# --- what a failure says ------------------------------------------------------------------------

def fallback_warning(check: GpuCheck) -> str:
    """`auto`'s one warning: the largest deviation, where, the GPU, and that the CPU answers."""
    return ("kime: %s (%s) failed kime's CUDA self-check in %s, so this model runs on the CPU: "
            "%s Nothing was answered on the GPU. `kime doctor` shows the check; %s=0 skips it."
            % (check.device, check.gpu, label(check.precision), _because(check), ENV))


def refusal(check: GpuCheck) -> str:
    """The message of `CudaSelfCheckFailed` for an explicit `cuda`/`cuda:N`."""
    return ("device='%s': %s failed kime's CUDA self-check in %s: %s Use device='cpu', or "
            "device='auto', which falls back to the CPU; `kime doctor` shows the check, and "
            "%s=0 runs on the GPU unchecked." % (check.device, check.gpu,
                                                 label(check.precision), _because(check), ENV))


def _because(check: GpuCheck) -> str:
    """The largest deviation (or the error), how many more, and whether the verdict was kept."""
    if check.error is not None:
        text = "running the probe raised %s." % check.error
    elif check.worst is None:
        text = "no output was measured."
    else:
        more = len(check.failures) - 1
        text = check.worst.describe(check.precision) + (
            " (and %d more outside their bounds)." % more if more > 0 else ".")
    if check.cached:
        text += (" (The verdict of an earlier load, %s, kept for this GPU, driver, libraries and "
                 "checkpoint: delete %s to check again.)" % (time.strftime(
                     "%Y-%m-%d %H:%M", time.localtime(check.checked_at)), records_dir()))
    return text
