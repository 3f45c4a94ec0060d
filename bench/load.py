"""Load bench for `kime serve`: throughput, tail latency and request merging under concurrency.

Run it as::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.load --shape tiny

    python -m bench.load --shape tiny|base [--concurrency 1,8,64] [--requests N]
                         [--peer auto|none] [--peer-python PY] [--time-cap S] [--out F]

What it does:

1. Writes (or reuses) the random checkpoint of `--shape` in the bench's cache
   (`bench.workloads.cached_checkpoint`, `~/.cache/kime/bench/<shape>-seed0`).
2. Starts `python -m kime.cli serve --model PATH --host 127.0.0.1 --port P` on a free loopback
   port and waits for `GET /health`.
3. With `--peer auto` and Laya importable in a peer interpreter (found the way `bench.peers`
   finds it), also starts `laya.serve` on the same checkpoint on another free loopback port
   (`LAYA_EXTRA_MODELS={"bench": PATH}`, `LAYA_MODELS=bench`, requests carry `"model": "bench"`;
   `LAYA_MAX_CONCURRENT` is raised above the largest concurrency so it queues instead of
   answering 503).
4. For each concurrency level it drives each server from a SEPARATE worker process
   (`python -m bench.load --worker`, threads + `http.client`, one keep-alive connection per
   thread), so the client never shares a GIL with the server it measures. Each request is a
   W2-like request: a ~300-token state that differs per request (a unique ticket number at its
   start and end, so no answer cache can short-circuit it) and the five W2 questions (a choice
   of 6, two scores of 4 levels, two nouls). Counts are bounded (`--requests`, default 200 at
   tiny and 40 at base per level) and each level is capped in time (`--time-cap`).
5. Reports per level: requests/s, questions/s, p50/p95/p99 latency, errors, the mean requests
   per forward run from `/metrics` deltas ((runs + merged) / runs; kime only) and the cache hit
   ratio over the level (kime only). Then: p99 at the largest level over the unloaded p50
   (concurrency 1; the target on tiny is <= 5) and the throughput gain of merged batches
   (requests/s at 8 and at 64 over requests/s at 1).

All traffic goes to 127.0.0.1. The servers are stopped at the end, on errors too.
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

DEFAULT_REQUESTS = {"tiny": 200, "base": 40}
DEFAULT_TIME_CAP = {"tiny": 60.0, "base": 120.0}
DEFAULT_LEVELS = (1, 8, 64)
STATE_TOKENS = 300
WARMUP = 4
LAYA_MODEL_NAME = "bench"

__all__ = ["run_bench", "build_requests", "start_kime", "start_laya", "drive", "summarize",
           "format_report", "main"]


# --- environment ---------------------------------------------------------------------------------

def _clean_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    from bench.peers import clean_env

    env = clean_env(extra)
    # kime must import from this checkout whatever the caller's cwd
    env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --- requests ------------------------------------------------------------------------------------

def build_requests(checkpoint: str, n: int, salt: str = "") -> List[Dict[str, Any]]:
    """`n` W2-like request bodies: a ~300-token state, unique per request, and the W2 questions."""
    from bench.workloads import exact_tokens_text, questions_w2, source_text, tokenizer_encoder

    encode = tokenizer_encoder(checkpoint)
    base = exact_tokens_text(encode, source_text(2, sentences=max(40, STATE_TOKENS // 8)),
                             STATE_TOKENS - 16)
    questions = questions_w2()
    out = []
    for i in range(n):
        tag = "%s%06d" % (salt, i)
        state = "Ticket %s. %s (ticket %s)" % (tag, base, tag)
        out.append({"state": state, "questions": questions})
    return out


# --- servers -------------------------------------------------------------------------------------

class Server:
    """A server subprocess on 127.0.0.1:`port`, its output in a temporary log file."""

    def __init__(self, name: str, argv: List[str], env: Dict[str, str], port: int,
                 extra_body: Optional[Dict[str, Any]] = None):
        self.name = name
        self.port = port
        self.extra_body = extra_body or {}
        self.log = tempfile.NamedTemporaryFile(prefix="kime-load-%s-" % name, suffix=".log",
                                               delete=False)
        self.proc = subprocess.Popen(argv, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, cwd=REPO, start_new_session=True)

    def get(self, path: str, timeout: float = 5.0) -> "tuple[int, bytes]":
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s server exited with %s before /health answered:\n%s"
                                   % (self.name, self.proc.returncode, self.log_tail()))
            try:
                status, _ = self.get("/health", timeout=2.0)
                if status == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("%s server: /health did not answer 200 within %.0f s:\n%s"
                           % (self.name, timeout, self.log_tail()))

    def metrics(self) -> Optional[Dict[str, float]]:
        """kime's /metrics through prometheus_client's parser: each sample by its name summed
        over labels, and by `name{label="value",...}` alone; None when the server has none."""
        from prometheus_client.parser import text_string_to_metric_families

        try:
            status, body = self.get("/metrics")
        except OSError:
            return None
        if status != 200:
            return None
        out: Dict[str, float] = {}
        for family in text_string_to_metric_families(body.decode("utf-8", "replace")):
            for sample in family.samples:
                out[sample.name] = out.get(sample.name, 0.0) + sample.value
                if sample.labels:
                    labels = ",".join('%s="%s"' % kv for kv in sorted(sample.labels.items()))
                    out["%s{%s}" % (sample.name, labels)] = sample.value
        return out

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log.name, "rb") as f:
                return b"\n".join(f.read().splitlines()[-lines:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    self.proc.kill()
                self.proc.wait(timeout=10)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


def _healthy(srv: Server, timeout: float) -> Server:
    """`srv` once it answers /health; stopped if it never does."""
    try:
        srv.wait_healthy(timeout)
    except BaseException:
        srv.stop()
        raise
    return srv


def start_kime(checkpoint: str, port: Optional[int] = None, threads: Optional[int] = None,
               health_timeout: float = 120.0, max_merge: int = 0,
               name: str = "kime", extra: Sequence[str] = ()) -> Server:
    port = port or free_port()
    argv = [sys.executable, "-m", "kime.cli", "serve", "--model", checkpoint,
            "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning",
            "--max-merge", str(max_merge), *extra]
    if threads is not None:
        argv += ["--threads", str(threads)]
    return _healthy(Server(name, argv, _clean_env(), port), health_timeout)


SERVE_DEPS = ("fastapi", "uvicorn")


def laya_serve_fallback(python: str) -> "tuple[Optional[str], List[str]]":
    """(site directory, missing) when the peer interpreter lacks laya.serve's HTTP stack.

    Laya's own venv may have laya without its `serve` extra (fastapi, uvicorn). When this
    interpreter is the same Python version and has them, its site-packages directory is APPENDED
    to the peer's sys.path (after the peer's own, so every package the peer has still wins, and
    only the missing ones and their own missing dependencies come from here); the peer's venv is
    not changed. Returns (None, []) when nothing is missing; raises RuntimeError when it cannot
    help.
    """
    import importlib.util

    probe = ("import importlib.util as u, json, sys; print(json.dumps([sys.version_info[:2], "
             "[m for m in %r if u.find_spec(m) is None]]))" % (SERVE_DEPS,))
    r = subprocess.run([python, "-c", probe], env=_clean_env(), capture_output=True, text=True,
                       timeout=60)
    if r.returncode != 0:
        raise RuntimeError("cannot probe %s: %s" % (python, r.stderr[-500:]))
    version, missing = json.loads(r.stdout)
    if not missing:
        return None, []
    spec = importlib.util.find_spec("fastapi"), importlib.util.find_spec("uvicorn")
    if tuple(version) != tuple(sys.version_info[:2]) or None in spec:
        raise RuntimeError("laya.serve needs %s, missing in %s (Python %d.%d), and this "
                           "interpreter cannot lend them" % (", ".join(missing), python, *version))
    origin = spec[0].origin if spec[0] is not None else None
    if origin is None:
        raise RuntimeError("cannot locate %s in this interpreter to lend it" % missing[0])
    site = os.path.dirname(os.path.dirname(origin))
    return site, missing


def start_laya(checkpoint: str, python: str, port: Optional[int] = None,
               max_concurrent: int = 256, health_timeout: float = 300.0,
               extra_site: Optional[str] = None) -> Server:
    port = port or free_port()
    env = _clean_env({
        "LAYA_HOST": "127.0.0.1", "LAYA_PORT": str(port), "LAYA_PRELOAD": "1",
        "LAYA_EXTRA_MODELS": json.dumps({LAYA_MODEL_NAME: checkpoint}),
        "LAYA_MODELS": LAYA_MODEL_NAME, "LAYA_DEFAULT_MODEL": LAYA_MODEL_NAME,
        "LAYA_MAX_LOADED": "1", "LAYA_DEVICE": "cpu", "LAYA_LOG_LEVEL": "warning",
        "LAYA_MAX_CONCURRENT": str(max_concurrent),
    })
    env.pop("PYTHONPATH", None)  # the peer interpreter must not see this checkout
    code = "from laya.serve import main; main()"
    if extra_site:
        code = "import sys; sys.path.append(%r); %s" % (extra_site, code)
    return _healthy(Server("laya", [python, "-c", code], env, port,
                           extra_body={"model": LAYA_MODEL_NAME}), health_timeout)


# --- the client worker (runs in its own process) --------------------------------------------------

def _worker_main() -> int:
    """Read a job from stdin, fire its requests with `concurrency` threads, print the result."""
    job = json.load(sys.stdin)
    port, path = job["port"], job.get("path", "/v1/systemone")
    bodies = [json.dumps(b).encode("utf-8") for b in job["bodies"]]
    expect = job.get("expect_answers")
    conc, cap = int(job["concurrency"]), float(job["time_cap"])
    lock = threading.Lock()
    nxt = [0]
    lat: List[float] = []
    errors: List[str] = []
    start = time.perf_counter()
    deadline = start + cap

    def one(conn_box: List[Any], body: bytes) -> None:
        for attempt in (0, 1):  # one reconnect for a dropped keep-alive connection
            if conn_box[0] is None:
                conn_box[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=max(cap, 30))
            c = conn_box[0]
            t0 = time.perf_counter()
            try:
                c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
                r = c.getresponse()
                data = r.read()
            except (OSError, http.client.HTTPException) as e:
                c.close()
                conn_box[0] = None
                if attempt == 0 and isinstance(e, (http.client.RemoteDisconnected, BrokenPipeError,
                                                   ConnectionResetError)):
                    continue
                with lock:
                    errors.append("%s: %s" % (type(e).__name__, e))
                return
            dt = time.perf_counter() - t0
            err = None
            if r.status != 200:
                err = "HTTP %d: %s" % (r.status, data[:200].decode("utf-8", "replace"))
            else:
                try:
                    answers = json.loads(data)["answers"]
                    if expect is not None and len(answers) != expect:
                        err = "%d answers, expected %d" % (len(answers), expect)
                except (ValueError, KeyError, TypeError) as e:
                    err = "bad body: %s" % e
            with lock:
                if err:
                    errors.append(err)
                else:
                    lat.append(dt)
            return

    def loop() -> None:
        box: List[Any] = [None]
        try:
            while True:
                with lock:
                    i = nxt[0]
                    if i >= len(bodies) or time.perf_counter() >= deadline:
                        return
                    nxt[0] = i + 1
                one(box, bodies[i])
        finally:
            if box[0] is not None:
                box[0].close()

    threads = [threading.Thread(target=loop, daemon=True) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    json.dump({"latencies": lat, "errors": errors, "elapsed": elapsed, "sent": nxt[0]}, sys.stdout)
    return 0


def drive(server: Server, bodies: Sequence[Dict[str, Any]], concurrency: int,
          time_cap: float) -> Dict[str, Any]:
    """Send `bodies` to `server` from a separate worker process with `concurrency` threads."""
    job = {"port": server.port, "concurrency": concurrency, "time_cap": time_cap,
           "bodies": [dict(b, **server.extra_body) for b in bodies],
           "expect_answers": len(bodies[0]["questions"]) if bodies else None}
    r = subprocess.run([sys.executable, "-m", "bench.load", "--worker"], input=json.dumps(job),
                       env=_clean_env(), cwd=REPO, capture_output=True, text=True,
                       timeout=time_cap + 120)
    if r.returncode != 0:
        raise RuntimeError("load worker failed (%d): %s" % (r.returncode, r.stderr[-2000:]))
    return json.loads(r.stdout)


# --- numbers -------------------------------------------------------------------------------------

def _pct(sorted_vals: Sequence[float], p: float) -> Optional[float]:
    if not sorted_vals:
        return None
    k = (len(sorted_vals) - 1) * p / 100.0
    lo, hi = int(math.floor(k)), int(math.ceil(k))
    return sorted_vals[lo] + (sorted_vals[hi] - sorted_vals[lo]) * (k - lo)


def _metric_delta(before: Optional[Dict[str, float]], after: Optional[Dict[str, float]],
                  name: str) -> Optional[float]:
    if before is None or after is None or name not in after:
        return None
    return after[name] - before.get(name, 0.0)


def summarize(raw: Dict[str, Any], questions: int, concurrency: int,
              before: Optional[Dict[str, float]] = None,
              after: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    lat = sorted(raw["latencies"])
    ok, el = len(lat), raw["elapsed"]
    out: Dict[str, Any] = {
        "concurrency": concurrency, "sent": raw["sent"], "ok": ok, "errors": len(raw["errors"]),
        "error_samples": sorted(set(raw["errors"]))[:5], "elapsed_s": el,
        "requests_per_s": ok / el if el > 0 else None,
        "questions_per_s": ok * questions / el if el > 0 else None,
        "p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None,
        "requests_per_run": None, "runs": None, "merged": None, "runs_metric": None,
        "cache_hit_ratio": None, "cache_hit_ratios": {},
    }
    if lat:
        p50, p95, p99 = (float(_pct(lat, p) or 0.0) for p in (50, 95, 99))  # lat is not empty
        out.update(p50_ms=p50 * 1e3, p95_ms=p95 * 1e3, p99_ms=p99 * 1e3,
                   mean_ms=sum(lat) / ok * 1e3)
    runs_name = "kime_scheduler_runs_total"
    runs = _metric_delta(before, after, runs_name)
    if runs is None:
        runs_name = "kime_scheduler_batches_total"
        runs = _metric_delta(before, after, runs_name)
    merged = _metric_delta(before, after, "kime_scheduler_merged_total")
    if runs is not None:
        out.update(runs=runs, merged=merged, runs_metric=runs_name)
        if runs > 0 and merged is not None:
            out["requests_per_run"] = (runs + merged) / runs
    # per cache (kime has an answer cache and a question-head token cache); `cache_hit_ratio` is
    # the answer cache's, which the per-request states should keep at 0
    for name in sorted(after or {}):
        m = re.match(r'^kime_cache_hits_total\{cache="([^"]*)"\}$', name)
        if not m:
            continue
        hits = _metric_delta(before, after, name)
        misses = _metric_delta(before, after, 'kime_cache_misses_total{cache="%s"}' % m.group(1))
        if hits is not None and misses is not None and hits + misses > 0:
            out["cache_hit_ratios"][m.group(1)] = hits / (hits + misses)
    if out["cache_hit_ratios"]:
        out["cache_hit_ratio"] = out["cache_hit_ratios"].get("answers")
    else:
        hits = _metric_delta(before, after, "kime_cache_hits_total")
        misses = _metric_delta(before, after, "kime_cache_misses_total")
        if hits is not None and misses is not None and hits + misses > 0:
            out["cache_hit_ratio"] = hits / (hits + misses)
    return out


def _derived(levels: List[Dict[str, Any]]) -> Dict[str, Any]:
    by = {lv["concurrency"]: lv for lv in levels}
    out: Dict[str, Any] = {"unloaded_p50_ms": None, "tail_level": None, "tail_p99_ms": None,
                           "p99_over_unloaded_p50": None, "rps_gain": {},
                           "closed_loop_mean_ms": None, "p99_over_closed_loop_mean": None}
    one = by.get(1)
    if one is None:
        return out
    out["unloaded_p50_ms"] = one["p50_ms"]
    top = max(by)
    if top != 1:
        out["tail_level"] = top
        out["tail_p99_ms"] = by[top]["p99_ms"]
        if by[top]["p99_ms"] and one["p50_ms"]:
            out["p99_over_unloaded_p50"] = by[top]["p99_ms"] / one["p50_ms"]
        # Little's law: with `top` clients always waiting, the mean latency is top / throughput,
        # whatever the scheduler does; p99 over it is the tail the scheduler adds.
        if by[top]["requests_per_s"] and by[top]["p99_ms"]:
            out["closed_loop_mean_ms"] = 1e3 * top / by[top]["requests_per_s"]
            out["p99_over_closed_loop_mean"] = by[top]["p99_ms"] / out["closed_loop_mean_ms"]
    for c, lv in sorted(by.items()):
        if c != 1 and lv["requests_per_s"] and one["requests_per_s"]:
            out["rps_gain"][str(c)] = lv["requests_per_s"] / one["requests_per_s"]
    return out


# --- the run -------------------------------------------------------------------------------------

def run_bench(shape: str = "tiny", concurrency: Sequence[int] = DEFAULT_LEVELS,
              requests: Optional[int] = None, peer: str = "auto",
              peer_python: Optional[str] = None, time_cap: Optional[float] = None,
              cache_dir: Optional[str] = None, threads: Optional[int] = None,
              merge_baseline: bool = False,
              log: Callable[[str], None] = lambda s: print(s, file=sys.stderr, flush=True),
              ) -> Dict[str, Any]:
    from bench.workloads import cached_checkpoint

    n = requests or DEFAULT_REQUESTS.get(shape, 40)
    cap = time_cap or DEFAULT_TIME_CAP.get(shape, 120.0)
    levels = [int(c) for c in concurrency]
    checkpoint = cached_checkpoint(shape, cache_dir=cache_dir, log=log)
    log("checkpoint: %s" % checkpoint)

    peer_py, peer_why = None, "--peer none"
    if peer == "auto":
        from bench.peers import find_peer_python

        peer_py, peer_why = find_peer_python(peer_python)
        if peer_py is None:
            log("no peer: %s" % peer_why)

    # distinct states per server, level and request: no answer cache can short-circuit any of them
    total = WARMUP + n * len(levels)
    bodies = build_requests(checkpoint, total)
    questions = len(bodies[0]["questions"])

    result: Dict[str, Any] = {
        "shape": shape, "checkpoint": checkpoint, "requests_per_level": n, "time_cap_s": cap,
        "concurrency": levels, "state_tokens": STATE_TOKENS, "questions": questions,
        "cpus": os.cpu_count(), "peer": {"wanted": peer, "python": peer_py, "why": peer_why},
        "servers": {},
    }
    servers: List[Server] = []
    try:
        log("starting kime serve")
        t0 = time.perf_counter()
        kime = start_kime(checkpoint, threads=threads)
        servers.append(kime)
        log("kime serve healthy on 127.0.0.1:%d after %.1f s"
            % (kime.port, time.perf_counter() - t0))
        targets = [kime]
        result["servers"]["kime"] = _measure(kime, bodies, levels, n, questions, cap, log)
        kime.stop()
        servers.remove(kime)
        if merge_baseline:
            # The same server taking one request per forward run: what merging gains.
            log("starting kime serve --max-merge 1")
            single = start_kime(checkpoint, threads=threads, max_merge=1, name="kime-1")
            servers.append(single)
            result["servers"]["kime-1"] = _measure(single, bodies, levels, n, questions, cap, log)
            single.stop()
            servers.remove(single)
            gain = {}
            for a, b in zip(result["servers"]["kime"]["levels"],
                            result["servers"]["kime-1"]["levels"]):
                if a["requests_per_s"] and b["requests_per_s"]:
                    gain[str(a["concurrency"])] = a["requests_per_s"] / b["requests_per_s"]
            result["merge_gain"] = gain
        targets = []
        if peer_py is not None:
            log("starting laya serve (%s)" % peer_py)
            t0 = time.perf_counter()
            try:
                site, borrowed = laya_serve_fallback(peer_py)
                if borrowed:
                    log("the peer lacks %s; appending %s to its sys.path"
                        % (", ".join(borrowed), site))
                    result["peer"]["borrowed"] = borrowed
                    result["peer"]["borrowed_from"] = site
                laya = start_laya(checkpoint, peer_py, max_concurrent=max(256, 2 * max(levels)),
                                  extra_site=site)
                servers.append(laya)
                targets.append(laya)
                log("laya serve healthy on 127.0.0.1:%d after %.1f s"
                    % (laya.port, time.perf_counter() - t0))
            except RuntimeError as e:
                log("laya serve did not start: %s" % e)
                result["peer"]["error"] = str(e)[-2000:]

        for srv in targets:
            result["servers"][srv.name] = _measure(srv, bodies, levels, n, questions, cap, log)
    finally:
        for srv in servers:
            srv.stop()
    return result


def _measure(srv: "Server", bodies: List[Dict[str, Any]], levels: List[int], n: int,
             questions: int, cap: float, log: Callable[[str], None]) -> Dict[str, Any]:
    if True:
        if True:
            warm = drive(srv, bodies[:WARMUP], 1, cap)
            if warm["errors"]:
                log("%s warm-up errors: %s" % (srv.name, warm["errors"][:3]))
            rows = []
            for li, c in enumerate(levels):
                chunk = bodies[WARMUP + li * n: WARMUP + (li + 1) * n]
                before = srv.metrics() if srv.name.startswith("kime") else None
                raw = drive(srv, chunk, c, cap)
                after = srv.metrics() if srv.name.startswith("kime") else None
                s = summarize(raw, questions, c, before, after)
                rows.append(s)
                log("%s c=%-3d %d/%d ok in %.1f s: %.1f req/s, p50 %.0f ms, p99 %.0f ms, %d errors"
                    % (srv.name, c, s["ok"], len(chunk), s["elapsed_s"], s["requests_per_s"] or 0,
                       s["p50_ms"] or 0, s["p99_ms"] or 0, s["errors"]))
            return {"port": srv.port, "levels": rows, "derived": _derived(rows)}


# --- output --------------------------------------------------------------------------------------

def _f(v: Any, fmt: str = "%.1f") -> str:
    return "-" if v is None else fmt % v


def format_report(res: Dict[str, Any]) -> str:
    lines = ["kime load bench: shape %s, %s, W2-like requests (~%d-token state, %d questions), "
             "%d requests per level (cap %.0f s), %s CPUs"
             % (res["shape"], res["checkpoint"], res["state_tokens"], res["questions"],
                res["requests_per_level"], res["time_cap_s"], res["cpus"])]
    if res["peer"]["python"] is None:
        lines.append("peer: none (%s)" % res["peer"]["why"])
    elif res["peer"].get("error"):
        lines.append("peer: laya serve failed to start (see JSON)")
    else:
        lines.append("peer: laya serve under %s%s" % (res["peer"]["python"], (
            " (borrowing %s from this interpreter)" % ", ".join(res["peer"]["borrowed"])
            if res["peer"].get("borrowed") else "")))
    lines.append("")
    hdr = ("%-6s %5s %7s %8s %9s %9s %9s %9s %6s %8s %7s %7s"
           % ("serve", "conc", "ok", "req/s", "q/s", "p50 ms", "p95 ms", "p99 ms", "errs",
              "req/run", "ans-hit", "tok-hit"))
    lines += [hdr, "-" * len(hdr)]
    names = list(res["servers"])
    for c in res["concurrency"]:
        for name in names:
            lv = next(x for x in res["servers"][name]["levels"] if x["concurrency"] == c)
            lines.append("%-6s %5d %3d/%-3d %8s %9s %9s %9s %9s %6d %8s %7s %7s"
                         % (name, c, lv["ok"], lv["sent"], _f(lv["requests_per_s"]),
                            _f(lv["questions_per_s"]), _f(lv["p50_ms"]), _f(lv["p95_ms"]),
                            _f(lv["p99_ms"]), lv["errors"], _f(lv["requests_per_run"], "%.2f"),
                            _f(lv["cache_hit_ratio"], "%.2f"),
                            _f(lv["cache_hit_ratios"].get("tokens"), "%.2f")))
    lines.append("")
    for name in names:
        d = res["servers"][name]["derived"]
        parts = ["%s: unloaded p50 %s ms" % (name, _f(d["unloaded_p50_ms"]))]
        if d["tail_level"]:
            ratio = d["p99_over_unloaded_p50"]
            target = ""
            if res["shape"] == "tiny" and name == "kime" and ratio is not None:
                target = " (target <= 5: %s)" % ("met" if ratio <= 5 else "NOT met")
            parts.append("p99 at %d / unloaded p50 = %s%s"
                         % (d["tail_level"], _f(ratio, "%.2f"), target))
            if d.get("closed_loop_mean_ms"):
                parts.append("c / throughput = %s ms, p99 / that = %s" % (
                    _f(d["closed_loop_mean_ms"], "%.0f"),
                    _f(d["p99_over_closed_loop_mean"], "%.2f")))
        if d["rps_gain"]:
            parts.append("throughput gain " + ", ".join(
                "c=%s/c=1 x%.2f" % (k, v) for k, v in sorted(d["rps_gain"].items(),
                                                           key=lambda kv: int(kv[0]))))
        lines.append("; ".join(parts))
    if res.get("merge_gain"):
        lines.append("merged batches vs one request per run (kime / kime-1 req/s): " + ", ".join(
            "c=%s x%.2f" % kv
            for kv in sorted(res["merge_gain"].items(), key=lambda kv: int(kv[0]))))
    for name in names:
        for lv in res["servers"][name]["levels"]:
            if lv["error_samples"]:
                lines.append("%s c=%d errors: %s" % (name, lv["concurrency"],
                                                     " | ".join(lv["error_samples"])))
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--worker"]:
        return _worker_main()
    p = argparse.ArgumentParser(prog="python -m bench.load", description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="tiny", help="checkpoint shape: tiny or base")
    p.add_argument("--concurrency", default=",".join(map(str, DEFAULT_LEVELS)),
                   help="comma list of concurrency levels (default 1,8,64)")
    p.add_argument("--requests", type=int, default=None,
                   help="requests per level (default 200 at tiny, 40 at base)")
    p.add_argument("--time-cap", type=float, default=None,
                   help="seconds per level before no new request starts "
                        "(default 60 tiny, 120 base)")
    p.add_argument("--peer", choices=("auto", "none"), default="auto",
                   help="also load laya serve on the same checkpoint when laya is importable")
    p.add_argument("--peer-python", default=None, help="the interpreter that has laya")
    p.add_argument("--threads", type=int, default=None, help="kime serve --threads")
    p.add_argument("--cache-dir", default=None,
                   help="checkpoint cache (default ~/.cache/kime/bench)")
    p.add_argument("--merge-baseline", action="store_true",
                   help="also run kime serve --max-merge 1 (one request per forward run) at "
                        "every level: the throughput merging gains at equal concurrency")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    a = p.parse_args(argv)
    try:
        levels = [int(x) for x in a.concurrency.split(",") if x.strip()]
    except ValueError:
        p.error("--concurrency takes a comma list of integers")
    if not levels or min(levels) < 1:
        p.error("--concurrency takes positive integers")
    res = run_bench(a.shape, levels, a.requests, a.peer, a.peer_python, a.time_cap,
                    a.cache_dir, a.threads, a.merge_baseline)
    print(format_report(res))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
        print("wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
