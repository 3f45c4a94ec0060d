"""The compiled CPU backend against the NumPy reference, its determinism, its plans and arenas,
and its packed-weight cache."""
from __future__ import annotations

import os
import random
import tracemalloc
import warnings
from pathlib import Path

import numpy as np
import pytest

import kime
from kime._cpu import _forward
from kime._cpu import packfile
from kime._cpu import weights as packed
from kime._cpu.backend import CpuBackend, ReferenceBackend, bf16_missing
from kime._cpu.weights import CpuSpec
from kime.backend import Device, Memory, Precision
from kime.batch import Batch
from kime.buckets import BUCKETS, pick_bucket
from kime.checkpoint import load_checkpoint
from kime.graph import ACT_HIDDEN

from ..golden_cases import DATA
from ..paths import GOLDENS
from ..tolerances import FP32, INT8

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team?",
             "criteria": {"billing": "money", "tech": "bugs", "sales": "deals", "other": ""}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "spam": {"type": "noul", "instructions": "Is it spam?"},
}
STATE = "My invoice is wrong and I was charged twice for the same order, please help. "


def _engine(path, backend="compiled", **kw) -> kime.Kime:
    old = os.environ.get("KIME_CPU_BACKEND")
    os.environ["KIME_CPU_BACKEND"] = backend
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return kime.Kime(str(path), device="cpu", **kw)
    finally:
        if old is None:
            del os.environ["KIME_CPU_BACKEND"]
        else:
            os.environ["KIME_CPU_BACKEND"] = old


@pytest.fixture(scope="module", params=sorted(DATA["checkpoints"]))
def pair(request):
    path = GOLDENS / DATA["checkpoints"][request.param]["path"]
    return _engine(path, threads=2), _engine(path, backend="reference", threads=1)


def _requests(seed: int, n: int = 12):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        state = rng.choice([STATE * rng.randint(1, 12),
                            {"ticket": rng.randint(0, 99), "body": STATE},
                            ["hello", STATE * rng.randint(1, 5)], "", "x"])
        qs = dict(rng.sample(sorted(QUESTIONS.items()), rng.randint(1, 3)))
        out.append({"state": state, "questions": qs})
    return out


def test_compiled_matches_reference(pair):
    compiled, reference = pair
    worst_logit = worst_prob = 0.0
    for req in _requests(0):
        a, b = compiled.decide(req, cache=False), reference.decide(req, cache=False)
        for qid in req["questions"]:
            worst_logit = max(worst_logit, float(np.abs(a[qid].logits - b[qid].logits).max()))
            worst_prob = max(worst_prob,
                             float(np.abs(a[qid].probabilities - b[qid].probabilities).max()))
            assert abs(a[qid].act_probability - b[qid].act_probability) <= FP32.probs.atol
    assert worst_logit <= FP32.logits.atol and worst_prob <= FP32.probs.atol, \
        (worst_logit, worst_prob)


def test_bits_identical_across_threads_and_batches(pair, tmp_path):
    compiled = pair[0]
    one = _engine(compiled.checkpoint.path, threads=1)
    reqs = _requests(1, 16)
    alone = [one.decide(r, cache=False) for r in reqs]
    rng = random.Random(2)
    for _ in range(3):
        order = list(range(len(reqs)))
        rng.shuffle(order)
        together = compiled.decide_batch([reqs[i] for i in order], cache=False)
        for i, response in zip(order, together):
            for qid in reqs[i]["questions"]:
                assert response[qid].logits.tobytes() == alone[i][qid].logits.tobytes()
                assert response[qid].act.tobytes() == alone[i][qid].act.tobytes()


