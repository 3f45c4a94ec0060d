"""The packed-weight cache file: its format, written whole, mapped in 2 MiB pages, trusted
only when every byte checks out.

A file is `MAGIC`, the length of a JSON header, the header (its key, the data's size, where each
array lies and its dtype and shape, and the CRC-32 of the data) in the first `HEADER_ROOM`
bytes, then the arrays, each on an `ALIGN`-byte boundary. It is written to a temporary file,
synced and renamed, so a crash never leaves a half-written one in place. What goes in it and
under which key is `kime._cpu.weights`'s rule; this module only keeps the bytes.
"""
from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
import zlib
from typing import BinaryIO, Callable, Dict, List, Optional, Tuple

import numpy as np

MAGIC = b"KIMEPACK"
ALIGN = 64
HEADER_ROOM = 1 << 16
CHECK_CHUNK = 1 << 24
"""The checksum reads the blob in 16 MiB steps (zlib's CRC-32 runs at some 4 GB/s here: 0.15 s
for ModernBERT-base's FP32 blob, a page-in the first forward pass would make anyway)."""


def advise_huge(mm: mmap.mmap) -> None:
    """Ask the kernel to map `mm` with 2 MiB pages where it can (Linux transparent huge pages,
    which many distributions leave to `madvise`). Every forward pass streams the whole blob
    through the TLB: on a Zen 5, base W1 ran 6% (INT8) to 9% (FP32, BF16) slower behind 4 KiB
    pages than behind 2 MiB ones (docs/benchmarks.md). Elsewhere (no THP, another OS) the
    mapping keeps the pages it had."""
    advice = getattr(mmap, "MADV_HUGEPAGE", None)
    if advice is None or not hasattr(mm, "madvise"):
        return
    try:
        mm.madvise(advice)
    except OSError:  # a kernel built without THP
        pass


def map_file(path: str) -> mmap.mmap:
    """The file at `path` mapped read-only, 2 MiB pages asked for before a byte of it is read
    (its header included): a page read in under that advice comes into the page cache as a
    2 MiB folio, which the mapping then takes whole."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    advise_huge(mm)
    return mm


def settle(f: BinaryIO) -> None:
    """Flush the blob just written to disk and drop it from the page cache. Written, it sits
    there in pieces as small as the writes made them, and a mapping can only take 2 MiB pages
    from 2 MiB folios; read back once under `map_file`'s advice, it comes in whole. The sync also
    keeps a crash from renaming an unwritten file into place."""
    f.flush()
    os.fsync(f.fileno())
    if hasattr(os, "posix_fadvise"):
        try:
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        except OSError:  # advice only: a file system may refuse it, and the blob is written
            pass


def checksum(mm: np.ndarray) -> int:
    crc = 0
    for start in range(0, mm.shape[0], CHECK_CHUNK):
        crc = zlib.crc32(mm[start:start + CHECK_CHUNK].data, crc)
    return crc


def write(path: str, key: str, entries: List[Tuple[str, Callable[[], np.ndarray]]]) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".pack-", suffix=".tmp")
    try:
        table = []
        with os.fdopen(fd, "wb") as f:
            f.seek(HEADER_ROOM)
            offset = 0
            for name, produce in entries:
                arr = produce()
                pad = -offset % ALIGN
                f.write(b"\0" * pad)
                offset += pad
                table.append({"name": name, "offset": offset, "dtype": arr.dtype.str,
                              "shape": list(arr.shape)})
                f.write(np.ascontiguousarray(arr).tobytes())
                offset += arr.nbytes
            f.write(b"\0" * (-offset % ALIGN))
        data = np.frombuffer(map_file(tmp), dtype=np.uint8, offset=HEADER_ROOM)
        header = json.dumps({"key": key, "data_bytes": int(data.shape[0]), "entries": table,
                             "checksum": checksum(data)}).encode()
        del data  # unmapped: the page cache drops no page a mapping holds
        if len(header) + 16 > HEADER_ROOM:
            raise ValueError("packed weight header too large")
        with open(tmp, "r+b") as f:
            f.write(MAGIC + struct.pack("<Q", len(header)) + header)
            settle(f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


class Corrupt(Exception):
    """A cache file that is there but cannot be trusted; the message says why."""


def read(path: str, key: str) -> Optional[Dict[str, np.ndarray]]:
    """The blob's arrays mapped from `path`, or None when there is no file. Raises `Corrupt`
    for a file that is there and cannot be trusted."""
    try:
        if os.path.getsize(path) < 16:  # an empty file cannot be mapped
            raise Corrupt("no packed-weight header")
        mm = map_file(path)
        head = mm[:16]
        if head[:8] != MAGIC:
            raise Corrupt("no packed-weight header")
        (n,) = struct.unpack("<Q", head[8:])
        if n > HEADER_ROOM - 16:
            raise Corrupt("a header of %d bytes" % n)
        header = json.loads(mm[16:16 + n])
        if header.get("key") != key:
            raise Corrupt("its header names another key, %r" % (header.get("key"),))
        if len(mm) != HEADER_ROOM + header["data_bytes"]:
            raise Corrupt("%d bytes where its header says %d" % (
                len(mm), HEADER_ROOM + header["data_bytes"]))
        data = np.frombuffer(mm, dtype=np.uint8, offset=HEADER_ROOM)
        if checksum(data) != header["checksum"]:
            raise Corrupt("its checksum does not match its bytes")
        arrays = {}
        for e in header["entries"]:
            dtype = np.dtype(e["dtype"])
            count = int(np.prod(e["shape"])) if e["shape"] else 1
            arrays[e["name"]] = np.frombuffer(data, dtype=dtype, count=count,
                                              offset=e["offset"]).reshape(e["shape"])
        return arrays
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise Corrupt("%s: %s" % (type(e).__name__, e)) from e
