"""tools/retry.sh, which CI's downloads go through (PyPI downloads are sometimes cut short on
these machines: stop 60's run ended after 16 s on a 79 MB wheel), tools/debootstrap_fresh.sh,
the rules that every pip command that can reach an index and every debootstrap in CI and the
build tools go through them, .ci/run's cleanup of its chroots at exit, which must never
change the run's status, and .ci/run's wheel lanes, any of whose steps failing fails the run."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from ..paths import ROOT

RETRY = ROOT / "tools" / "retry.sh"

pytestmark = pytest.mark.skipif(
    not RETRY.is_file() or shutil.which("bash") is None,
    reason="not a source checkout with bash (the suite runs against an installed wheel)")


def _run(tmp_path, script: str, attempts: int | None = None, pause: str = "0"):
    """Runs retry.sh over a bash SCRIPT that counts its own runs in tmp_path/count."""
    env = dict(os.environ, KIME_RETRY_PAUSE=pause)
    env.pop("KIME_RETRIES", None)
    if attempts is not None:
        env["KIME_RETRIES"] = str(attempts)
    counter = tmp_path / "count"
    body = 'n=$(( $(cat "$1" 2>/dev/null || echo 0) + 1 )); echo "$n" > "$1"; ' + script
    done = subprocess.run(["bash", str(RETRY), "bash", "-c", body, "probe", str(counter)],
                          env=env, capture_output=True, text=True, timeout=60)
    runs = int(counter.read_text()) if counter.exists() else 0
    return done, runs


def test_success_runs_once_and_passes_its_output_through(tmp_path):
    done, runs = _run(tmp_path, 'echo "out $n"; echo "err $n" >&2')
    assert (done.returncode, runs) == (0, 1)
    assert done.stdout == "out 1\n" and done.stderr == "err 1\n"


@pytest.mark.parametrize("fails", [1, 2])
def test_a_command_cut_short_runs_again_until_it_succeeds(tmp_path, fails):
    done, runs = _run(tmp_path, 'echo "try $n"; [ "$n" -gt %d ] || exit 7' % fails)
    assert done.returncode == 0 and runs == fails + 1
    assert done.stdout == "".join("try %d\n" % i for i in range(1, fails + 2))
    named = re.findall(r"retry: attempt (\d+) of 3 failed \(rc 7\)", done.stderr)
    assert named == [str(i) for i in range(1, fails + 1)]


@pytest.mark.parametrize("attempts", [1, 2, 4])
def test_the_last_status_is_returned_after_every_attempt(tmp_path, attempts):
    done, runs = _run(tmp_path, 'exit $(( 10 + n ))', attempts=attempts)
    assert runs == attempts
    assert done.returncode == 10 + attempts
    assert done.stderr.count("retry: attempt") == attempts - 1


def test_the_pause_grows_between_attempts(tmp_path):
    start = time.monotonic()
    done, runs = _run(tmp_path, "exit 3", attempts=3, pause="1")
    elapsed = time.monotonic() - start
    assert (done.returncode, runs) == (3, 3)
    assert re.findall(r"again in (\d+) s", done.stderr) == ["1", "3"]
    assert 4 <= elapsed < 30


@pytest.mark.parametrize("attempts, pause", [("0", "0"), ("x", "0"), ("2", "-1"), ("2", "1.5")])
def test_bad_settings_are_refused_before_anything_runs(tmp_path, attempts, pause):
    env = dict(os.environ, KIME_RETRIES=attempts, KIME_RETRY_PAUSE=pause)
    marker = tmp_path / "ran"
    done = subprocess.run(["bash", str(RETRY), "touch", str(marker)], env=env,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not marker.exists()
    assert "KIME_RETRIES" in done.stderr and "'%s', '%s'" % (attempts, pause) in done.stderr


def test_no_command_is_a_usage_error():
    done = subprocess.run(["bash", str(RETRY)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "usage" in done.stderr


# `python -m pip [global options] install|download|wheel`, on one logical line
PIP = re.compile(r"-m pip(?: --?[a-z-]+(?: [^-\s]\S*)?)* (install|download|wheel)\b")


def _logical_lines(text: str):
    """Shell lines with their backslash continuations joined, with the first line's number."""
    start, parts = None, []
    for number, line in enumerate(text.splitlines(), 1):
        start = start or number
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        yield start, " ".join(parts + [line])
        start, parts = None, []


FRESH = ROOT / "tools" / "debootstrap_fresh.sh"