def test_warm_plan_allocates_nothing(pair):
    compiled = pair[0]
    backend = compiled.backend
    rows = compiled.rows_for({"state": STATE * 4, "questions": QUESTIONS})
    batch = Batch.pack([r.ids for r in rows], [r.markers for r in rows], [0, 1, 2])
    backend.prepare(batch.tokens)
    plan = backend.plans[pick_bucket(batch.tokens)]
    plan.run(batch)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        plan.run(batch)
        _, peak = tracemalloc.get_traced_memory()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # A few small Python objects (slice views) come and go; no array of activations does.
    activations = batch.tokens * compiled.checkpoint.hidden * 4
    assert peak < min(16384, activations // 4), peak
    grown = sum(s.size_diff for s in after.compare_to(before, "filename") if s.size_diff > 0)
    assert grown < 4096, grown


def test_preload_builds_small_buckets_and_memory_reports_them(tmp_path):
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    cold = _engine(path, threads=1)
    assert cold.memory().plans == 0 and cold.memory().weights > 0
    warm = _engine(path, threads=1, preload=True)
    assert warm.memory().plans > 0
    warm.decide({"state": STATE, "questions": QUESTIONS})
    assert warm.memory().plans >= cold.memory().plans


def test_packed_cache_is_reused_and_a_corrupt_one_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    first = _engine(path, threads=1)
    assert first.backend.weights_from == "packed"
    second = _engine(path, threads=1)
    assert second.backend.weights_from == "cache"
    want = first.decide({"state": STATE, "questions": QUESTIONS})
    got = second.decide({"state": STATE, "questions": QUESTIONS})
    for qid in QUESTIONS:
        assert want[qid].logits.tobytes() == got[qid].logits.tobytes()
    files = list(Path(packed.cache_dir()).glob("*.kpack"))
    assert len(files) == 1
    # Overwrite a stretch of the data: detected, rebuilt, same answers.
    with open(files[0], "r+b") as f:
        f.seek(packfile.HEADER_ROOM + 100)
        f.write(os.urandom(8192))
    third = _engine(path, threads=1)
    assert third.backend.weights_from == "packed"
    again = third.decide({"state": STATE, "questions": QUESTIONS})
    for qid in QUESTIONS:
        assert want[qid].logits.tobytes() == again[qid].logits.tobytes()
    # Truncated: detected too.
    with open(files[0], "r+b") as f:
        f.truncate(packfile.HEADER_ROOM + 10)
    assert _engine(path, threads=1).backend.weights_from == "packed"


def _mapping(path: str) -> dict:
    """This process's mapping of `path` in /proc/self/smaps: its sizes in kB, its VmFlags."""
    fields: dict = {}
    current = False
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()
            if "-" in head[0] and not head[0].endswith(":"):  # a mapping's first line
                current = head[-1] == path
            elif current and head[0] == "VmFlags:":
                fields["VmFlags"] = head[1:]
            elif current and line.rstrip().endswith(" kB"):
                fields[head[0].rstrip(":")] = fields.get(head[0].rstrip(":"), 0) + int(head[1])
    return fields


def _files_map_in_2mib_pages(directory: Path) -> bool:
    """Whether this kernel and file system map a file's pages 2 MiB at a time when asked
    (transparent huge pages on, large folios in the page cache): an 8 MiB file, dropped from
    the page cache, then mapped with the advice and read."""
    import mmap

    probe = directory / "probe"
    with open(probe, "wb") as f:
        f.write(os.urandom(8 << 20))
        f.flush()
        os.fsync(f.fileno())  # the page cache drops clean pages only
    with open(probe, "rb") as f:
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        mm.madvise(mmap.MADV_HUGEPAGE)
    except OSError:
        return False
    sum(mm[i] for i in range(0, len(mm), 4096))
    pmd = _mapping(str(probe)).get("FilePmdMapped", 0)
    mm.close()
    return pmd > 0


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps") or not hasattr(os, "posix_fadvise"),
                    reason="reads Linux's /proc/self/smaps")
