"""Finding the peer interpreter and talking to `bench/peer_worker.py` in a side process.

The peers (Laya's torch `Agent` and its `ONNXAgent`) run in another interpreter, usually a
virtual environment kime never imports: `--peer-python PATH`, else `$KIME_BENCH_PEER_PYTHON`,
else this interpreter when it can import laya, else the first of `<repo>/.oracle/bin/python`
(where the README's parity instructions put it) and `/work/oracle/.oracle/bin/python` that exists.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from typing import Any, Dict, List, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
WORKER = os.path.join(HERE, "peer_worker.py")

DEFAULT_PEER_PYTHONS = (os.path.join(REPO, ".oracle", "bin", "python"),
                        "/work/oracle/.oracle/bin/python")

# Environment variables a current OpenBLAS runs slower with (the machine's notes: unset them in
# benchmark commands only). Removed from every process the bench starts.
UNSET_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in UNSET_ENV}
    env.update(extra or {})
    return env


def _has_laya(python: str) -> bool:
    try:
        r = subprocess.run([python, "-c", "import importlib.util as u, sys; "
                            "sys.exit(0 if u.find_spec('laya') else 1)"],
                           env=clean_env(), capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0


def find_peer_python(explicit: Optional[str]) -> "tuple[Optional[str], str]":
    """(interpreter, why) for `--peers auto`; interpreter is None when there is none."""
    if explicit:
        if not os.path.exists(explicit):
            return None, "--peer-python %s does not exist" % explicit
        if not _has_laya(explicit):
            return None, "laya is not importable with --peer-python %s" % explicit
        return explicit, "--peer-python"
    env = os.environ.get("KIME_BENCH_PEER_PYTHON")
    if env:
        return (env, "$KIME_BENCH_PEER_PYTHON") if _has_laya(env) else (
            None, "laya is not importable with $KIME_BENCH_PEER_PYTHON=%s" % env)
    import importlib.util

    if importlib.util.find_spec("laya") is not None:
        return sys.executable, "this interpreter"
    for cand in DEFAULT_PEER_PYTHONS:
        if os.path.exists(cand) and _has_laya(cand):
            return cand, "default %s" % cand
    return None, ("laya is not importable here and none of %s has it; pass --peer-python"
                  % ", ".join(DEFAULT_PEER_PYTHONS))


class PeerError(RuntimeError):
    pass


class PeerProcess:
    """`peer_worker.py` running under `python`, one request at a time."""

    def __init__(self, python: str):
        # the worker starts in bench/, so a relative path is made absolute here (not resolved:
        # a venv's python is a link that must stay one)
        python = os.path.abspath(python) if os.sep in python else python
        self.python = python
        self._log = tempfile.NamedTemporaryFile(prefix="kime-bench-peer-", suffix=".log",
                                                delete=False)
        self.log_path = self._log.name
        self.proc = subprocess.Popen([python, WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     env=clean_env(), bufsize=1, cwd=HERE)

    def call(self, op: str, **kw: Any) -> Dict[str, Any]:
        req = dict(kw, op=op)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except (BrokenPipeError, OSError):
            line = ""
        if not line:
            raise PeerError("the peer process ended during %r; its log:\n%s"
                            % (op, self.log_tail()))
        reply = json.loads(line)
        if not reply.get("ok"):
            raise PeerError("%s failed in the peer process: %s\n%s"
                            % (op, reply.get("error"), reply.get("traceback", "")))
        return reply

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return ""

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.call("quit")
            except PeerError:
                pass
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        try:
            os.unlink(self.log_path)
        except OSError:
            pass


def probe(python: str, args: List[str], timeout: float = 1800) -> Dict[str, Any]:
    """Run `peer_worker.py --probe ...` in a fresh process; its last stdout line is JSON."""
    r = subprocess.run([python, WORKER] + args, env=clean_env(), capture_output=True, text=True,
                       timeout=timeout, cwd=HERE)
    if r.returncode != 0:
        raise PeerError("probe %s failed (exit %d):\n%s" % (" ".join(args), r.returncode,
                                                             r.stderr[-3000:]))
    return json.loads(r.stdout.strip().splitlines()[-1])


def run_script(python: str, source: str, req: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    """Run a peer script in `python` (the oracle interpreter) with `req` as JSON on stdin, in
    the clean environment, and return the JSON object it prints; its stderr tail on failure."""
    r = subprocess.run([python, "-c", source], input=json.dumps(req), capture_output=True,
                       text=True, env=clean_env(), timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError("Laya's side failed (exit %d):\n%s" % (r.returncode, r.stderr[-3000:]))
    return dict(json.loads(r.stdout))


def timing_line(name: str, s: Dict[str, Any], width: int = 14, digits: int = 1) -> str:
    """One side's p50, p95 and worst call in ms (`s` from `bench.stats.summarize`)."""
    f = "%8.{}f ms".format(digits)
    return ("  %-*s p50 " + f + "   p95 " + f + "   max " + f + "   (n=%d)") % (
        width, name, s["p50"] * 1e3, s["p95"] * 1e3, s["max"] * 1e3, s["n"])
