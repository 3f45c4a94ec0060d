"""`kime score` on one machine: every output row equals in-process `predict` (bad rows too),
JSONL and Parquet in and out, resume (torn lines, ids already written), and crash safety
against a real SIGKILL and SIGTERM of a running `kime score`."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kime
from kime.errors import KimeError
from kime.jobs.score import RowScorer
from kime.jobs.sink import read_output
from kime.jobs.source import row_from_object

ROOT = Path(os.path.abspath(kime.__file__)).parents[1]
QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": ["refund", "question", "complaint"]},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
    "mood": {"type": "score", "instructions": "How upset?", "criteria": ["calm", "upset", "angry"]},
}
OWN = {"topic": {"type": "choice", "instructions": "Topic?", "criteria": {"billing": "money",
                                                                          "shipping": None}}}
CLOSING = re.compile(r"^scored (\d+) rows \((\d+) errors\) in \d+\.\d+ s: \d+\.\d+ rows/s$")


@pytest.fixture(scope="module")
def agent(tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(str(tiny_path), threads=1)


def expected(agent, state: Any, questions: Any) -> Dict[str, Any]:
    """What a row must hold: predict's result, or the error predict raises, through JSON."""
    try:
        return {"result": json.loads(json.dumps(agent.predict(state, questions)))}
    except KimeError as e:
        return {"error": json.loads(json.dumps({"detail": str(e), "problems": e.problems}))}


def kime_cli(*args: str, **kw: Any) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kime.cli", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, **kw)


def write_jsonl(path: Path, lines: List[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


MIXED = [
    json.dumps({"id": "a", "state": "my parcel never arrived, refund me"}),
    json.dumps({"state": "no id: this row is written under its line number"}),
    "",
    "this line is not JSON",
    json.dumps({"id": 7, "state": {"ticket": {"subject": "late", "body": "where is it"}}}),
    json.dumps({"id": "b", "state": None}),
    json.dumps({"id": "c", "state": "own questions", "questions": OWN}),
    json.dumps({"id": "d", "state": "broken questions", "questions": {"q": {"type": "nope"}}}),
    json.dumps({"id": [1], "state": "an id that is a list"}),
    json.dumps({"id": "e", "state": [{"role": "user", "content": "hi"},
                                     {"role": "agent", "content": "hello"}]}),
    json.dumps({"id": "f", "state": "no questions at all", "questions": {}}),
    json.dumps(["not", "an", "object"]),
    json.dumps({"id": "g", "state": "x " * 400}),
]


def check_rows(agent, rows: List[Dict[str, Any]], lines: List[str]) -> None:
    """Each output row against what predict gives for its input line."""
    by_id = {r["id"]: r for r in rows}
    assert len(by_id) == len(rows) == sum(1 for line in lines if line.strip())
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            assert by_id[n]["error"]["problems"][0]["type"] == "value_error.json"
            continue
        if not isinstance(obj, dict):
            assert by_id[n]["error"]["problems"][0]["type"] == "type_error.dict"
            continue
        rid = obj.get("id", n)
        if not isinstance(rid, (str, int)):
            assert by_id[n]["error"]["problems"][0]["loc"] == ["id"]
            continue
        own = obj.get("questions")
        want = expected(agent, obj.get("state"), QUESTIONS if own is None else own)
        got = {k: v for k, v in by_id[rid].items() if k != "id"}
        assert got == want, "row %r" % rid


@pytest.mark.slow  # a kime score subprocess
def test_rows_equal_predict_including_bad_rows(tmp_path, tiny_path, agent):
    src = write_jsonl(tmp_path / "in.jsonl", MIXED)
    out = tmp_path / "out.jsonl"
    done = kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)),
                    "-i", str(src), "-o", str(out), "--batch-size", "4")
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    m = CLOSING.match(last)
    assert m, last
    rows = read_output(str(out))
    assert int(m.group(1)) == len(rows)
    assert int(m.group(2)) == sum("error" in r for r in rows)
    check_rows(agent, rows, MIXED)
    assert rows[0]["id"] == "a" and rows[1]["id"] == 2  # line numbers count blank lines too


def write_questions(tmp_path: Path) -> Path:
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(QUESTIONS), encoding="utf-8")
    return path