def test_packed_weights_are_mapped_in_2mib_pages(tmp_path, monkeypatch):
    """Every forward pass streams the packed weights, and behind 4 KiB pages base W1 ran 6-9%
    slower. A blob is mapped with 2 MiB pages asked for, and one just written is dropped from
    the page cache and read back under that advice, so that, packed now or mapped from the
    cache, the file's whole 2 MiB lie in 2 MiB pages of the mapping. Where the kernel finds no
    free 2 MiB block for one of them (a fragmented machine: a CI run beside other builds mapped
    2 of a blob's 3), it falls back to small pages for that one, so at least one is asked of
    each mapping, as of the probe."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    huge = _files_map_in_2mib_pages(tmp_path)
    for source in ("packed", "cache"):
        engine = _engine(path, threads=1)
        assert engine.backend.weights_from == source
        mapped = _mapping(engine.backend.weights_file)
        assert "hg" in mapped["VmFlags"], mapped
        assert mapped["Size"] >= 3 * 2048  # three whole 2 MiB pages at least
        if huge:
            assert mapped["FilePmdMapped"] >= 2048, mapped
        engine.close()
    if not huge:
        pytest.skip("this kernel or file system maps no file 2 MiB at a time; checked the "
                    "advice only")


def test_the_backends_state_what_they_run(tmp_path, monkeypatch):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(GOLDENS / DATA["checkpoints"]["tiny"]["path"]))
    f32 = CpuBackend(ck, 1)
    assert (f32.device, f32.precision, f32.threads) == (Device("cpu"), Precision.F32, 1)
    assert f32.max_batch_tokens == BUCKETS[-1] and f32.kernels in f32.describe()
    assert f32.weights_from == "packed" and f32.weights_file is not None
    assert Path(f32.weights_file).parent == Path(packed.cache_dir())
    assert CpuBackend(ck, 1, use_cache=False).weights_file is None
    int8 = CpuBackend(ck, 1, precision=Precision.INT8)
    assert int8.precision is Precision.INT8 and int8.spec.int8 and "INT8" in int8.describe()
    assert int8.weights_file != f32.weights_file
    with pytest.raises(kime.Unsupported, match="f16"):
        CpuBackend(ck, 1, precision=Precision.F16)
    ref = ReferenceBackend(ck, 1)
    assert (ref.kernels, ref.weights_from, ref.weights_file) == ("numpy", "checkpoint", None)
    assert ref.max_batch_tokens == BUCKETS[-1]


def test_the_compiled_act_head_is_the_graphs():
    from kime._cpu import _forward

    assert _forward.ACT_HIDDEN == ACT_HIDDEN


@pytest.mark.parametrize("kind", ["compiled", "reference"])
def test_close_frees_weights_and_plans(kind):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(GOLDENS / DATA["checkpoints"]["tiny"]["path"]))
    backend = CpuBackend(ck, 1, use_cache=False) if kind == "compiled" else ReferenceBackend(ck, 1)
    batch = Batch.pack([[1, 7, 9, 2, 4]], [[1, 3]], [0])
    backend.prepare(batch.tokens)
    backend.run(batch)
    assert backend.memory().weights > 0
    backend.close()
    assert backend.memory() == Memory(weights=0, plans=0)
    with pytest.raises(kime.BackendError, match="closed"):
        backend.run(batch)
    backend.close()  # closing twice is fine


def test_cache_key_follows_the_checkpoint(tmp_path, tiny_path):
    import shutil

    a = shutil.copytree(tiny_path, tmp_path / "a")
    before = packed.fingerprint(str(a))
    cfg = (a / "rl_agent_config.json").read_text()
    (a / "rl_agent_config.json").write_text(cfg.replace('"head_max_len"', '"head_max_len" '))
    assert packed.fingerprint(str(a)) != before


@pytest.mark.parametrize("isa", ["portable", "avx2", "avx512"])
def test_every_isa_path_matches_the_reference(isa, tmp_path):
    """The ISA is chosen once per process, so each path runs in a subprocess of its own."""
    import json
    import subprocess
    import sys

    from kime._cpu import _forward

    names = {0: "portable", 1: "avx2", 2: "avx512"}
    if ["portable", "avx2", "avx512"].index(isa) > _forward.isa_detect():
        pytest.skip("this CPU has no %s; the path is tested where it has" % isa)
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    reqs = _requests(5, 6)
    script = (
        "import json, sys, warnings\n"
        "warnings.simplefilter('ignore')\n"
        "import kime\n"
        "e = kime.Kime(sys.argv[1], device='cpu', threads=2)\n"
        "print(json.dumps([e.device] + [{q: a.logits.tolist()"
        " for q, a in e.decide(r).answers.items()} for r in json.loads(sys.argv[2])]))\n")
    env = dict(os.environ, KIME_ISA=isa, KIME_CACHE=str(tmp_path / "cache"))
    out = subprocess.run([sys.executable, "-c", script, str(path), json.dumps(reqs)], env=env,
                         capture_output=True, text=True, check=True).stdout
    device, *answers = json.loads(out)
    assert names[["portable", "avx2", "avx512"].index(isa)] in device
    reference = _engine(path, backend="reference", threads=1)
    for req, got in zip(reqs, answers):
        want = reference.decide(req)
        for qid, logits in got.items():
            np.testing.assert_allclose(logits, want[qid].logits, **FP32.logits.kw)


@pytest.mark.slow  # every golden case through two backends
def test_golden_rows_compiled_against_reference(pair):
    """Every golden case's rows through both backends (the rows Laya itself recorded)."""
    from ..golden_cases import CASES, case_rows

    compiled, reference = pair
    name = [n for n, i in DATA["checkpoints"].items()
            if GOLDENS / i["path"] == Path(compiled.checkpoint.path)][0]
    agent = kime.Agent(compiled)
    for case in CASES:
        if case["error"] or case["checkpoint"] != name:
            continue
        rows = case_rows(agent, case)
        if not rows:
            continue
        qtypes = [kime.render.QTYPES[qt] for _, qt in rows]
        got = compiled.run_rows([r for r, _ in rows], qtypes, cache=False)
        want = reference.run_rows([r for r, _ in rows], qtypes, cache=False)
        for (gl, ga), (wl, wa) in zip(got, want):
            np.testing.assert_allclose(gl, wl, **FP32.logits.kw, err_msg=case["id"])
            np.testing.assert_allclose(ga, wa, **FP32.probs.kw, err_msg=case["id"])


