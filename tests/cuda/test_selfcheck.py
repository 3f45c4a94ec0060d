"""The CUDA self-check at load (kime/gpu_check.py), on the emulated CuPy (emulator.py): the
faithful emulator passes; a kernel made wrong on purpose (attention, a GEMM's epilogue, RoPE,
the padding of a plan) trips the check for `auto` (one warning, then the CPU) and for an explicit
`cuda` (`CudaSelfCheckFailed`), naming outputs and rows the broken kernel reaches; the verdict
is kept per GPU stack and checkpoint, `KIME_CUDA_SELFCHECK=0` skips it, and `kime doctor` shows
the last one."""
from __future__ import annotations

import json
import os
import pickle
import types
import warnings
from typing import Any, Callable, List, Optional

import numpy as np
import pytest

import kime
from kime import cli, gpu_check
from kime._cuda import backend as cuda_backend
from kime._cuda import device
from kime._cuda import plan as cuda_plan
from kime._cuda.layout import Layout
from kime.checkpoint import load_checkpoint
from kime.gpu_check import BITS, Deviation

from ..kernels import reference as ref
from .emulator import FakeCupy, FakeGemm, FakeKernels, FakeLaunch

REQUEST = {"state": "the printer is on fire and the invoice is wrong",
           "questions": {"urgent": {"type": "noul", "instructions": "Is this urgent?"},
                         "team": {"type": "choice", "instructions": "Which team?",
                                  "criteria": ["billing", "tech", "facilities"]}}}
DECISIONS = {"logits", "probabilities", "act"}


def _view(buf: Any, n: int, width: int) -> np.ndarray:
    return np.asarray(buf).reshape(-1)[:n * width].reshape(n, width)


# --- kernels made wrong on purpose ------------------------------------------------------------

class CappedAttention(FakeKernels):
    """Global attention that stops after a row's first 64 keys (a key-chunk loop bound)."""

    CAP = 64

    def attention(self, qkv, lo, hi, n, d, heads, half_window, out, parallel=None):
        if half_window is not None or parallel is not None:
            return super().attention(qkv, lo, hi, n, d, heads, half_window, out, parallel)

        def run() -> None:
            low = np.asarray(lo)[:n]
            high = np.minimum(np.asarray(hi)[:n], low + self.CAP)
            _view(out, n, d)[:] = ref.attention(_view(qkv, n, 3 * d), low, high, d, heads, None)
        return self._l("attention", run)


class NoReluEpilogue(FakeKernels):
    """The decision head's GEMM epilogue (bias, then ReLU) without its ReLU."""

    def bias_act(self, io, bias, n, width, relu):
        return super().bias_act(io, bias, n, width, relu=False)


class NoBiasActHead(FakeKernels):
    """The act head's hidden GEMM with its epilogue's bias dropped."""

    def act_head(self, x, logits, mcu, rfirst, w0t, b0, w2, b2, rows, d, hidden, n_act, act):
        return super().act_head(x, logits, mcu, rfirst, w0t, np.zeros_like(np.asarray(b0)), w2,
                                b2, rows, d, hidden, n_act, act)


class WrappedRope(FakeKernels):
    """RoPE tables that wrap after 64 positions (a table sized for the wrong length)."""

    WRAP = 64

    def rope(self, qkv, bias, cos, sin, lo, n, d, head_dim, parallel=None):
        wrap = np.arange(np.asarray(cos).shape[0]) % self.WRAP
        return super().rope(qkv, bias, np.asarray(cos)[wrap], np.asarray(sin)[wrap], lo, n, d,
                            head_dim, parallel)


class SlotRope(FakeKernels):
    """RoPE at each token's slot in the plan instead of its place in its row. Rotations are
    relative, so the answers move only by rounding, but a row's bits now depend on where it
    sits in a batch: only the bit comparison catches it."""

    def rope(self, qkv, bias, cos, sin, lo, n, d, head_dim, parallel=None):
        return super().rope(qkv, bias, cos, sin, np.zeros(n, dtype=np.int32), n, d, head_dim,
                            parallel)


class CrashingAttention(FakeKernels):
    """An attention kernel that faults, as a wrong fragment layout can."""

    def attention(self, qkv, lo, hi, n, d, heads, half_window, out, parallel=None):
        def run() -> None:
            raise RuntimeError("emulated: an illegal memory access was encountered")
        return self._l("attention", run)


