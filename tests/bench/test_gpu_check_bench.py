"""`python -m bench.gpu_check` still runs end to end on the tiny shape, and times the CPU side of
the CUDA self-check on the probe the check runs (its batches' tokens), with no packed weights
left on disk. Speed is never asserted; this only keeps the bench from rotting."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench import gpu_check as bench
from kime import gpu_check
from kime.checkpoint import load_checkpoint


def test_the_bench_times_the_checks_cpu_side(tiny_path: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(tiny_path, tmp_path / "tiny-seed0")
    monkeypatch.setenv("KIME_CACHE", str(tmp_path / "kime-cache"))
    assert bench.main(["--shape", "tiny", "--cache", str(tmp_path), "--repeat", "2",
                       "--threads", "1"]) == 0
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("tiny")]
    rows, embed = gpu_check.probe_rows(load_checkpoint(str(tiny_path)))
    assert len(line) == 1
    assert line[0].split()[1:3] == [str(sum(len(r.ids) for r in rows)),
                                    "(+%d)" % sum(len(r.ids) for r in embed)]
    assert "FP32 kernels, 1 threads" in line[0]
    got = bench.measure(str(tiny_path), threads=1, repeat=1)
    assert got["open_s"] > 0 and got["forward_s"] > 0  # type: ignore[operator]
    assert not (tmp_path / "kime-cache").exists()  # nothing packed to disk, nothing kept