def test_int8_is_close_to_fp32_and_deterministic(tmp_path, monkeypatch):
    """INT8 GEMMs in the encoder and decision head: further from Laya than FP32 by design,
    but close, and the same bits at any thread count and in any batch."""
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    f32 = _engine(path, threads=2, precision="f32")
    int8 = _engine(path, threads=2, precision="int8")
    assert "INT8" in int8.device
    reqs = _requests(7, 24)
    agree = total = 0
    worst = 0.0
    for req in reqs:
        a, b = f32.decide(req, cache=False), int8.decide(req, cache=False)
        for qid in req["questions"]:
            total += 1
            agree += int(np.argmax(a[qid].probabilities) == np.argmax(b[qid].probabilities))
            worst = max(worst, float(np.abs(a[qid].probabilities - b[qid].probabilities).max()))
            assert a[qid].logits.tobytes() != b[qid].logits.tobytes()  # it really is INT8
    assert agree / total >= INT8.argmax_agreement and worst <= INT8.probs.atol, \
        (agree, total, worst)
    one = _engine(path, threads=1, precision="int8")
    together = int8.decide_batch(reqs[::-1], cache=False)[::-1]
    for req, got in zip(reqs, together):
        alone = one.decide(req, cache=False)
        for qid in req["questions"]:
            assert got[qid].logits.tobytes() == alone[qid].logits.tobytes()
    # The two precisions are cached side by side, each under its own key.
    names = sorted(p.name for p in Path(packed.cache_dir()).glob("*.kpack"))
    assert len(names) == 2
    assert any("-int8-" in n for n in names) and any("-f32-" in n for n in names)


