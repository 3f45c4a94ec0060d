"""The input of an offline job: JSONL or Parquet rows -> `InputRow`s, and the splits Ray reads.

A row is an object with a `state`, an optional `id` and optional `questions` that override the
job's. A row without an id gets its row number (the line number of a JSONL file, counting from
1; the position of a Parquet row, counting from 1 across the files of a directory in name
order). A row that cannot be read -- a line that is not JSON, not an object, or an id that is
neither text nor an integer -- still becomes an `InputRow`, carrying its problems, so the job
writes an error for it and goes on: a bad row never stops a run.

Ray reads the same rows on its workers (`Split`, `read_split`): a JSONL file splits at line
boundaries found by one pass over its bytes, so every split knows the number of its first
line; a Parquet file splits by row group, whose sizes its footer gives.
"""
from __future__ import annotations

import glob
import json
import math
import os
from dataclasses import dataclass
from typing import Any, Callable, Iterator, List, Optional, Tuple

from ..errors import BadOption, Problem, problem

JSONL_SUFFIXES = (".jsonl", ".ndjson")
PARQUET_SUFFIXES = (".parquet",)
_SCAN_BLOCK = 16 << 20


class JobInputError(BadOption):
    """An input, output or option of `kime score` / `kime calibrate` that cannot be used: a file
    that does not exist or is not JSONL or Parquet, an output that exists without `--resume`,
    a cluster too small for the actors asked for. The message says what to do."""


@dataclass
class InputRow:
    """One input row: its number, its id (its number when it has none), its state and its own
    questions (None: the job's). `problems` lists why it could not be read, if it could not.
    A labelled row (`kime calibrate`) also carries Laya's fine-tuning labels: `expected`
    (question id -> the right answer) and `gold` (question id -> `{"probabilities": ...}`)."""

    row: int
    id: Any
    state: Any = None
    questions: Any = None
    problems: Optional[List[Problem]] = None
    expected: Any = None
    gold: Any = None


def kind_of(path: str, what: str) -> str:
    """`jsonl` or `parquet`, from the name (a directory of Parquet files counts as Parquet)."""
    name = path.lower().rstrip("/")
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    raise JobInputError("%s %s: name a .jsonl (or .ndjson) or a .parquet file" % (what, path))


def row_id(value: Any, row: int) -> Tuple[Any, List[Problem]]:
    """The id a row is written under: its `id` when that is text or an integer (an integral
    float, as pandas writes an integer column with gaps, counts as one), its row number when it
    has none, and its row number with a problem when its id is anything else."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return row, []
    if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
        return value, []
    if isinstance(value, float) and value.is_integer():
        return int(value), []
    return row, [problem(["id"], "a row's id must be a string or an integer, got %s; the row "
                         "is written under its row number %d" % (type(value).__name__, row),
                         "type_error.id", value)]


def row_from_object(obj: Any, row: int) -> InputRow:
    """An `InputRow` from a parsed row. A missing `state` is left None, so it is refused exactly
    as `predict(None, ...)` refuses it."""
    if not isinstance(obj, dict):
        return InputRow(row, row, problems=[problem(
            [], "row %d must be an object with 'state' and optionally 'id' and 'questions', got "
            "%s" % (row, type(obj).__name__), "type_error.dict", obj)])
    rid, problems = row_id(obj.get("id"), row)
    return InputRow(row, rid, obj.get("state"), obj.get("questions"), problems or None,
                    obj.get("expected"), obj.get("gold"))


def row_from_line(raw: bytes, row: int) -> Optional[InputRow]:
    """A JSONL line as an `InputRow`; None for a blank line, which is not a row."""
    if not raw.strip():
        return None
    try:
        obj = json.loads(raw)
    except UnicodeDecodeError as e:
        return InputRow(row, row, problems=[problem([], "line %d is not UTF-8: %s" % (row, e),
                                                    "value_error.utf8", repr(raw[:200]))])
    except ValueError as e:
        return InputRow(row, row, problems=[problem([], "line %d is not JSON: %s" % (row, e),
                                                    "value_error.json",
                                                    raw[:200].decode("utf-8", "replace"))])
    return row_from_object(obj, row)


# --- JSONL ----------------------------------------------------------------------------------


def _jsonl_rows(path: str, offset: int = 0, length: Optional[int] = None,
                first: int = 1) -> Iterator[InputRow]:
    with open(path, "rb") as f:
        f.seek(offset)
        left = length
        n = first
        for raw in f:
            if left is not None:
                if left <= 0:
                    return
                left -= len(raw)
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte-order mark some editors write
            parsed = row_from_line(raw, n)
            if parsed is not None:
                yield parsed
            n += 1


def _jsonl_splits(path: str, target_bytes: int) -> List["Split"]:
    """Line-aligned byte ranges of about `target_bytes`, each with the number of its first line:
    one pass counting newlines, so a split need not read what comes before it."""
    size = os.path.getsize(path)
    splits: List[Split] = []
    start, line = 0, 1
    pos, newlines = 0, 0
    with open(path, "rb") as f:
        while True:
            block = f.read(_SCAN_BLOCK)
            if not block:
                break
            at = 0
            while True:
                cut = start + target_bytes - pos
                if cut >= len(block):
                    break
                nl = block.find(b"\n", max(at, cut))
                if nl < 0:
                    break
                end = pos + nl + 1
                newlines_before = newlines + block.count(b"\n", 0, nl + 1)
                splits.append(Split(path, "jsonl", start, end - start, line))
                start, line, at = end, 1 + newlines_before, nl + 1
            newlines += block.count(b"\n")
            pos += len(block)
    if start < size:
        splits.append(Split(path, "jsonl", start, size - start, line))
    return splits


def _count_lines(path: str) -> int:
    lines, last = 0, b"\n"
    with open(path, "rb") as f:
        while True:
            block = f.read(_SCAN_BLOCK)
            if not block:
                break
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


# --- Parquet --------------------------------------------------------------------------------


def parquet() -> Any:
    """`pyarrow.parquet`, imported when a job first meets Parquet (input or output), or the
    `JobInputError` that says which extra brings it."""
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise JobInputError("Parquet needs pyarrow: pip install 'kime[jobs]' (%s)" % e) from e
    return pq


def parquet_files(path: str) -> List[str]:
    """A Parquet file, or the `.parquet` files of a directory in name order."""
    if os.path.isdir(path):
        files = sorted(glob.glob(os.path.join(path, "*.parquet")))
        if not files:
            raise JobInputError("%s is a directory without .parquet files" % path)
        return files
    return [path]


_COLUMNS = ("id", "state", "questions", "expected", "gold")
_JSON_COLUMNS = ("questions", "expected", "gold")


def _parquet_columns(pq: Any, path: str) -> List[str]:
    names = pq.ParquetFile(path).schema_arrow.names
    if "state" not in names:
        raise JobInputError("Parquet input %s has no 'state' column (its columns: %s)"
                            % (path, ", ".join(names)))
    return [c for c in _COLUMNS if c in names]


def parquet_id_is_int(path: str) -> bool:
    """Whether a Parquet input's `id` column holds integers (its output keeps them integers)."""
    import pyarrow as pa

    pq = parquet()
    schema = pq.ParquetFile(parquet_files(path)[0]).schema_arrow
    return "id" in schema.names and pa.types.is_integer(schema.field("id").type)


