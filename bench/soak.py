"""A soak under faults: `kime serve` driven by many clients for a long time with a mix of good and
bad traffic, reporting per minute what came back, how fast, and how much memory the server held.

    python -m bench.soak --minutes 20 --clients 64

The server runs in its own process (as a user runs it) on a loopback port with the `tiny`
checkpoint by default. Each client loops over a weighted mix:

- `valid`: one state (unique, so no cache answers it) and three questions;
- `batch`: three states through `/v1/systemone/batch`;
- `invalid`: a question of an unknown type (422);
- `oversized`: a state past laya serve's 50,000 characters (413);
- `slow_body`: a body trickled slower than `--body-read-timeout` (408, and the slot is freed);
- `slow_headers`: headers trickled slower than `--header-read-timeout` (408 and closed);
- `disconnect`: a valid request whose client hangs up before the answer.

An answer is lost when a valid or batch request gets anything but 200 (503 when the queue is
full is counted apart) or a 200 without every answer asked. The run fails (exit 1) on any lost
answer, any 5xx, or RSS growing more than `--max-growth` (2%) from the end of the warm-up to
the end, not counting plan arenas built after it (bounded: one per token bucket, read from
`/metrics`). The warm-up (`--warmup`, minutes) is what fills what is bounded: the answer cache
(4096 rows), the question heads, one plan per token bucket and the tokenizer pool's match
caches. Growth after it is what a leak looks like; the report also gives the growth from the
end of minute 0.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from typing import Any, Dict, List, Optional, Tuple

from .machine import machine_info

QUESTIONS = {
    "team": {"type": "choice", "instructions": "Which team should handle this?",
             "criteria": {"billing": "payments", "tech": "bugs", "sales": "deals"}},
    "urgency": {"type": "score", "instructions": "How urgent?", "criteria": ["low", "mid", "high"]},
    "refund": {"type": "noul", "instructions": "Does the customer ask for a refund?"},
}
MIX = [("valid", 40), ("batch", 15), ("invalid", 10), ("oversized", 5), ("slow_body", 4),
       ("slow_headers", 3), ("disconnect", 5)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rss_kb(pid: int) -> int:
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Soak:
    def __init__(self, port: int, body_timeout: float, header_timeout: float):
        self.port = port
        self.body_timeout = body_timeout
        self.header_timeout = header_timeout
        self.lock = threading.Lock()
        self.status: Dict[int, Counter] = defaultdict(Counter)  # minute -> "kind status" -> n
        self.latency: Dict[int, List[float]] = defaultdict(list)  # minute -> valid latencies
        self.lost: Dict[int, int] = defaultdict(int)
        self.t0 = time.monotonic()
        self.seq = 0

    def minute(self) -> int:
        return int((time.monotonic() - self.t0) // 60)

    def record(self, kind: str, status: Any, seconds: Optional[float] = None,
               lost: bool = False) -> None:
        with self.lock:
            m = self.minute()
            self.status[m]["%s %s" % (kind, status)] += 1
            if seconds is not None:
                self.latency[m].append(seconds)
            if lost:
                self.lost[m] += 1

    def _raw(self, payload: bytes, timeout: float = 120.0) -> Tuple[int, bytes]:
        with socket.create_connection(("127.0.0.1", self.port), timeout=timeout) as sock:
            sock.sendall(payload)
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
        return status, body

    def plan_bytes(self) -> int:
        """The engine's plan arenas (`kime_memory_bytes{kind="plans"}`): bounded, but built
        on first use of a token bucket, which a change of load can bring late in a run."""
        status, body = self._raw(b"GET /metrics HTTP/1.1\r\nhost: soak\r\nconnection: close"
                                 b"\r\n\r\n", timeout=30)
        total = 0
        for line in body.decode("utf-8", "replace").splitlines():
            if line.startswith("kime_memory_bytes{") and 'kind="plans"' in line:
                total += int(float(line.rsplit(" ", 1)[1]))
        return total

    def _post(self, path: str, body: Any) -> Tuple[int, Any]:
        raw = json.dumps(body).encode()
        head = ("POST %s HTTP/1.1\r\nhost: soak\r\ncontent-type: application/json\r\n"
                "content-length: %d\r\nconnection: close\r\n\r\n" % (path, len(raw))).encode()
        status, data = self._raw(head + raw)
        try:
            return status, json.loads(data) if data else None
        except ValueError:
            return status, None

    def _state(self) -> str:
        with self.lock:
            self.seq += 1
            n = self.seq
        return ("Ticket %d: I was charged twice for order %d and want one refunded. "
                % (n, n * 7)) * 3

    def one(self, kind: str) -> None:
        t = time.monotonic()
        try:
            if kind == "valid":
                status, reply = self._post("/v1/systemone",
                                           {"state": self._state(), "questions": QUESTIONS})
                ok = status == 200 and list(reply["answers"]) == list(QUESTIONS)
                self.record(kind, status, time.monotonic() - t, lost=not ok and status != 503)
            elif kind == "batch":
                states = [self._state() for _ in range(3)]
                status, reply = self._post("/v1/systemone/batch",
                                           {"states": states, "questions": QUESTIONS})
                ok = status == 200 and len(reply["results"]) == 3 and all(
                    list(r["answers"]) == list(QUESTIONS) for r in reply["results"])
                self.record(kind, status, lost=not ok and status != 503)
            elif kind == "invalid":
                status, _ = self._post("/v1/systemone", {"state": "x", "questions": {
                    "q": {"type": "maybe", "instructions": "?"}}})
                self.record(kind, status)
            elif kind == "oversized":
                status, _ = self._post("/v1/systemone", {"state": "x" * 60000,
                                                         "questions": QUESTIONS})
                self.record(kind, status)
            elif kind == "slow_body":
                body = json.dumps({"state": self._state(), "questions": QUESTIONS}).encode()
                head = ("POST /v1/systemone HTTP/1.1\r\nhost: soak\r\ncontent-type: "
                        "application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
                        % len(body)).encode()
                self.record(kind, self._trickle(head + body[:10], body[10:]))
            elif kind == "slow_headers":
                self.record(kind, self._trickle(b"GET /health HTTP/1.1\r\n",
                                                b"x-slow: 1\r\n" * 100))
            elif kind == "disconnect":
                raw = json.dumps({"state": self._state(), "questions": QUESTIONS}).encode()
                head = ("POST /v1/systemone HTTP/1.1\r\nhost: soak\r\ncontent-type: "
                        "application/json\r\ncontent-length: %d\r\n\r\n" % len(raw)).encode()
                with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
                    sock.sendall(head + raw)
                    time.sleep(random.uniform(0.0, 0.05))
                self.record(kind, "hung-up")
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.record(kind, "client-error:%s" % type(e).__name__,
                        lost=kind in ("valid", "batch"))

    def _trickle(self, first: bytes, rest: bytes) -> Any:
        """Send `first`, then a byte of `rest` every half deadline, until the server answers."""
        every = min(self.body_timeout, self.header_timeout) / 2
        with socket.create_connection(("127.0.0.1", self.port), timeout=30) as sock:
            sock.sendall(first)
            sock.settimeout(every)
            got = b""
            for byte in rest:
                try:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    got += chunk
                    break
                except socket.timeout:
                    try:
                        sock.sendall(bytes([byte]))
                    except OSError:
                        break
            return int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/") else "closed"


def _mix(text: str) -> List[Tuple[str, int]]:
    """`kind=weight,...` -> [(kind, weight)], refusing kinds the soak does not know."""
    known = {k for k, _ in MIX}
    mix = []
    for part in text.split(","):
        kind, _, weight = part.strip().partition("=")
        if kind not in known or not weight.isdigit() or int(weight) < 1:
            raise argparse.ArgumentTypeError("%r: expected kind=weight with kind one of %s"
                                             % (part, ", ".join(sorted(known))))
        mix.append((kind, int(weight)))
    return mix


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="kime serve under a long mixed load with faults")
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--model", default=None, help="a checkpoint (default: the committed tiny)")
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--body-read-timeout", type=float, default=2.0)
    ap.add_argument("--header-read-timeout", type=float, default=2.0)
    ap.add_argument("--warmup", type=int, default=3,
                    help="minutes before RSS growth is counted (default 3)")
    ap.add_argument("--max-growth", type=float, default=2.0,
                    help="percent of RSS growth after the warm-up that fails the run (2)")
    ap.add_argument("--out", help="write the per-minute report as JSON here")
    ap.add_argument("--mix", type=_mix, default=MIX,
                    help="kinds and weights, e.g. disconnect=1 or valid=4,batch=1 (default: %s)"
                    % ",".join("%s=%d" % kw for kw in MIX))
    args = ap.parse_args(argv)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    model = args.model or os.path.join(root, "tests", "goldens", "checkpoints", "tiny")
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="kime-soak-", suffix=".log", delete=False)
    server = subprocess.Popen(
        [sys.executable, "-m", "kime.cli", "serve", "--model", model, "--port", str(port),
         "--device", "cpu", "--threads", str(args.threads), "--log-level", "warning",
         "--body-read-timeout", str(args.body_read_timeout),
         "--header-read-timeout", str(args.header_read_timeout)],
        stdout=log, stderr=subprocess.STDOUT)
    soak = Soak(port, args.body_read_timeout, args.header_read_timeout)
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if soak._raw(b"GET /health HTTP/1.1\r\nhost: s\r\nconnection: close\r\n\r\n",
                             timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                print("kime serve did not start; its log: %s" % log.name)
                return 1
            time.sleep(0.2)
        soak.t0 = time.monotonic()
        end = soak.t0 + args.minutes * 60
        kinds = [k for k, w in args.mix for _ in range(w)]
        rss: Dict[int, int] = {}
        plans: Dict[int, int] = {}
        stop = threading.Event()

        def client(seed: int) -> None:
            rng = random.Random(seed)
            while not stop.is_set() and time.monotonic() < end:
                soak.one(rng.choice(kinds))

        threads = [threading.Thread(target=client, args=(i,), daemon=True)
                   for i in range(args.clients)]
        for t in threads:
            t.start()
        info = machine_info()
        print("soak: %d clients for %.1f min against kime serve (pid %d) on %s, %d cores"
              % (args.clients, args.minutes, server.pid, info["cpu"], info["cores"]), flush=True)
        while time.monotonic() < end:
            time.sleep(min(5.0, max(0.0, end - time.monotonic())))
            minute = soak.minute()
            rss[minute] = _rss_kb(server.pid)
            plans[minute] = soak.plan_bytes() // 1024
        stop.set()
        for t in threads:
            t.join(timeout=180)
        return _report(soak, rss, plans, args)
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


def _report(soak: Soak, rss: Dict[int, int], plans: Dict[int, int],
            args: argparse.Namespace) -> int:
    minutes = sorted(set(soak.status) | set(rss))
    total: Counter = Counter()
    rows = []
    print("\nminute  requests  valid p50/p99 (ms)  lost  5xx  rss (MB)  plans (MB)  statuses")
    for m in minutes:
        counts = soak.status.get(m, Counter())
        total.update(counts)
        lat = sorted(soak.latency.get(m, []))
        p50 = 1000 * statistics.median(lat) if lat else float("nan")
        p99 = 1000 * lat[min(len(lat) - 1, int(0.99 * len(lat)))] if lat else float("nan")
        fives = sum(n for k, n in counts.items() if k.split()[-1].startswith("5"))
        rows.append({"minute": m, "requests": sum(counts.values()), "p50_ms": p50,
                     "p99_ms": p99, "lost": soak.lost.get(m, 0), "5xx": fives,
                     "rss_mb": rss.get(m, 0) / 1024, "statuses": dict(counts)})
        rows[-1]["plans_mb"] = plans.get(m, 0) / 1024
        print("%6d  %8d  %8.0f / %-8.0f  %4d  %3d  %8.1f  %10.1f  %s"
              % (m, rows[-1]["requests"], p50, p99, rows[-1]["lost"], fives,
                 rows[-1]["rss_mb"], rows[-1]["plans_mb"],
                 ", ".join("%s=%d" % kv for kv in sorted(counts.items()))))
    lost = sum(soak.lost.values())
    fives = sum(r["5xx"] for r in rows)
    first = rss.get(min(rss), 0) if rss else 0
    warm_minute = min([m for m in rss if m >= args.warmup - 1] or [max(rss, default=0)])
    warm = rss.get(warm_minute, 0)
    last = rss.get(max(rss), 0) if rss else 0
    raw_growth = (last - warm) / warm if warm else 0.0
    # Plans built after the warm-up are bounded (one per bucket); a leak is what is left.
    built = plans.get(max(rss), 0) - plans.get(warm_minute, 0) if rss else 0
    growth = (last - built - warm) / warm if warm else 0.0
    print("\ntotal: %d requests; lost answers %d; 5xx %d; RSS %.1f MB after minute 0, %.1f MB "
          "after the warm-up (minute %d) -> %.1f MB at the end (%+.1f%% after the warm-up, "
          "%+.1f%% after minute 0); plans built after the warm-up %.1f MB; growth after the "
          "warm-up without them %+.1f%%"
          % (sum(total.values()), lost, fives, first / 1024, warm / 1024, warm_minute,
             last / 1024, 100 * raw_growth, 100 * ((last - first) / first if first else 0.0),
             built / 1024, 100 * growth))
    print("by kind and status: " + ", ".join("%s=%d" % kv for kv in sorted(total.items())))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"minutes": rows, "lost": lost, "5xx": fives, "rss_growth": raw_growth,
                       "rss_growth_without_new_plans": growth}, f,
                      indent=1)
    ok = lost == 0 and fives == 0 and growth <= args.max_growth / 100
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