@pytest.mark.parametrize("precision", ["f32", "int8", "bf16"])
@pytest.mark.parametrize("threads", [2, 3])
def test_long_batches_run_in_row_chunks_with_each_rows_own_bits(precision, threads, tmp_path,
                                                                 monkeypatch):
    """A batch long enough runs each encoder layer's row-local steps in chunks of rows, each
    chunk's GEMMs on one thread (forward.c's fused layer); every row keeps the bits it has alone
    on one thread, where the layer runs step by step, and the batch does run fused."""
    if precision == "bf16" and bf16_missing():
        pytest.skip(bf16_missing())
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    many = _engine(path, threads=threads, precision=precision)
    one = _engine(path, threads=1, precision=precision)
    reqs = [{"state": STATE * (3 + i % 4) + str(i), "questions": QUESTIONS} for i in range(12)]
    seen: list[tuple[int, bool]] = []
    run = type(many.backend).run

    def spy(self, batch):  # records what the real backend ran
        seen.append((batch.tokens, _forward.fused_layer(batch.tokens, self.threads)))
        return run(self, batch)

    with monkeypatch.context() as patch:
        patch.setattr(type(many.backend), "run", spy)
        together = many.decide_batch(reqs, cache=False)
    assert any(fused for _, fused in seen), seen
    alone = [one.decide(r, cache=False) for r in reqs]
    for req, got, want in zip(reqs, together, alone):
        for qid in req["questions"]:
            assert got[qid].logits.tobytes() == want[qid].logits.tobytes(), qid
            assert got[qid].act.tobytes() == want[qid].act.tobytes(), qid


def test_an_arena_for_fewer_threads_than_the_model_is_refused(tiny_path):
    """Every thread of a forward pass writes its own share of the arena's scratch, so a model
    on 2 threads refuses a 1-thread arena (decision and embedding alike) instead of overrunning
    it, and runs on its own."""
    from kime._cpu import _gemm

    ck = load_checkpoint(str(tiny_path))
    isa = _forward.isa_detect()
    spec = CpuSpec.of(ck.graph, None, False, ()).as_dict()
    arrays = packed.load_packed(ck, isa, _forward.isa_name(isa), _gemm.pack,
                                use_cache=False).arrays
    model = _forward.Model(arrays, spec, isa, 2)
    small, right = _forward.Arena(spec, isa, 1, 512), _forward.Arena(spec, isa, 2, 512)
    assert (small.threads, right.threads) == (1, 2)
    ids = np.full(40, 5, dtype=np.int32)
    cu = np.array([0, 40], dtype=np.int32)
    for arena, refused in ((small, True), (right, False)):
        calls = [lambda: model.run(arena, ids, cu, 1, np.array([1], np.int32),
                                   np.array([0, 1], np.int32), np.zeros(1, np.int32),
                                   np.zeros(1, np.float32), np.zeros((1, model.n_act), np.float32)),
                 lambda: model.embed(arena, ids, cu, 1, np.zeros((1, model.d), np.float32))]
        for call in calls:
            if refused:
                with pytest.raises(ValueError, match="scratch for 1 threads; this model runs 2"):
                    call()
            else:
                call()


def test_int8_is_refused_on_the_reference(tmp_path):
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    with pytest.raises(kime.Unsupported, match="int8"):
        _engine(path, backend="reference", precision="int8")