@pytest.mark.slow  # kime score subprocesses over Parquet
def test_parquet_in_and_out(tmp_path, tiny_path, agent):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    states = ["parquet row %d about a late parcel" % i for i in range(30)]
    questions = [None] * 30
    questions[3] = json.dumps(OWN)
    ids = list(range(100, 130))
    table = pa.table({"id": pa.array(ids, type=pa.int64()), "state": states,
                      "questions": questions, "other": list(range(30))})
    src = tmp_path / "in.parquet"
    pq.write_table(table, src, row_group_size=8)
    out = tmp_path / "out.parquet"
    done = kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)),
                    "-i", str(src), "-o", str(out), "--batch-size", "7")
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in out.iterdir()) == ["part-%06d.parquet" % i for i in range(5)]
    back = pq.read_table(out)  # the directory reads as one table
    assert back.schema.field("id").type == pa.int64()
    rows = read_output(str(out))
    assert [r["id"] for r in rows] == ids
    for i, r in enumerate(rows):
        want = expected(agent, states[i], OWN if i == 3 else QUESTIONS)
        assert {k: v for k, v in r.items() if k != "id"} == want

    # Parquet in, JSONL out; and JSONL in, Parquet out (ids as text there).
    jl = tmp_path / "out.jsonl"
    assert kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)), "-i",
                    str(src), "-o", str(jl)).returncode == 0
    assert read_output(str(jl)) == rows
    src_jl = write_jsonl(tmp_path / "in.jsonl", MIXED)
    out2 = tmp_path / "mixed.parquet"
    assert kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)), "-i",
                    str(src_jl), "-o", str(out2)).returncode == 0
    assert pq.read_table(out2).schema.field("id").type == pa.string()
    assert sorted(r["id"] for r in read_output(str(out2))) == \
        sorted(["a", "2", "4", "7", "b", "c", "d", "9", "e", "f", "12", "g"])


def test_refuses_existing_output_and_bad_questions(tmp_path, tiny_path):
    src = write_jsonl(tmp_path / "in.jsonl", MIXED[:2])
    out = tmp_path / "out.jsonl"
    out.write_text('{"id": "a", "result": {}}\n')
    done = kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)), "-i",
                    str(src), "-o", str(out))
    assert done.returncode == 2 and "--resume" in done.stderr
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"q": {"type": "choice", "instructions": "x", "criteria": []}}))
    done = kime_cli("score", "-m", str(tiny_path), "-q", str(bad), "-i", str(src), "-o",
                    str(tmp_path / "new.jsonl"))
    assert done.returncode == 2 and "at least one criterion" in done.stderr
    assert not (tmp_path / "new.jsonl").exists() or not (tmp_path / "new.jsonl").read_text()


def test_resume_cuts_a_torn_line_and_skips_written_ids(tmp_path, tiny_path, agent):
    lines = [json.dumps({"id": "r%d" % i, "state": "resume row %d" % i}) for i in range(20)]
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    first = [json.dumps({"id": "r%d" % i, "result": {"stale": True}}) for i in (0, 1, 5)]
    out.write_text("\n".join(first) + '\n{"id": "r2", "resu', encoding="utf-8")
    done = kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)), "-i",
                    str(src), "-o", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    assert "3 rows already there" in done.stderr
    assert CLOSING.match(done.stdout.strip().splitlines()[-1]).group(1) == "17"
    rows = read_output(str(out))
    assert sorted(r["id"] for r in rows) == sorted("r%d" % i for i in range(20))
    for r in rows:
        if r["id"] in ("r0", "r1", "r5"):
            assert r["result"] == {"stale": True}  # kept, not scored again
        else:
            assert {"result": r["result"]} == expected(agent, "resume row %s" % r["id"][1:],
                                                       QUESTIONS)


def _start(tmp_path: Path, tiny_path: Path, src: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "kime.cli", "score", "-m", str(tiny_path),
                             "-q", str(write_questions(tmp_path)), "-i", str(src), "-o",
                             str(out), "--batch-size", "8", "--threads-per-actor", "1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_lines(out: Path, n: int, proc: subprocess.Popen, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if out.exists() and out.read_bytes().count(b"\n") >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("no progress in %s" % out)


@pytest.mark.slow  # kills a kime score subprocess and runs it again
@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_killed_run_resumes_with_every_id_once(tmp_path, tiny_path, agent, how):
    """A real signal to a running `kime score`: SIGKILL loses at most the chunks in flight,
    SIGTERM finishes them and exits 143 with the closing line; either way `--resume` ends with
    every id exactly once, each equal to predict."""
    n = 400
    lines = [json.dumps({"id": i, "state": "row %d: where is my order" % i}) for i in range(n)]
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    out = tmp_path / "out.jsonl"
    proc = _start(tmp_path, tiny_path, src, out)
    _wait_for_lines(out, 40, proc)
    proc.send_signal(getattr(signal, how))
    stdout, stderr = proc.communicate(timeout=60)
    written = out.read_bytes()
    if how == "SIGKILL":
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 128 + signal.SIGTERM, stderr
        assert CLOSING.match(stdout.strip().splitlines()[-1])
        assert "--resume" in stderr
        assert written.endswith(b"\n")  # stopped between chunks
    partial = written.count(b"\n")
    assert 40 <= partial < n
    done = kime_cli("score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)), "-i",
                    str(src), "-o", str(out), "--resume")
    assert done.returncode == 0, done.stderr
    rows = read_output(str(out))
    assert sorted(r["id"] for r in rows) == list(range(n))
    for r in rows[::37]:
        assert {"result": r["result"]} == expected(agent, "row %d: where is my order" % r["id"],
                                                   QUESTIONS)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.fixed_dictionaries({}, optional={
    "id": st.one_of(st.text(max_size=5), st.integers(-5, 5), st.none(), st.floats(), st.lists(
        st.integers(), max_size=2)),
    "state": st.one_of(st.text(max_size=40), st.none(), st.integers(), st.lists(
        st.fixed_dictionaries({"role": st.sampled_from(["user", "agent"]),
                               "content": st.text(max_size=20)}), max_size=3),
        st.dictionaries(st.text(max_size=5), st.text(max_size=10), max_size=3)),
    "questions": st.one_of(st.none(), st.just(OWN), st.just({}), st.just("text"),
                           st.just({"q": {"type": "noul"}}))}), min_size=1, max_size=6))
