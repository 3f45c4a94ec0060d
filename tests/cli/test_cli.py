"""The `kime` command line: --help everywhere, doctor, pull (Hub patched out) and convert."""
from __future__ import annotations

import json
import os
import warnings
from pathlib import Path

import pytest

from kime import cli

from ..paths import TINY


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the tiny checkpoint's temperatures
        code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv", [[], ["decide"], ["doctor"], ["pull"], ["convert"], ["serve"],
                                  ["route"]])
def test_help_exits_zero(capsys, argv):
    with pytest.raises(SystemExit) as exc:
        cli.main(argv + ["--help"])
    assert exc.value.code == 0
    assert "usage: kime" in capsys.readouterr().out


def test_top_level_help_lists_commands(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in ("decide", "doctor", "pull", "convert", "serve"):
        assert command in out


def test_doctor_text(capsys):
    code, out, err = run(capsys, "doctor")
    assert code == 0 and err == ""
    for key in ("kime:", "numpy:", "cpu isa / kernels:", "huge pages:", "thread pool:",
                "packed-weight cache:",
                "hugging face cache:", "HF_HUB_OFFLINE:"):
        assert key in out
    # the pool is kime's own: no OpenMP line, since no build runs on OpenMP
    assert "openmp" not in out.lower()


def test_doctor_json(capsys, monkeypatch, tmp_path):
    import kime
    from kime._cpu import _forward

    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    code, out, _ = run(capsys, "doctor", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["kime"] == kime.__version__
    assert report["cpu"]["isa"] == _forward.isa_name(_forward.isa_detect())
    assert report["cpu"]["isa"] in ("portable", "avx2", "avx512", "neon", "dotprod", "i8mm", "bf16")
    from kime._cpu import _gemm

    assert report["cpu"]["fp32_kernels"] == _gemm.kernel_name()
    assert report["cpu"]["fp32_kernels"].split()[0] in ("portable", "avx2", "avx512", "neon")
    assert report["cpu"]["cpu_features"] == _gemm.cpu_features()
    assert "openmp" not in report["cpu"]
    from kime._cpu import _attention

    assert report["cpu"]["bf16_attention"] == _attention.bf16_kernels()
    assert report["cpu"]["bf16_attention"] in ("amx-bf16", "vdpbf16ps", "avx2 fma",
                                               "neon fma", "c")
    assert report["cpu"]["pool_spin_us"] == (_forward.pool_spin_us() if _forward.pool_threaded()
                                             else None)
    assert report["cpu"]["threads"] >= 1
    for name in ("numpy", "tokenizers", "safetensors", "huggingface_hub", "threadpoolctl"):
        assert report["packages"][name]
    assert report["caches"]["packed"] == str(tmp_path / "packed")
    assert (report["caches"]["packed_blobs"], report["caches"]["packed_unused"]) == (0, 0)
    thp = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if thp.exists():
        assert "[%s]" % report["cpu"]["huge_pages"] in thp.read_text()
    else:
        assert report["cpu"]["huge_pages"] is None
    assert report["caches"]["hf_hub"]
    assert set(report["gpu"]) >= {"cupy", "devices"}


def test_doctor_counts_what_the_packed_cache_holds_for_no_one(capsys, monkeypatch, tmp_path):
    """Blobs of other kime builds (another layout digest in their key) and packings cut short
    an hour ago or more are counted apart from the blobs: this build never reads them. A
    packing in progress is not."""
    import time

    from kime._cpu import _forward
    from kime._cpu import weights

    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    packed = tmp_path / "packed"
    packed.mkdir()
    mine = "-src%s.kpack" % weights.layout_digest(_forward.source_digest())
    (packed / ("abc-avx512-f32" + mine)).write_bytes(b"x" * 1000)
    (packed / "abc-avx512-f32-src0123456789abcdef.kpack").write_bytes(b"x" * 2500)
    (packed / ".pack-live.tmp").write_bytes(b"x" * 40)
    old = packed / ".pack-dead.tmp"
    old.write_bytes(b"x" * 300)
    two_hours_ago = time.time() - 7200
    os.utime(old, (two_hours_ago, two_hours_ago))
    code, out, _ = run(capsys, "doctor", "--json")
    caches = json.loads(out)["caches"]
    assert code == 0
    assert (caches["packed_blobs"], caches["packed_bytes"]) == (2, 3500)
    assert (caches["packed_unused"], caches["packed_unused_bytes"]) == (2, 2800)
    code, out, _ = run(capsys, "doctor")
    line = next(x for x in out.splitlines() if x.startswith("packed-weight cache:"))
    assert "(2 blobs, 3.4 KiB); 2 files, 2.7 KiB, from other kime builds" in line


def test_doctor_prune_deletes_only_what_this_build_never_reads(capsys, monkeypatch, tmp_path):
    """`kime doctor --prune` deletes other builds' blobs and packings cut short, keeps this
    build's blob (the next convert finds it) and a packing in progress, and a mapping of a
    deleted blob still reads, as another process's would."""
    import mmap
    import shutil
    import time

    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    monkeypatch.delenv("KIME_CPU_BACKEND", raising=False)
    code, out, err = run(capsys, "convert", str(TINY), "--threads", "1")
    assert code == 0, err
    [cache_line] = [line for line in out.splitlines() if line.startswith("cache:")]
    mine = Path(cache_line.split(":", 1)[1].strip())
    packed = mine.parent
    other = packed / (mine.name.rsplit("-src", 1)[0] + "-src0123456789abcdef.kpack")
    shutil.copyfile(mine, other)
    live, dead = packed / ".pack-live.tmp", packed / ".pack-dead.tmp"
    live.write_bytes(b"x" * 40)
    dead.write_bytes(b"y" * 300)
    two_hours_ago = time.time() - 7200
    os.utime(dead, (two_hours_ago, two_hours_ago))
    other_bytes = other.stat().st_size
    with open(other, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    try:
        code, out, _ = run(capsys, "doctor", "--prune", "--json")
        caches = json.loads(out)["caches"]
        assert code == 0
        assert (caches["pruned"], caches["pruned_bytes"]) == (2, other_bytes + 300)
        assert caches["prune_errors"] == []
        assert not other.exists() and not dead.exists()
        assert mine.is_file() and live.is_file()
        assert (caches["packed_blobs"], caches["packed_unused"]) == (1, 0)
        assert mapped[:] == mine.read_bytes()
    finally:
        mapped.close()

    code, out, err = run(capsys, "convert", str(TINY), "--threads", "1")
    assert code == 0 and "status: already cached" in out, err
    code, out, _ = run(capsys, "doctor", "--prune")
    line = next(x for x in out.splitlines() if x.startswith("packed-weight cache:"))
    assert code == 0 and "pruned 0 files, 0 bytes" in line and "never reads" not in line


def test_doctor_prune_reports_a_file_it_cannot_delete(capsys, monkeypatch, tmp_path):
    """A stale file the system will not let go (an immutable one, `chattr +i`) is named on
    stderr and in `prune_errors`, the run exits 1, and the other stale files still go."""
    import shutil
    import subprocess

    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("needs chattr and root to make a file undeletable")
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    packed = tmp_path / "packed"
    packed.mkdir()
    stuck = packed / "abc-avx2-f32-src0123456789abcdef.kpack"
    gone = packed / "abc-avx2-int8-src0123456789abcdef.kpack"
    stuck.write_bytes(b"x" * 100)
    gone.write_bytes(b"y" * 200)
    if subprocess.run(["chattr", "+i", str(stuck)], capture_output=True).returncode != 0:
        pytest.skip("this file system has no immutable flag")
    try:
        code, out, _ = run(capsys, "doctor", "--prune", "--json")
        caches = json.loads(out)["caches"]
        assert code == 1
        assert (caches["pruned"], caches["pruned_bytes"]) == (1, 200)
        [error] = caches["prune_errors"]
        assert error.startswith(str(stuck) + ": ")
        assert stuck.exists() and not gone.exists()
        assert (caches["packed_unused"], caches["packed_unused_bytes"]) == (1, 100)
        code, out, err = run(capsys, "doctor", "--prune")
        assert code == 1 and "could not delete %s: " % stuck in err
        line = next(x for x in out.splitlines() if x.startswith("packed-weight cache:"))
        assert "pruned 0 files" in line and "1 file, 100 bytes" in line
    finally:
        subprocess.run(["chattr", "-i", str(stuck)], capture_output=True)


def test_doctor_honours_kime_isa(capsys, monkeypatch):
    monkeypatch.setenv("KIME_ISA", "portable")
    code, out, _ = run(capsys, "doctor", "--json")
    assert code == 0
    assert json.loads(out)["cpu"]["isa"] == "portable"
    assert json.loads(out)["cpu"]["fp32_kernels"] == "portable 4x8"
    assert json.loads(out)["cpu"]["bf16_attention"] == "c"


class FakeDownload:
    """Stands in for huggingface_hub.snapshot_download: records the call, writes a snapshot."""

    def __init__(self, root: Path, fail: Exception | None = None):
        self.root, self.fail, self.calls = root, fail, []

    def __call__(self, repo_id, **kwargs):
        self.calls.append((repo_id, kwargs))
        if self.fail is not None:
            raise self.fail
        snapshot = self.root / repo_id.replace("/", "--")
        for pattern in kwargs["allow_patterns"]:
            if pattern.endswith("rl_agent_config.json"):
                (snapshot / pattern).parent.mkdir(parents=True, exist_ok=True)
                (snapshot / pattern).write_text("{}")
        return str(snapshot)


@pytest.fixture
def fake_download(monkeypatch, tmp_path):
    import huggingface_hub

    fake = FakeDownload(tmp_path / "snapshots")
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    return fake


def test_pull_root(capsys, fake_download):
    code, out, err = run(capsys, "pull", "laya")
    assert code == 0, err
    [(repo, kwargs)] = fake_download.calls
    assert repo == "convaiinnovations/laya"
    assert kwargs["allow_patterns"] == ["rl_agent_config.json", "model.safetensors",
                                        "tokenizer/*", "encoder/*"]
    assert kwargs["revision"] is None and kwargs["token"] is None
    assert Path(out.strip()) == fake_download.root / "convaiinnovations--laya"


def test_pull_subfolder_revision_token(capsys, fake_download, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_env")
    code, out, err = run(capsys, "pull", "multi", "--revision", "v1")
    assert code == 0, err
    [(repo, kwargs)] = fake_download.calls
    assert repo == "convaiinnovations/laya"
    assert kwargs["allow_patterns"] == ["multilingual/rl_agent_config.json",
                                        "multilingual/model.safetensors",
                                        "multilingual/tokenizer/*", "multilingual/encoder/*"]
    assert kwargs["revision"] == "v1" and kwargs["token"] == "hf_env"
    printed = Path(out.strip())
    assert printed == fake_download.root / "convaiinnovations--laya" / "multilingual"
    assert (printed / "rl_agent_config.json").is_file()

    run(capsys, "pull", "hf://org/repo/a/b", "--token", "hf_flag")
    repo, kwargs = fake_download.calls[-1]
    assert repo == "org/repo" and kwargs["token"] == "hf_flag"
    assert kwargs["allow_patterns"][0] == "a/b/rl_agent_config.json"


def test_pull_failure_is_one_line_exit_3(capsys, fake_download):
    fake_download.fail = OSError("Network is unreachable\nmore detail")
    code, out, err = run(capsys, "pull", "org/missing")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and "org/missing" in err and "Traceback" not in err


def test_pull_local_path_has_nothing_to_pull(capsys, fake_download):
    code, _, err = run(capsys, "pull", str(TINY))
    assert code == 3 and "nothing to pull" in err and err.count("\n") == 1
    assert fake_download.calls == []


def test_pull_unknown_name(capsys, fake_download):
    code, _, err = run(capsys, "pull", "no-such-model")
    assert code == 3 and err.count("\n") == 1 and fake_download.calls == []


def test_convert_builds_then_reuses(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    monkeypatch.delenv("KIME_CPU_BACKEND", raising=False)
    code, out, err = run(capsys, "convert", str(TINY), "--threads", "1")
    assert code == 0, err
    assert "status: built now" in out
    [cache_line] = [line for line in out.splitlines() if line.startswith("cache:")]
    path = Path(cache_line.split(":", 1)[1].strip())
    assert path.parent == tmp_path / "packed" and path.suffix == ".kpack" and path.is_file()
    assert str(path.stat().st_size) in out

    code, out, err = run(capsys, "convert", str(TINY), "--threads", "1")
    assert code == 0, err
    assert "status: already cached" in out and str(path) in out

    # INT8 packs its own file, named for the kernel set that will read it.
    code, out, err = run(capsys, "convert", str(TINY), "--threads", "1", "--precision", "int8")
    assert code == 0, err
    from kime._cpu import _qgemm

    assert "status: built now" in out and "INT8" in out
    [cache_line] = [line for line in out.splitlines() if line.startswith("cache:")]
    assert "-int8-%s-" % _qgemm.impl_name() in cache_line and str(path) not in cache_line
    assert Path(cache_line.split(":", 1)[1].strip()).is_file()


def test_convert_unknown_model_exits_3(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    code, out, err = run(capsys, "convert", "no-such-model")
    assert code == 3 and out == ""
    assert err.count("\n") == 1 and err.startswith("kime: error:") and "no-such-model" in err


def test_convert_verbose_raises(monkeypatch, tmp_path):
    from kime.errors import ModelNotFound

    monkeypatch.setenv("KIME_CACHE", str(tmp_path))
    with pytest.raises(ModelNotFound):
        cli.main(["--verbose", "convert", "no-such-model"])


def test_entry_point_help():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kime.cli", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "doctor" in proc.stdout


def test_serve_flags_come_from_the_settings(capsys, monkeypatch):
    """`kime serve`'s flags are generated from the settings' one declaration, and what they
    hold reaches `serve` through the same validation as the environment and the file."""
    pytest.importorskip("pydantic")
    import kime.serve
    from kime.serve.settings import Settings, flag_name, sources

    for name in [k for k in os.environ if k.startswith(("KIME_", "LAYA_"))]:
        monkeypatch.delenv(name)
    parser = cli.build_parser()
    for name, source in sources().items():
        if source.flag:
            # a repeatable flag (--model NAME=SOURCE) gathers its values in a list
            want = ["7"] if source.repeat else "7"
            assert getattr(parser.parse_args(["serve", flag_name(name), "7"]), name) == want
        else:
            with pytest.raises(SystemExit):
                parser.parse_args(["serve", flag_name(name), "7"])
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = capsys.readouterr().out
    assert "--max-token-budget" in text and "LAYA_MAX_TOKEN_BUDGET" in text
    assert "--api-keys" not in text

    ran = []
    monkeypatch.setattr(kime.serve, "serve", ran.append)
    code, _, err = run(capsys, "serve", "-m", "some-model", "--port", "9005", "--workers", "3",
                       "--graceful-shutdown", "1.5")
    assert code == 0, err
    [settings] = ran
    assert isinstance(settings, Settings)
    assert (settings.model, settings.port, settings.workers, settings.graceful_shutdown,
            settings.precision) == (["some-model"], 9005, 3, 1.5, "auto")
    code, _, err = run(capsys, "serve", "--port", "eighty")
    assert code == 2 and err == "kime: error: invalid flag value 'eighty' for port\n"


def test_several_problems_print_as_one_readable_line(capsys, tmp_path):
    """Regression (issue 14): the heading's colon was followed by '; - question ...'."""
    questions = tmp_path / "q.json"
    questions.write_text(json.dumps({"a": {"type": "choice", "instructions": "Pick"},
                                     "b": {"type": "nope", "instructions": "x"}}))
    code, out, err = run(capsys, "decide", "--model", str(TINY), "--device", "cpu",
                         "--state", "hello", "--questions", str(questions))
    assert code == 2 and out == ""
    line = err.strip()
    assert "\n" not in line and ":;" not in line and "; -" not in line
    assert line.startswith("kime: error: 2 problems in the request: ")
    assert "question 'a'" in line and "question 'b'" in line