def test_int8_kernels_are_pinned_at_load(tmp_path, monkeypatch):
    """A loaded INT8 model keeps the kernel set its weights were packed for, even when
    KIME_QGEMM changes afterwards (a different set would read the packed bytes wrongly)."""
    from kime._cpu import _qgemm

    names = {_qgemm.impl_name()}
    monkeypatch.setenv("KIME_QGEMM", "avx2")
    names.add(_qgemm.impl_name())
    if len(names) < 2:
        pytest.skip("this CPU runs a single INT8 kernel set (%s)" % names.pop())
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    path = GOLDENS / DATA["checkpoints"]["tiny"]["path"]
    eng = _engine(path, threads=1, precision="int8")
    assert "avx2 INT8" in eng.device
    req = _requests(11, 1)[0]
    before = eng.decide(req, cache=False)
    monkeypatch.delenv("KIME_QGEMM")
    after = eng.decide(req, cache=False)
    fresh = _engine(path, threads=1, precision="int8")
    assert "avx2" not in fresh.device
    for qid in req["questions"]:
        assert after[qid].logits.tobytes() == before[qid].logits.tobytes()
    # Each kernel set has its own cache file.
    assert len(list(Path(packed.cache_dir()).glob("*-int8-*.kpack"))) == 2


@pytest.mark.parametrize("precision", ["f32", "int8"])
def test_last_head_layer_on_kept_rows_gives_the_full_layer_bits(precision):
    """The decision head's last layer runs on each row's first token and markers only. A batch
    whose kept rows would overflow its arena runs that layer on every token instead; both ways
    must give the same bits (each row alone takes the short way)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(GOLDENS / DATA["checkpoints"]["tiny"]["path"]))
    backend = CpuBackend(ck, 2, precision=precision, use_cache=False)
    rng = np.random.default_rng(7)
    rows = [rng.integers(5, 1000, size=128).tolist() for _ in range(2)]
    marks = [list(range(128)), list(range(127, -1, -1))]  # 2 + 256 kept rows > the 256 bucket
    both = backend.run(Batch.pack(rows, marks, [0, 2]))
    both = (both.logits.copy(), both.act.copy())
    assert backend.plans.keys() == {256}
    for r in range(2):
        alone = backend.run(Batch.pack([rows[r]], [marks[r]], [[0, 2][r]]))
        np.testing.assert_array_equal(alone.logits, both[0][128 * r:128 * (r + 1)])
        np.testing.assert_array_equal(alone.act, both[1][r:r + 1])
    backend.close()


def test_memory_reads_the_plans_while_a_run_adds_one():
    """Issue 53: `memory()` summed the plans without the lock while the scheduler's thread
    added one, so a /metrics scrape could raise "dictionary changed size during iteration".
    The thread switch interval is made tiny so the reader is interrupted mid-sum."""
    import sys
    import threading

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        ck = load_checkpoint(str(GOLDENS / DATA["checkpoints"]["tiny"]["path"]))
    errors: list = []
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for _ in range(60):
            backend = CpuBackend(ck, 1)
            stop = threading.Event()

            def read() -> None:
                while not stop.is_set():
                    try:
                        backend.memory()
                    except RuntimeError as e:
                        errors.append(e)
                        return

            reader = threading.Thread(target=read)
            reader.start()
            for tokens in BUCKETS:
                backend.prepare(tokens)
            stop.set()
            reader.join(10)
            assert backend.memory().plans == sum(p.nbytes for p in backend.plans.values())
            if errors:
                break
    finally:
        sys.setswitchinterval(interval)
    assert not errors, errors[0]


def test_every_forward_return_code_is_a_clear_error():
    """Issue 53: the codes went through a dict lookup, so a code it did not list surfaced as a
    bare `KeyError: -5` instead of the forward pass's failure."""
    from kime._cpu import _forward

    _forward.check_rc(0)
    for rc, text in _forward.FORWARD_ERRORS.items():
        with pytest.raises(ValueError, match="^%s$" % text):
            _forward.check_rc(rc)
    with pytest.raises(ValueError, match="failed with code -99, which this build does not know"):
        _forward.check_rc(-99)