def _parquet_records(batch: Any, first: int) -> Iterator[InputRow]:
    columns = {name: batch.column(name).to_pylist() for name in batch.schema.names}
    for i in range(batch.num_rows):
        obj = {name: values[i] for name, values in columns.items()}
        bad = None
        for name in _JSON_COLUMNS:  # these columns hold each row's object as JSON text
            if isinstance(obj.get(name), str):
                try:
                    obj[name] = json.loads(obj[name])
                except ValueError as e:
                    bad = problem([name], "row %d: %s is not JSON: %s" % (first + i, name, e),
                                  "value_error.json", obj[name][:200])
                    break
        if bad is not None:
            yield InputRow(first + i, row_id(obj.get("id"), first + i)[0], problems=[bad])
        else:
            yield row_from_object(obj, first + i)


def _batches_rows(batches: Iterator[Any], first: int) -> Iterator[InputRow]:
    for batch in batches:
        yield from _parquet_records(batch, first)
        first += batch.num_rows


def _parquet_rows(files: List[str], batch_rows: int) -> Iterator[InputRow]:
    pq = parquet()
    first = 1
    for path in files:
        reader = pq.ParquetFile(path)
        yield from _batches_rows(reader.iter_batches(batch_size=batch_rows,
                                                     columns=_parquet_columns(pq, path)), first)
        first += reader.metadata.num_rows


# --- the source -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Split:
    """A piece of the input a Ray worker reads alone: a byte range of a JSONL file (`start`,
    `size` in bytes) or a row group of a Parquet file (`start` is its index), and the number
    of its first row."""

    path: str
    kind: str
    start: int
    size: int
    first_row: int


def read_split(split: Split, skip: Optional[Callable[[Any], bool]] = None) -> List[InputRow]:
    """A split's rows, without those `skip` says are done (a resumed job's)."""
    if split.kind == "jsonl":
        rows: Iterator[InputRow] = _jsonl_rows(split.path, split.start, split.size,
                                               split.first_row)
    else:
        pq = parquet()
        table = pq.ParquetFile(split.path).read_row_group(
            split.start, columns=_parquet_columns(pq, split.path))
        rows = _batches_rows(iter(table.to_batches()), split.first_row)
    return [r for r in rows if skip is None or not skip(r.id)]


class Source:
    """An input file (or a directory of Parquet files): its rows in order, how many there are,
    and its splits for Ray."""

    def __init__(self, path: str):
        self.path = path
        self.kind = kind_of(path, "input")
        if not os.path.exists(path):
            raise JobInputError("input %s does not exist" % path)
        if self.kind == "jsonl" and os.path.isdir(path):
            raise JobInputError("input %s is a directory; give a JSONL file" % path)
        self.files = parquet_files(path) if self.kind == "parquet" else [path]
        if self.kind == "parquet":
            pq = parquet()
            for f in self.files:
                _parquet_columns(pq, f)

    def count(self) -> int:
        """Rows in the input (for JSONL, its lines: a blank line is counted but not a row)."""
        if self.kind == "jsonl":
            return _count_lines(self.path)
        pq = parquet()
        return sum(pq.ParquetFile(f).metadata.num_rows for f in self.files)

    def rows(self, batch_rows: int = 1024) -> Iterator[InputRow]:
        """Every row, in order, read lazily."""
        if self.kind == "jsonl":
            return _jsonl_rows(self.path)
        return _parquet_rows(self.files, batch_rows)

    def id_is_int(self) -> bool:
        return self.kind == "parquet" and parquet_id_is_int(self.path)

    def splits(self, target_bytes: int = 4 << 20) -> List[Split]:
        """Pieces for Ray's readers: JSONL byte ranges of about `target_bytes`, or Parquet row
        groups."""
        if self.kind == "jsonl":
            return _jsonl_splits(self.path, target_bytes)
        pq = parquet()
        out: List[Split] = []
        first = 1
        for f in self.files:
            meta = pq.ParquetFile(f).metadata
            for g in range(meta.num_row_groups):
                rows = meta.row_group(g).num_rows
                out.append(Split(f, "parquet", g, rows, first))
                first += rows
        return out
