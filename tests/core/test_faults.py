"""Faults that lose nothing: a process killed while it writes the packed-weight cache, a cache
directory that cannot be written (full, read-only, or not a directory), a checkpoint cut short
or corrupted, and weights that hold NaN or infinity. Each is caused for real: a SIGKILLed
child process, a tmpfs mounted full or read-only, bytes truncated or overwritten on disk.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import pytest

import kime
from kime._cpu import packfile
from kime._cpu import weights as packed_weights

QUESTIONS = {"team": {"type": "choice", "instructions": "Which team?",
                      "criteria": {"billing": "money", "tech": "bugs", "sales": "deals"}},
             "spam": {"type": "noul", "instructions": "Is it spam?"}}
REQUEST = {"state": "I was charged twice for one order.", "questions": QUESTIONS}


def _engine(path: Path, **kw) -> kime.Kime:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the checkpoint's shipped temperatures
        return kime.Kime(str(path), device="cpu", threads=1, answer_cache=0, **kw)


def _logits(engine: kime.Kime) -> dict:
    response = engine.decide(REQUEST)
    return {qid: a.logits.tobytes() + a.act.tobytes() for qid, a in response.answers.items()}


@pytest.fixture(scope="module")
def expected(tiny_path: Path) -> dict:
    with _engine(tiny_path) as engine:
        return _logits(engine)


def test_a_cache_write_killed_midway_is_rebuilt_and_answers_the_same(tiny_path, tmp_path,
                                                                    monkeypatch, expected):
    cache = tmp_path / "cache"
    child = textwrap.dedent("""
        import sys, time, warnings
        warnings.simplefilter("ignore")
        import kime
        from kime._cpu import _gemm
        pack, calls = _gemm.pack, [0]
        def slow_pack(*args, **kw):
            calls[0] += 1
            if calls[0] == 4:  # the cache file is half written: stop here until killed
                print("PACKING", flush=True)
                time.sleep(120)
            return pack(*args, **kw)
        _gemm.pack = slow_pack
        kime.Kime(sys.argv[1], device="cpu", threads=1)
    """)
    env = dict(os.environ, KIME_CACHE=str(cache))
    proc = subprocess.Popen([sys.executable, "-c", child, str(tiny_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "PACKING"
        partial = list((cache / "packed").glob(".pack-*.tmp"))
        assert partial and partial[0].stat().st_size > 0, "the child should be mid-write"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert not list((cache / "packed").glob("*.kpack")), "a killed write never leaves a cache file"

    monkeypatch.setenv("KIME_CACHE", str(cache))
    with _engine(tiny_path) as rebuilt:
        assert rebuilt.backend.weights_from == "packed"
        assert _logits(rebuilt) == expected
    with _engine(tiny_path) as mapped:
        assert mapped.backend.weights_from == "cache"
        assert _logits(mapped) == expected


def _unwritable_load(tiny_path: Path, cache: Path, monkeypatch, expected: dict) -> None:
    """Load with an unwritable cache: one warning naming the directory, then answers from
    memory that equal a cached load's; a second load in the process does not warn again."""
    monkeypatch.setenv("KIME_CACHE", str(cache))
    packed_weights._warned_dirs.discard(str(cache / "packed"))
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        first = kime.Kime(str(tiny_path), device="cpu", threads=1, answer_cache=0)
        second = kime.Kime(str(tiny_path), device="cpu", threads=1, answer_cache=0)
    told = [str(w.message) for w in seen if "cannot write packed weights" in str(w.message)]
    assert len(told) == 1 and str(cache) in told[0]
    for engine in (first, second):
        assert engine.backend.weights_from == "packed" and engine.backend.weights_file is None
        assert _logits(engine) == expected
        engine.close()


def test_a_cache_path_that_is_not_a_directory_packs_in_memory(tiny_path, tmp_path, monkeypatch,
                                                             expected):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    _unwritable_load(tiny_path, blocker, monkeypatch, expected)


@pytest.fixture
def mounted(tmp_path: Path) -> Iterator[Callable[[str], Path]]:
    """Mount a tmpfs for the test (root only); unmounted after it, whatever happens."""
    points = []

    def mount(options: str) -> Path:
        point = tmp_path / ("mnt%d" % len(points))
        point.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip("cannot mount a tmpfs here (needs root): %s" % done.stderr.strip())
        points.append(point)
        return point

    yield mount
    for point in points:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def test_a_full_cache_disk_packs_in_memory_and_leaves_no_partial_file(tiny_path, monkeypatch,
                                                                     expected, mounted):
    cache = mounted("size=96k")  # holds the directory, not the tiny blob
    _unwritable_load(tiny_path, cache, monkeypatch, expected)
    assert not list((cache / "packed").glob(".pack-*")), "a failed write cleans up after itself"


def test_a_read_only_cache_disk_packs_in_memory(tiny_path, monkeypatch, expected, mounted):
    cache = mounted("ro,size=1m")
    _unwritable_load(tiny_path, cache, monkeypatch, expected)