def _fake_debootstrap(tmp_path):
    """A `debootstrap` first on PATH that records its arguments and what its target held."""
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "debootstrap").write_text(
        '#!/bin/sh\neval root=\\${$(($# - 1))}\n'  # ... SUITE ROOT MIRROR: the one before last
        'ls -A "$root" > "%s/held" 2>/dev/null || echo absent > "%s/held"\n'
        'printf "%%s\\n" "$@" > "%s/args"\nmkdir -p "$root" && touch "$root/made"\n'
        % ((tmp_path,) * 3))
    (shadow / "debootstrap").chmod(0o755)
    return dict(os.environ, PATH="%s:%s" % (shadow, os.environ["PATH"]))


def test_debootstrap_fresh_starts_from_an_empty_root(tmp_path):
    root = tmp_path / "chroots" / "arm64"
    (root / "etc").mkdir(parents=True)
    (root / "half-made").write_text("from the attempt a download cut short")
    done = subprocess.run(["bash", str(FRESH), "bookworm", str(root) + "/", "http://mirror/debian",
                           "--arch=arm64", "--variant=minbase"], env=_fake_debootstrap(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "held").read_text() == "absent\n"  # the old tree was gone before it ran
    assert (tmp_path / "args").read_text().split() == [
        "--arch=arm64", "--variant=minbase", "bookworm", str(root), "http://mirror/debian"]
    assert sorted(p.name for p in root.iterdir()) == ["made"]


@pytest.mark.parametrize("args", [[], ["sid", "/tmp/x"], ["sid", "relative/root", "m"],
                                  ["sid", "/", "m"]])
def test_debootstrap_fresh_refuses_what_it_cannot_make_fresh(tmp_path, args):
    done = subprocess.run(["bash", str(FRESH), *args], env=_fake_debootstrap(tmp_path),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and not (tmp_path / "args").exists()
    assert "usage" in done.stderr or "absolute path" in done.stderr


def test_every_debootstrap_goes_through_retry_on_a_fresh_root():
    calls = []
    scripts = [ROOT / ".ci" / "run", ROOT / ".ci" / "arm64", *sorted((ROOT / "tools").glob("*.sh"))]
    for script in scripts:
        if script == FRESH:
            continue
        for number, line in _logical_lines(script.read_text()):
            code = line.split("#", 1)[0]
            if re.search(r"(^|[;&|]\s*|\bexec\s+)debootstrap\s+-", code.strip()) or \
                    "debootstrap_fresh.sh" in code:
                calls.append((script.relative_to(ROOT), number, code))
    assert len(calls) >= 3, "the pattern no longer finds the chroot scripts' debootstrap"
    bare = ["%s:%d: %s" % call for call in calls
            if not ("retry.sh" in call[2] and "debootstrap_fresh.sh" in call[2])]
    assert not bare, ("debootstrap outside tools/retry.sh and debootstrap_fresh.sh:\n"
                      + "\n".join(bare))


def test_every_pip_that_can_reach_an_index_goes_through_retry():
    scripts = [ROOT / ".ci" / "run", ROOT / ".ci" / "arm64", *sorted((ROOT / "tools").glob("*.sh"))]
    seen, bare = 0, []
    for script in scripts:
        for number, line in _logical_lines(script.read_text()):
            if line.lstrip().startswith("#") or not PIP.search(line):
                continue
            seen += 1
            offline = "--no-index" in line or (
                "--no-deps" in line and "--no-build-isolation" in line)
            through = "retry.sh" in line or '"${fetch[@]}"' in line or 'bash "$retry"' in line
            if not (offline or through):
                bare.append("%s:%d: %s" % (script.relative_to(ROOT), number, line.strip()))
    assert seen >= 8, "the pattern no longer finds CI's pip commands"
    assert not bare, "pip commands that download without tools/retry.sh:\n" + "\n".join(bare)


def _cleanup_script(tmp_path, status: int, background: bool = False) -> str:
    """A script that defines .ci/run's ci_cleanup, points it at its three directories (the two
    chroots' and the wheel lanes') and exits with `status` through the same kind of EXIT trap,
    under set -e as .ci/run runs."""
    text = (ROOT / ".ci" / "run").read_text()
    fn = re.search(r"^ci_cleanup\(\) \{\n.*?^\}\n", text, re.S | re.M)
    assert fn, ".ci/run no longer defines ci_cleanup"
    script = tmp_path / "run.sh"
    script.write_text("set -euo pipefail\n%s\narm64_dir=%s sid_dir=%s wheel_work=%s\n"
                      "%strap ci_cleanup EXIT\nexit %d\n"
                      % (fn.group(0), tmp_path / "arm64", tmp_path / "sid", tmp_path / "wheels",
                         "sleep 3 >/dev/null 2>&1 &\n" if background else "", status))
    for name in ("arm64", "sid", "wheels"):
        (tmp_path / name / "chroot").mkdir(parents=True)
    return str(script)


@pytest.mark.parametrize("status", [0, 3])
def test_ci_cleanup_removes_the_chroots_and_keeps_the_status(tmp_path, status):
    done = subprocess.run(["bash", _cleanup_script(tmp_path, status)], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == status, done.stderr
    assert not any((tmp_path / name).exists() for name in ("arm64", "sid", "wheels"))


@pytest.mark.parametrize("status", [0, 3])
def test_ci_cleanup_that_cannot_remove_leaves_the_status_alone(tmp_path, status):
    """Under set -e a failing command in the EXIT trap would become the run's status."""
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "rm").write_text("#!/bin/sh\nexit 1\n")
    (shadow / "rm").chmod(0o755)
    env = dict(os.environ, PATH="%s:%s" % (shadow, os.environ["PATH"]))
    done = subprocess.run(["bash", _cleanup_script(tmp_path, status)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == status, done.stderr
    assert (tmp_path / "arm64").is_dir() and "not removed" in done.stdout


def test_ci_cleanup_leaves_the_chroots_while_a_job_runs(tmp_path):
    done = subprocess.run(["bash", _cleanup_script(tmp_path, 0, background=True)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "still run" in done.stdout
    assert all((tmp_path / name).is_dir() for name in ("arm64", "sid", "wheels"))


# .ci/run's wheel lanes (lane A beside the suite, lane B after it), run from `wheel_work=` to the
# end with its own step(), over stub tools in a scratch git checkout: each stub records its call
# and fails when FAIL names it.
STUBS = {
    "tools/build_wheel.sh": 'mkdir -p "$1"; echo "build $1"; [ "$FAIL" != build ] || exit 1\n'
                            'echo "$1/k.whl"\n',
    "tools/test_wheel.sh": 'echo "test_wheel $1"; [ "$FAIL" != tw ] || exit 1\n',
    "tools/test_wheels.sh": 'shift; echo "test_wheels $*"; [ "$FAIL" != "tws-$1" ] || exit 1\n',
    "tests/wheel_answers.py": 'import sys; open(sys.argv[2], "w").write("{}")\n',
}


def _lanes(tmp_path, fail: str) -> subprocess.CompletedProcess:
    text = (ROOT / ".ci" / "run").read_text()
    step = re.search(r"^step\(\) \{.*?^\}\n", text, re.S | re.M)
    tail = text[text.index("\nwheel_work=") + 1:]
    assert step and "wheel_lane_a" in tail, ".ci/run's wheel lanes are not where this test looks"
    repo = tmp_path / "repo"
    for path, body in STUBS.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(body)
    crewai = repo / ".venv-crewai" / "bin" / "python"
    crewai.parent.mkdir(parents=True)
    crewai.write_text("#!/bin/sh\necho crewai\n")
    crewai.chmod(0o755)
    # the suite and CrewAI's tests pass; no ARM64 job or sid chroot (their waits are their own);
    # the lanes' folder goes at exit, as .ci/run's cleanup takes it
    (repo / "run.sh").write_text(
        "set -euo pipefail\ntrap 'rm -rf \"${wheel_work:-}\"' EXIT\ndeclare -a ci_times=()\n%s\n"
        "arm64_job='' sid_pid=''\n"
        "crewai_log=$(mktemp)\nsleep 0 &\ncrewai_pid=$!\n"
        'python() { if [ "$1" = -m ]; then echo suite; else "%s" "$@"; fi; }\n%s'
        % (step.group(0), sys.executable, tail))
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    env = dict(os.environ, FAIL=fail, TMPDIR=str(tmp_path))
    return subprocess.run(["bash", "run.sh"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.skipif(shutil.which("git") is None or shutil.which("tar") is None,
                    reason="needs git and tar (the lane builds from a copy of the checkout)")
@pytest.mark.parametrize("fail", ["", "build", "tw", "tws-3.10", "tws-3.14"])
def test_the_wheel_lanes_run_every_step_and_fail_the_run_with_any(tmp_path, fail):
    done = _lanes(tmp_path, fail)
    out = done.stdout
    assert (done.returncode == 0) == (fail == ""), out + done.stderr
    built = "build " + str(tmp_path / "repo" / "dist")
    assert built in out, out
    if fail == "build":  # nothing is tested without wheels
        assert not re.search(r"^test_wheels? ", out, re.M), out
        return
    assert "test_wheel %s/k.whl" % (tmp_path / "repo" / "dist") in out
    assert "test_wheels 3.10 3.12 3.13" in out and "test_wheels 3.14 floors" in out
    # lane B only starts once lane A's wheels are there, and lane A's log comes out whole
    assert out.index("waiting for lane A's wheels") < out.index("test_wheels 3.14 floors")
    assert "==== lane A:" in out and out.index("==== lane A:") < out.index(built)
