"""The output of `kime score`: rows written append-only in completed chunks, and resumed.

A JSONL output is one file; every chunk is appended in one write, flushed and fsynced before
the next begins, so a crash at any moment leaves whole chunks plus at most one torn last line.
`--resume` reads the ids already there and cuts a torn last line off (a line is whole exactly
when it ends in a newline: JSON text written by `json.dumps` holds no raw newline).

A Parquet output is a directory (`out.parquet/`) of part files, one per chunk, the layout
Spark, pyarrow, pandas, DuckDB and Ray all read as one table: each part is written to a hidden
temporary file, fsynced, then renamed, so a part is either whole or absent, and `--resume`
reads the ids of the parts there and deletes temporary files a crash left. Its columns are
`id` (int64 when the input is Parquet with an integer `id` column, else text), `result` and
`error` (each one JSON document as text, null when absent): a result's keys are the question
ids and option labels of its row, which differ between rows, so they are not columns.
"""
from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass
from typing import Any, FrozenSet, Hashable, List, Optional, Protocol, Set

from ..errors import KimeError
from .source import JobInputError, kind_of, parquet

PART_PREFIX = "part-"
_TMP_PREFIX = ".part-"


class JobOutputError(KimeError, OSError):
    """An output chunk that could not be written (a full disk, a file too large, a mount gone).
    What was written before is whole on disk -- the chunk that failed is taken back -- so
    `--resume` carries on, with no row lost or written twice, once the cause is fixed."""


def _cannot_write(path: str, error: OSError, done: int) -> JobOutputError:
    return JobOutputError("cannot write output %s: %s; the %d rows written before are whole on "
                          "disk: free space (or fix the cause), then run again with --resume"
                          % (path, error.strerror or error, done))


@dataclass
class ScoredRow:
    """One output row: the id, and exactly one of `result` / `error`, each as JSON text."""

    id: Any
    result: Optional[str] = None
    error: Optional[str] = None


def id_key(row_id: Any, ids: str) -> Hashable:
    """How an id compares with those an output holds: as JSON keeps it (`json`), as an integer
    column keeps it (`int`: an int stays one, anything else is text) or as text (`text`)."""
    if ids == "json" or (ids == "int" and isinstance(row_id, int)):
        return row_id
    return str(row_id)


@dataclass(frozen=True)
class Skip:
    """Whether an input row's id is already in the output: a plain picklable value, so Ray's
    readers can drop resumed rows where they read them."""

    done: FrozenSet[Hashable]
    ids: str

    def __call__(self, row_id: Any) -> bool:
        return id_key(row_id, self.ids) in self.done


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class JsonlSink:
    """`{"id": ..., "result": ...}` or `{"id": ..., "error": ...}` per line, appended a chunk at a
    time."""

    ids = "json"

    def __init__(self, path: str, resume: bool):
        self.path = path
        self.done: Set[Hashable] = set()
        exists = os.path.exists(path) and os.path.getsize(path) > 0
        if exists and not resume:
            raise JobInputError("output %s already exists: pass --resume to continue that run, "
                                "or remove it" % path)
        if exists:
            self.done = self._resume()
        # unbuffered: a failed write leaves nothing behind to be flushed later
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._written = len(self.done)

    def _resume(self) -> Set[Hashable]:
        done: Set[Hashable] = set()
        decoder = json.JSONDecoder()
        good = 0
        with open(self.path, "rb") as f:
            for n, raw in enumerate(f, 1):
                if not raw.endswith(b"\n"):
                    break  # torn by a crash mid-write: cut below
                text = raw.decode("utf-8")
                try:
                    if text.startswith('{"id": '):  # the shape written below: only the id is read
                        value = decoder.raw_decode(text, 7)[0]
                    else:
                        value = json.loads(text)["id"]
                except (ValueError, KeyError, TypeError) as e:
                    raise JobInputError("output %s line %d is not a row kime score wrote (%s); "
                                        "fix or remove it before resuming" % (self.path, n, e)) \
                        from None
                done.add(value)
                good += len(raw)
        if good < os.path.getsize(self.path):
            with open(self.path, "r+b") as f:
                f.truncate(good)
                f.flush()
                os.fsync(f.fileno())
        return done

    def write(self, rows: List[ScoredRow]) -> None:
        """Append a chunk; durable when this returns."""
        if not rows:
            return
        lines = []
        for r in rows:
            head = '{"id": ' + json.dumps(r.id, ensure_ascii=False)
            if r.error is None:
                lines.append(head + ', "result": ' + str(r.result) + "}\n")
            else:
                lines.append(head + ', "error": ' + r.error + "}\n")
        data = memoryview("".join(lines).encode("utf-8"))
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(self._fd, data):]
            os.fsync(self._fd)
        except OSError as e:
            try:  # take the chunk back: the file ends with whole chunks only
                os.ftruncate(self._fd, start)
                os.fsync(self._fd)
            except OSError:
                pass  # a torn last line: --resume cuts it
            raise _cannot_write(self.path, e, self._written) from e
        self._written += len(rows)

    def close(self) -> None:
        os.close(self._fd)


