"""kime on a real local Ray cluster (a new one of 2 CPUs on loopback, no mocks):
`kime.ray.score` and `Scorer` equal in-process `predict` row for row (bad rows too), `kime
score --engine ray` writes what the local engine writes (JSONL and Parquet, resumed), `kime
calibrate --engine ray` fits what the local engine fits, and actors x threads never
oversubscribe the cluster."""
from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import kime  # noqa: E402
from ..ray_local import local_ray  # noqa: E402
import kime.ray as kray  # noqa: E402
from kime.errors import KimeError  # noqa: E402
from kime.jobs.calibrate import calibrate_job  # noqa: E402
from kime.jobs.job import score_job  # noqa: E402
from kime.jobs.options import EngineOptions  # noqa: E402
from kime.jobs.sink import read_output  # noqa: E402
from kime.jobs.source import JobInputError  # noqa: E402

# The test checkpoint ships odd temperatures on purpose (a RuntimeWarning at every load), and
# Ray Data warns about its own deprecated settings.
pytestmark = [pytest.mark.filterwarnings("ignore::RuntimeWarning", "ignore::DeprecationWarning"),
              pytest.mark.slow]  # slow: a Ray cluster, seconds per job

QUESTIONS = {
    "intent": {"type": "choice", "instructions": "What does the customer want?",
               "criteria": ["refund", "question", "complaint"]},
    "urgent": {"type": "noul", "instructions": "Is it urgent?"},
}
OWN = {"mood": {"type": "score", "instructions": "How upset?", "criteria": ["calm", "angry"]}}


@pytest.fixture(scope="module", autouse=True)
def cluster():
    with local_ray(num_cpus=2):  # its own, on loopback: never one already running here
        yield


@pytest.fixture(scope="module")
def agent(tiny_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return kime.load(str(tiny_path), threads=1)


def expected(agent, state, questions):
    try:
        return {"result": json.loads(json.dumps(agent.predict(state, questions))), "error": None}
    except KimeError as e:
        return {"result": None, "error": json.loads(json.dumps({"detail": str(e),
                                                                 "problems": e.problems}))}


def test_score_dataset_equals_predict(agent, tiny_path):
    states = ["ray row %d: refund my order" % i for i in range(40)]
    items = [{"id": i, "state": s, "questions": None} for i, s in enumerate(states)]
    items[3]["questions"] = json.dumps(OWN)
    items[4]["questions"] = json.dumps({"q": {"type": "choice", "instructions": "x",
                                              "criteria": []}})
    items[5]["state"] = "x\ud800y"  # a lone surrogate: predict refuses it
    ds = ray.data.from_items(items)
    out = kray.score(ds, str(tiny_path), QUESTIONS, batch_size=16).take_all()
    assert sorted(r["id"] for r in out) == list(range(40))
    for r in out:
        own = items[r["id"]]["questions"]
        want = expected(agent, items[r["id"]]["state"],
                        QUESTIONS if own is None else json.loads(own))
        got = {"result": json.loads(r["result"]) if r["result"] else None,
               "error": json.loads(r["error"]) if r["error"] else None}
        assert got == want, r["id"]
        assert r["state"] == items[r["id"]]["state"]  # the input's columns pass through


def _run(tmp_path: Path, name: str, src: Path, **kw) -> tuple:
    out, err = io.StringIO(), io.StringIO()
    dst = tmp_path / name
    resume = kw.pop("resume", False)
    opts = EngineOptions(batch_size=32, **kw)
    code = score_job(opts, QUESTIONS, str(src), str(dst), resume=resume, out=out, err=err)
    return code, out.getvalue(), dst


def test_cli_engine_ray_writes_what_local_writes(tmp_path, tiny_path):
    lines = [json.dumps({"id": "r%d" % i, "state": "ticket %d about a refund" % i})
             for i in range(150)]
    lines[7] = "not json"
    lines[9] = json.dumps({"id": "bad", "state": None})
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    code, said, local = _run(tmp_path, "local.jsonl", src, model=str(tiny_path), threads=1)
    assert code == 0
    code, said_ray, on_ray = _run(tmp_path, "ray.jsonl", src, model=str(tiny_path),
                                  engine="ray")
    assert code == 0, said_ray
    assert said_ray.startswith("scored 150 rows (2 errors) in ")

    def by_id(path):
        return {json.dumps(r["id"]): r for r in read_output(str(path))}

    assert by_id(on_ray) == by_id(local)

    # Resumed on Ray: drop the last 60 rows written and a torn line, then carry on.
    kept = on_ray.read_text(encoding="utf-8").splitlines(keepends=True)[:90]
    on_ray.write_text("".join(kept) + '{"id": "r1', encoding="utf-8")
    code, said, _ = _run(tmp_path, "ray.jsonl", src, model=str(tiny_path), engine="ray",
                         resume=True)
    assert code == 0 and said.startswith("scored 60 rows")
    assert by_id(on_ray) == by_id(local) and len(read_output(str(on_ray))) == 150


def test_cli_engine_ray_parquet(tmp_path, tiny_path, agent):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    states = ["parquet on ray %d" % i for i in range(50)]
    src = tmp_path / "in.parquet"
    pq.write_table(pa.table({"state": states}), src, row_group_size=20)
    code, said, dst = _run(tmp_path, "out.parquet", src, model=str(tiny_path), engine="ray",
                           actors=1, threads=2)
    assert code == 0, said
    rows = read_output(str(dst))
    assert sorted(int(r["id"]) for r in rows) == list(range(1, 51))  # row numbers, as text
    for r in rows[::7]:
        assert r["result"] == expected(agent, states[int(r["id"]) - 1], QUESTIONS)["result"]


def test_calibrate_on_ray_fits_what_local_fits(tmp_path, tiny_path, agent):
    rows = []
    for i in range(40):
        state = "label me %d" % i
        answer = agent.predict(state, QUESTIONS)["answers"]
        rows.append({"state": state, "expected": {"intent": answer["intent"]["choice"],
                                                  "urgent": i % 3 == 0}})
    src = tmp_path / "labeled.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    files = {}
    for engine in ("local", "ray"):
        files[engine] = tmp_path / ("%s.json" % engine)
        assert calibrate_job(EngineOptions(model=str(tiny_path), engine=engine, batch_size=16),
                             QUESTIONS, str(src), str(files[engine]), out=io.StringIO(),
                             err=io.StringIO()) == 0
    assert json.loads(files["ray"].read_text()) == json.loads(files["local"].read_text())


def test_actors_never_oversubscribe_the_cluster():
    assert kray.plan(None, 0) == (1, 2)
    assert kray.plan(2, 0) == (2, 1)
    assert kray.plan(None, 1) == (2, 1)
    for actors, threads in ((3, 1), (2, 2), (1, 3)):
        with pytest.raises(JobInputError, match="do not fit"):
            kray.plan(actors, threads)