def test_any_rows_score_as_predict_does(agent, rows):
    """Property: whatever rows arrive, scoring never raises and each output is predict's
    result or predict's error, under the row's id."""
    scorer = RowScorer(agent, QUESTIONS)
    inputs = [row_from_object(obj, i + 1) for i, obj in enumerate(rows)]
    scored = scorer.score(inputs)
    assert len(scored) == len(rows)
    for obj, row, out in zip(rows, inputs, scored):
        assert out.id == row.id
        if row.problems:
            assert out.error is not None
            continue
        got = {"result": json.loads(out.result)} if out.error is None else \
            {"error": json.loads(out.error)}
        qs = obj.get("questions")
        assert got == expected(agent, obj.get("state"), QUESTIONS if qs is None else qs)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.one_of(st.just(""), st.just("not json"),
                                st.builds(lambda s: json.dumps({"state": s}),
                                          st.text(max_size=30))), max_size=40),
       target=st.integers(1, 200), trailing_newline=st.booleans())
def test_ray_splits_read_the_same_rows_as_one_pass(tmp_path, lines, target, trailing_newline):
    """Property: however a JSONL file is cut for Ray's readers, the splits together give every
    row once, with the line number it has in a single pass."""
    from kime.jobs.source import Source, read_split

    path = tmp_path / "split.jsonl"
    path.write_text("\n".join(lines) + ("\n" if trailing_newline and lines else ""),
                    encoding="utf-8")
    source = Source(str(path))
    whole = [(r.row, r.id, r.state, r.problems is None) for r in source.rows()]
    pieces = [(r.row, r.id, r.state, r.problems is None)
              for s in source.splits(target) for r in read_split(s)]
    assert pieces == whole


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 96 KiB tmpfs (root only), grown by `grow()`; unmounted after the test."""
    point = tmp_path / "disk"
    point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=96k", "tmpfs", str(point)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root): %s" % done.stderr.strip())

    def grow() -> None:
        subprocess.run(["mount", "-o", "remount,size=8m", str(point)], check=True)

    yield point, grow
    subprocess.run(["umount", "-l", str(point)], capture_output=True)


@pytest.mark.slow  # two kime score subprocesses
@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_a_full_disk_stops_the_run_clearly_and_resume_loses_and_doubles_nothing(
        tmp_path, tiny_path, agent, small_disk, kind):
    """Issue 53: the disk fills while `kime score` writes. The run stops with a clear error
    naming the output (it printed a bare `OSError: [Errno 28]`), the chunk that failed is taken
    back, and once there is room `--resume` ends with every id exactly once, each equal to
    predict."""
    if kind == "parquet":
        pytest.importorskip("pyarrow.parquet")
    disk, grow = small_disk
    n = 600
    lines = [json.dumps({"id": i, "state": "row %d: my order is late" % i}) for i in range(n)]
    src = write_jsonl(tmp_path / "in.jsonl", lines)
    out = disk / ("out." + kind)
    args = ["score", "-m", str(tiny_path), "-q", str(write_questions(tmp_path)), "-i", str(src),
            "-o", str(out), "--batch-size", "16", "--threads-per-actor", "1"]
    full = kime_cli(*args)
    assert full.returncode == 1, full.stderr
    last = full.stderr.strip().splitlines()[-1]
    assert last.startswith("kime: error: cannot write output %s: " % out), full.stderr
    assert "No space left on device" in last and "--resume" in last, full.stderr
    if kind == "jsonl":
        assert out.read_bytes().endswith(b"\n")  # whole chunks only
    written = len(read_output(str(out)))
    assert 0 < written < n and written % 16 == 0
    grow()
    done = kime_cli(*args, "--resume")
    assert done.returncode == 0, done.stderr
    rows = read_output(str(out))
    assert sorted(int(r["id"]) for r in rows) == list(range(n))  # Parquet keeps JSONL's as text
    for r in rows[::41]:
        assert {"result": r["result"]} == expected(
            agent, "row %d: my order is late" % int(r["id"]), QUESTIONS)