class ParquetSink:
    """A directory of `part-NNNNNN.parquet` files, one per chunk."""

    def __init__(self, path: str, resume: bool, id_is_int: bool):
        self.path = path
        self._pq = parquet()
        import pyarrow as pa

        self._pa = pa
        if os.path.isfile(path):
            raise JobInputError("output %s is a file; a Parquet output is a directory of part "
                                "files: remove the file or name another output" % path)
        parts = sorted(glob.glob(os.path.join(path, PART_PREFIX + "*.parquet")))
        if parts and not resume:
            raise JobInputError("output %s already holds %d part files: pass --resume to "
                                "continue that run, or remove it" % (path, len(parts)))
        os.makedirs(path, exist_ok=True)
        for stale in glob.glob(os.path.join(path, _TMP_PREFIX + "*")):
            os.unlink(stale)  # a part a crash left half-written; its rows were never counted
        self.id_type = pa.int64() if id_is_int else pa.string()
        self.done: Set[Hashable] = set()
        for part in parts:
            column = self._pq.read_table(part, columns=["id"]).column("id")
            self.id_type = column.type
            self.done.update(column.to_pylist())
        self.ids = "int" if pa.types.is_integer(self.id_type) else "text"
        self._written = len(self.done)
        self._next = 1 + max([int(os.path.basename(p)[len(PART_PREFIX):-8]) for p in parts],
                             default=-1)

    def write(self, rows: List[ScoredRow]) -> None:
        """Write a chunk as the next part; durable (and visible) when this returns."""
        if not rows:
            return
        pa = self._pa
        ids = [id_key(r.id, self.ids) for r in rows]
        if pa.types.is_integer(self.id_type) and not all(isinstance(i, int) for i in ids):
            raise JobInputError("output %s stores integer ids, but this input has text ids; "
                                "write to a new output" % self.path)
        table = pa.table({"id": pa.array(ids, type=self.id_type),
                          "result": pa.array([r.result for r in rows], type=pa.string()),
                          "error": pa.array([r.error for r in rows], type=pa.string())})
        name = "%s%06d.parquet" % (PART_PREFIX, self._next)
        tmp = os.path.join(self.path, _TMP_PREFIX + name[len(PART_PREFIX):])
        try:
            self._pq.write_table(table, tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.replace(tmp, os.path.join(self.path, name))
            _fsync_dir(self.path)
        except OSError as e:
            if os.path.exists(tmp):
                os.unlink(tmp)  # half a part: never counted
            raise _cannot_write(self.path, e, self._written) from e
        self._written += len(rows)
        self._next += 1

    def close(self) -> None:
        """Nothing is buffered: every part was durable when `write` returned."""


class Sink(Protocol):
    """What the job loop writes through: the ids already written, how an id compares with
    them (`id_key`'s `ids`), a durable `write` of one chunk, and `close`."""

    done: Set[Hashable]
    ids: str

    def write(self, rows: List[ScoredRow]) -> None: ...

    def close(self) -> None: ...


def open_sink(path: str, resume: bool, id_is_int: bool = False) -> Sink:
    """The writer for `path`, by its extension; with `resume`, `done` holds the ids already
    written (and a torn JSONL line is cut off)."""
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise JobInputError("output %s: its directory %s does not exist" % (path, directory))
    if kind_of(path, "output") == "jsonl":
        return JsonlSink(path, resume)
    return ParquetSink(path, resume, id_is_int)


def read_output(path: str) -> List[dict]:
    """Every row of an output, as dicts `{"id", "result" | "error"}` with the JSON parsed: for
    tests and for reading a finished run back."""
    if kind_of(path, "output") == "jsonl":
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    pq = parquet()
    out: List[dict] = []
    for part in sorted(glob.glob(os.path.join(path, PART_PREFIX + "*.parquet"))):
        for row in pq.read_table(part).to_pylist():
            entry = {"id": row["id"]}
            if row["error"] is None:
                entry["result"] = json.loads(row["result"])
            else:
                entry["error"] = json.loads(row["error"])
            out.append(entry)
    return out