class LeakyPadding(Layout):
    """A plan's padding that the batch's last row can see: its keys run on to the plan's end."""

    def fill(self, batch):
        markers, rows = super().fill(batch)
        start = int(self.rfirst[rows - 1])
        self.hi[start:int(self.hi[start])] = self.cap
        return markers, rows


# --- the emulated GPU --------------------------------------------------------------------------

@pytest.fixture
def emulated_gpu(monkeypatch, tmp_path):
    """An emulated GPU 0 for `auto` and `cuda` alike, with a verdict cache of its own; call it
    with a kernel set (and a layout) to break something. Returns the launches recorded."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(gpu_check.ENV, raising=False)
    runtime = types.SimpleNamespace(getDeviceCount=lambda: 1, driverGetVersion=lambda: 12090,
                                    runtimeGetVersion=lambda: 12090)
    monkeypatch.setattr(device, "import_cupy", lambda: types.SimpleNamespace(
        __version__="13.3.0", cuda=types.SimpleNamespace(runtime=runtime)))
    launches: List[str] = []

    def use(kernels: type = FakeKernels, layout: type = Layout) -> List[str]:
        fake = FakeCupy()

        class Counted(kernels):  # type: ignore[misc, valid-type]
            def _l(self, name: str, fn: Callable[[], None]) -> FakeLaunch:
                def run() -> None:
                    launches.append(name)
                    fn()
                return FakeLaunch(self.cupy, name, run)

        monkeypatch.setattr(cuda_backend, "toolkit", lambda ordinal: (fake, None))
        monkeypatch.setattr(cuda_backend, "Kernels", Counted)
        monkeypatch.setattr(cuda_plan, "Layout", layout)  # a plan lays its batches out
        monkeypatch.setattr(cuda_backend, "Gemm",
                            lambda cublas, ptr, half: FakeGemm(cublas, ptr, half, fake))
        return launches
    return use


def _engine(path: Any, **kw: Any) -> kime.Kime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.Kime(str(path), answer_cache=0, **kw)


def _records() -> List[str]:
    try:
        return sorted(os.listdir(gpu_check.records_dir()))
    except FileNotFoundError:
        return []


def _forget() -> None:
    for name in _records():
        os.remove(os.path.join(gpu_check.records_dir(), name))


# --- the faithful emulator passes --------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("precision", ["f16", "f32"])
def test_the_faithful_emulator_passes(emulated_gpu, tiny_path, precision):
    emulated_gpu()
    engine = _engine(tiny_path, device="cuda", precision=precision)
    check = engine.gpu_check
    assert str(engine.backend.device) == "cuda:0" and check is not None
    assert check.passed and not check.failures and not check.cached
    assert check.worst is not None and 0 < check.worst.value <= check.worst.bound
    assert check.precision == precision and "Emulated GPU" in check.gpu
    assert check.cpu_seconds > 0 and check.seconds >= check.cpu_seconds
    assert len(_records()) == 1
    answer = engine.decide(REQUEST)
    assert abs(float(answer["team"].probabilities.sum()) - 1) < 1e-5


@pytest.mark.slow
def test_a_parallel_layout_checkpoint_is_probed_in_its_layout(emulated_gpu, tmp_path):
    from kime.synthetic import write_checkpoint

    path = write_checkpoint(tmp_path / "parallel", "tiny", option_layout="parallel")
    rows, embed = gpu_check.probe_rows(load_checkpoint(str(path)))
    assert all(r.positions is not None and r.kind.startswith("parallel-layout") for r in rows)
    # Laya's layout: every option slot starts at the same position id.
    starts = {rows[0].positions[m] for m in rows[0].markers}
    assert len(starts) == 1 and len(rows[0].markers) == 4
    emulated_gpu()
    engine = _engine(path, device="cuda")
    assert engine.gpu_check is not None and engine.gpu_check.passed
    assert str(engine.backend.device) == "cuda:0"


def test_the_probe_covers_what_the_issue_asks(tiny_path):
    ck = load_checkpoint(str(tiny_path))
    rows, embed = gpu_check.probe_rows(ck)
    window = ck.graph.spec.local_attention
    assert sorted(r.qtype for r in rows) == [0, 1, 2]  # choice, score, noul
    lengths = [len(r.ids) for r in rows]
    assert lengths[0] > window and len(set(lengths)) == len(lengths)
    assert "past the %d-token local window" % window in rows[0].kind
    assert all(len(r.ids) <= ck.config.max_len for r in rows)
    for r in rows:  # markers on the [MASK]s, the row closed by [SEP]
        assert [r.ids[m] for m in r.markers] == [ck.tokenizer.mask_id] * len(r.markers)
        assert r.ids[0] == ck.tokenizer.cls_id and r.ids[-1] == ck.tokenizer.sep_id
        assert r.positions is None
    assert [len(e.ids) for e in embed] == lengths[1:]


# --- a kernel made wrong on purpose -------------------------------------------------------------

def _longer_than(tokens):
    def reach(rows, embed):
        long = {r.kind for r in list(rows) + list(embed) if len(r.ids) > tokens}
        return lambda d: d.row in long
    return reach


def _reach_decisions(rows, embed):
    return lambda d: d.output in DECISIONS


def _reach_not_first(rows, embed):
    later = {r.kind for r in list(rows[1:]) + list(embed[1:])}
    return lambda d: d.row in later and d.run in ("in a batch", BITS[0])


def _reach_last(rows, embed):
    last = {rows[-1].kind, embed[-1].kind}
    return lambda d: d.run != "in a batch" or d.row in last


BROKEN = {
    "attention": (CappedAttention, Layout, _longer_than(CappedAttention.CAP)),
    "gemm-epilogue": (NoReluEpilogue, Layout, _reach_decisions),
    "rope": (WrappedRope, Layout, _longer_than(WrappedRope.WRAP)),
    "rope-from-slot": (SlotRope, Layout, _reach_not_first),
    "padding": (FakeKernels, LeakyPadding, _reach_last),
}


@pytest.mark.slow
@pytest.mark.parametrize("broken", sorted(BROKEN))
def test_a_broken_kernel_trips_the_check(emulated_gpu, tiny_path, broken):
    kernels, layout, reach = BROKEN[broken]
    launches = emulated_gpu(kernels, layout)
    rows, embed = gpu_check.probe_rows(load_checkpoint(str(tiny_path)))
    in_reach = reach(rows, embed)

    # An explicit `cuda` refuses, with every number of the verdict.
    with pytest.raises(kime.CudaSelfCheckFailed) as info:
        _engine(tiny_path, device="cuda")
    err = info.value
    assert isinstance(err, kime.CudaUnavailable)
    check = err.check
    assert check is not None and not check.passed and check.failures
    assert all(d.failed for d in check.failures)
    stray = [d for d in check.failures if not in_reach(d)]
    assert not stray, stray  # only what the broken kernel reaches fails
    assert check.worst == check.failures[0]
    assert check.worst.describe("f16") in str(err)
    assert "cuda:0" in str(err) and "Emulated GPU" in str(err)
    again = pickle.loads(pickle.dumps(err))
    assert str(again) == str(err) and again.check == check

    # `auto` runs the probe again (nothing kept), warns once and opens on the CPU.
    _forget()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = kime.Kime(str(tiny_path), device="auto", answer_cache=0)
    ours = [w for w in caught if "self-check" in str(w.message)]
    assert len(ours) == 1 and issubclass(ours[0].category, RuntimeWarning)
    fresh = engine.gpu_check
    assert fresh is not None and not fresh.cached and fresh.failures == check.failures
    text = str(ours[0].message)
    assert fresh.worst is not None and fresh.worst.describe("f16") in text
    assert "Emulated GPU" in text and "runs on the CPU" in text
    assert engine.device.startswith("cpu") and engine.backend.precision is kime.Precision.F32
    # Nothing is answered from the GPU that failed: the CPU answers, no kernel launches.
    ran = len(launches)
    answer = engine.decide(REQUEST)
    assert len(launches) == ran and answer["urgent"].probabilities.shape == (2,)


@pytest.mark.slow
def test_a_broken_act_head_names_the_act_output(emulated_gpu, tiny_path):
    """Dropping the act head's hidden bias moves its probabilities by about 4e-3 on the tiny
    checkpoint: inside FP16's bound, far outside FP32's, and nothing else moves."""
    emulated_gpu(NoBiasActHead)
    with pytest.raises(kime.CudaSelfCheckFailed, match="act-head probabilities") as info:
        _engine(tiny_path, device="cuda:0", precision="f32")
    assert {d.output for d in info.value.check.failures} == {"act"}


def test_a_gpu_that_cannot_run_the_probe_fails_it(emulated_gpu, tiny_path):
    emulated_gpu(CrashingAttention)
    with pytest.raises(kime.CudaSelfCheckFailed, match="illegal memory access") as info:
        _engine(tiny_path, device="cuda")
    assert info.value.check.error.startswith("RuntimeError: emulated")
    assert _records() == []  # a run that raised is not a verdict to keep
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        engine = kime.Kime(str(tiny_path), device="auto", answer_cache=0)
    ours = [str(w.message) for w in caught if "self-check" in str(w.message)]
    assert len(ours) == 1 and "raised RuntimeError: emulated" in ours[0]
    assert engine.device.startswith("cpu") and engine.gpu_check is not None


@pytest.mark.slow
def test_laya_load_falls_back_and_counts_it(emulated_gpu, tiny_path):
    emulated_gpu(WrappedRope)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        agent = kime.load(str(tiny_path), device="cuda")
    assert sum("self-check" in str(w.message) for w in caught) == 1
    assert str(agent.device) == "cpu" and agent.cpu_fallback_count == 1
    assert agent.last_fallback_reason is not None
    assert agent.last_fallback_reason.startswith("FAILED") and "cuda:0" in (
        agent.last_fallback_reason)


# --- the verdict is kept ------------------------------------------------------------------------

@pytest.mark.slow
def test_a_verdict_is_kept_per_stack_and_checkpoint(emulated_gpu, tiny_path, tmp_path):
    import shutil

    from kime.synthetic import write_checkpoint

    emulated_gpu()
    first = _engine(tiny_path, device="cuda").gpu_check
    assert first is not None and first.passed and not first.cached and len(_records()) == 1
    again = _engine(tiny_path, device="cuda").gpu_check
    assert again is not None and again.cached and again.worst == first.worst
    assert len(_records()) == 1
    # Another precision is another verdict; so are other weights under the same path.
    f32 = _engine(tiny_path, device="cuda", precision="f32").gpu_check
    assert f32 is not None and not f32.cached and len(_records()) == 2
    copy = tmp_path / "copy"
    shutil.copytree(tiny_path, copy)  # the same checkpoint, file times and all
    kept = _engine(copy, device="cuda").gpu_check
    assert kept is not None and kept.cached and len(_records()) == 2
    write_checkpoint(copy, "tiny", seed=1)
    other = _engine(copy, device="cuda").gpu_check
    assert other is not None and not other.cached and len(_records()) == 3


@pytest.mark.slow
def test_a_kept_failure_refuses_without_probing_again(emulated_gpu, tiny_path):
    launches = emulated_gpu(SlotRope)
    with pytest.raises(kime.CudaSelfCheckFailed):
        _engine(tiny_path, device="cuda")
    # The same GPU and stack, now faithful: the kept verdict stands, no probe runs.
    launches = emulated_gpu()
    ran = len(launches)
    with pytest.raises(kime.CudaSelfCheckFailed) as info:
        _engine(tiny_path, device="cuda")
    assert info.value.check.cached and len(launches) == ran
    # A record that does not parse is not a verdict: the probe runs and passes.
    for name in _records():
        with open(os.path.join(gpu_check.records_dir(), name), "w") as f:
            f.write("{not json")
    check = _engine(tiny_path, device="cuda").gpu_check
    assert check is not None and check.passed and not check.cached and len(launches) > ran


@pytest.mark.slow
def test_the_switch_skips_the_check(emulated_gpu, tiny_path, monkeypatch):
    emulated_gpu(SlotRope)
    monkeypatch.setenv(gpu_check.ENV, "0")
    engine = _engine(tiny_path, device="cuda")
    assert engine.gpu_check is None and str(engine.backend.device) == "cuda:0"
    assert _records() == []
    monkeypatch.setenv(gpu_check.ENV, "1")
    with pytest.raises(kime.CudaSelfCheckFailed):
        _engine(tiny_path, device="cuda")


# --- kime doctor ------------------------------------------------------------------------------

def _doctor(capsys, *argv: str) -> str:
    assert cli.main(["doctor", *argv]) == 0
    return capsys.readouterr().out


def _line(out: str) -> Optional[str]:
    found = [ln for ln in out.splitlines() if ln.startswith("cuda self-check:")]
    return found[0] if found else None


@pytest.mark.slow
def test_doctor_shows_the_last_verdict(emulated_gpu, tiny_path, capsys, monkeypatch):
    emulated_gpu()
    line = _line(_doctor(capsys))
    assert line is not None and "on at every GPU load" in line and "no verdict kept" in line
    check = _engine(tiny_path, device="cuda", precision="f32").gpu_check
    assert check is not None
    line = _line(_doctor(capsys))
    assert line is not None and check.summary() in line and line.count("passed on cuda:0") == 1
    report = json.loads(_doctor(capsys, "--json"))["gpu"]["self_check"]
    assert report["last"] == check.summary() and report["enabled"] is True
    monkeypatch.setenv(gpu_check.ENV, "off")
    line = _line(_doctor(capsys))
    assert line is not None and "off (KIME_CUDA_SELFCHECK=0)" in line


# --- on a GPU ----------------------------------------------------------------------------------

@pytest.mark.parametrize("precision", ["f16", "f32"])
def test_the_self_check_passes_on_this_gpu(gpu, tiny_path, monkeypatch, tmp_path, precision):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    monkeypatch.delenv(gpu_check.ENV, raising=False)
    engine = _engine(tiny_path, device="cuda", precision=precision)
    check = engine.gpu_check
    assert check is not None and not check.cached
    assert check.passed, check.summary()
    print(check.summary())


# --- the verdict's arithmetic ----------------------------------------------------------------

def test_failures_against_the_cpu_come_before_bit_differences():
    found = [Deviation("logits", "a", "in a batch", 0.01, 0.05),
             Deviation("act", "b", BITS[0], 1e-7, 0.0),
             Deviation("act", "c", "alone", 0.02, 0.006),
             Deviation("logits", "d", "in a batch", 0.2, 0.05),
             Deviation("embedding", "e", "alone", float("nan"), 0.05)]
    worst, failures = gpu_check._verdict(found)
    assert [d.row for d in failures] == ["e", "d", "c", "b"]
    assert worst is failures[0] and "a" not in {d.row for d in failures}
    passing, none = gpu_check._verdict(found[:1] + [Deviation("act", "f", BITS[1], 0.0, 0.0)])
    assert none == () and passing is found[0]


def test_a_verdict_reads_back_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    bad = Deviation("embedding", "embedding row of 12 tokens", "alone", float("inf"), 0.05)
    check = gpu_check.GpuCheck(passed=False, device="cuda:0", gpu="X, sm_90", precision="f16",
                               checkpoint="/m", worst=bad, failures=(bad,), seconds=2.0,
                               cpu_seconds=1.5, checked_at=100.0, key={"gpu": "X"})
    path = os.path.join(gpu_check.records_dir(), "a.json")
    gpu_check._write(path, check)
    back = gpu_check._read(path, {"gpu": "X"})
    assert back is not None and back.cached and back.failures == check.failures
    assert gpu_check._read(path, {"gpu": "Y"}) is None
    assert gpu_check.last() == back
    assert "FAILED (1 output outside its bound)" in back.summary() and "inf" in back.summary()


@pytest.mark.parametrize("value,on", [("0", False), (" off", False), ("FALSE", False),
                                      ("no", False), ("1", True), ("", True), ("yes", True),
                                      ("O", True)])
def test_only_a_clear_no_switches_the_check_off(monkeypatch, value, on):
    monkeypatch.setenv(gpu_check.ENV, value)
    assert gpu_check.enabled() is on


def test_driver_versions_read_from_the_kernel_module_banner():
    text = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 "
            "UTC 2024\nGCC version:  gcc version 12.2.0")
    assert device.parse_driver_version(text) == "550.54.15"
    open_module = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.104.05  Release"
    assert device.parse_driver_version(open_module) == "535.104.05"
    assert device.parse_driver_version("no driver here") is None