def _copy(tiny_path: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(tiny_path, out)
    return out


def test_a_truncated_checkpoint_names_the_file_and_a_tensor(tiny_path, tmp_path):
    path = _copy(tiny_path, tmp_path)
    weights = path / "model.safetensors"
    os.truncate(weights, weights.stat().st_size - 4096)
    with pytest.raises(kime.CheckpointError) as info:
        kime.Kime(str(path), device="cpu")
    text = str(info.value)
    assert str(weights) in text and "truncated" in text
    assert "tensor act_head." in text or "tensor scorer." in text  # the last tensors were cut


def test_a_corrupted_header_names_the_file(tiny_path, tmp_path):
    path = _copy(tiny_path, tmp_path)
    weights = path / "model.safetensors"
    with open(weights, "r+b") as f:
        f.seek(8)
        f.write(b"\xff\xfe{{not json")
    with pytest.raises(kime.CheckpointError) as info:
        kime.Kime(str(path), device="cpu")
    assert str(weights) in str(info.value) and "corrupted" in str(info.value)


@pytest.mark.parametrize("tensor, value", [("encoder.layers.1.mlp.Wo.weight", np.nan),
                                           ("scorer.3.bias", np.inf)])
def test_non_finite_weights_raise_naming_the_question(tiny_path, tmp_path, tensor, value):
    from safetensors.numpy import load_file, save_file

    path = _copy(tiny_path, tmp_path)
    tensors = load_file(str(path / "model.safetensors"))
    broken = tensors[tensor].copy()
    broken.reshape(-1)[::7] = value
    tensors[tensor] = broken
    save_file(tensors, str(path / "model.safetensors"))
    with _engine(path) as engine:
        with pytest.raises(kime.NonFiniteLogits) as info:
            engine.decide(REQUEST)
    assert "question 'team'" in str(info.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        agent = kime.load(str(path), device="cpu", answer_cache=0)
    with pytest.raises(kime.NonFiniteLogits):
        agent.predict(REQUEST["state"], QUESTIONS)


@pytest.mark.parametrize("damage", ["half", "empty", "garbage", "not a tokenizer", "a list"])
def test_a_truncated_or_corrupt_tokenizer_names_the_file(tiny_path, tmp_path, damage):
    path = _copy(tiny_path, tmp_path)
    tokenizer = path / "tokenizer" / "tokenizer.json"
    whole = tokenizer.read_bytes()
    tokenizer.write_bytes({"half": whole[:len(whole) // 2], "empty": b"",
                           "garbage": np.random.default_rng(0).bytes(4096),
                           "not a tokenizer": b'{"version": "1.0"}', "a list": b"[1, 2]"}[damage])
    for load in (lambda: kime.Kime(str(path), device="cpu"),
                 lambda: kime.load(str(path), device="cpu")):
        with pytest.raises(kime.TokenizerError, match="does not load as a tokenizer") as info:
            load()
        assert str(tokenizer) in str(info.value) and isinstance(info.value, ValueError)


def test_a_checkpoint_cut_anywhere_names_the_file(tiny_path, tmp_path):
    """Cut inside the length prefix, the header, at its end, in the tensors, one byte short:
    each a `CheckpointError` naming the file, never a raw error from the reader."""
    import struct

    path = _copy(tiny_path, tmp_path)
    weights = path / "model.safetensors"
    whole = weights.read_bytes()
    header = 8 + struct.unpack("<Q", whole[:8])[0]
    for cut in (0, 4, 8, 20, header - 1, header, header + 10, len(whole) // 2, len(whole) - 1):
        weights.write_bytes(whole[:cut])
        with pytest.raises(kime.CheckpointError) as info:
            kime.Kime(str(path), device="cpu")
        assert str(weights) in str(info.value), cut


def test_a_cache_entry_with_one_byte_changed_is_packed_again_with_a_log_line(
        tiny_path, tmp_path, monkeypatch, caplog, expected):
    """Issue 53: the cache's checksum sampled 4 KiB of every 256 KiB, so a byte changed between
    samples (a disk's bit rot, a stray write) was mapped and run. Every byte is checked now; a
    bad entry is packed again and said once in the log, nothing to the caller."""
    import json
    import logging

    cache = tmp_path / "cache"
    monkeypatch.setenv("KIME_CACHE", str(cache))
    with _engine(tiny_path) as first:
        assert first.backend.weights_from == "packed"
    blob = next((cache / "packed").glob("*.kpack"))
    raw = blob.read_bytes()
    header = json.loads(raw[16:16 + int.from_bytes(raw[8:16], "little")])
    entry = next(e for e in header["entries"] if e["name"] == "enc.1.qkv")
    at = packfile.HEADER_ROOM + entry["offset"] + 5000  # between two old samples
    with open(blob, "r+b") as f:
        f.seek(at)
        f.write(bytes([raw[at] ^ 0x40]))
    with caplog.at_level(logging.WARNING, logger="kime.weights"):
        with warnings.catch_warnings(record=True) as told:
            warnings.simplefilter("always")
            rebuilt = _engine(tiny_path)
    assert rebuilt.backend.weights_from == "packed"
    logged = [r.getMessage() for r in caplog.records if r.name == "kime.weights"]
    assert len(logged) == 1 and str(blob) in logged[0] and "checksum" in logged[0]
    assert not [w for w in told if "pack" in str(w.message)]
    assert _logits(rebuilt) == expected
    rebuilt.close()
    with _engine(tiny_path) as mapped:  # the entry written again is trusted
        assert mapped.backend.weights_from == "cache" and _logits(mapped) == expected


def test_the_cache_key_follows_the_build_and_the_layout_code(tiny_path, tmp_path, monkeypatch):
    """The key names the digest of what packs and lays out the weights (the compiled sources,
    this build's; weights.py and graph.py), not a version someone must remember to bump."""
    from kime._cpu import _forward

    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "cache"))
    with _engine(tiny_path) as engine:
        name = Path(engine.backend.weights_file or "").name
    assert name.endswith("-src%s.kpack" % packed_weights.layout_digest(_forward.source_digest()))
    assert len({packed_weights.layout_digest(d) for d in ("a", "b", _forward.source_digest())}) == 3
