"""A replica killed under load: two `kime serve` processes behind haproxy, one SIGKILLed while
clients keep sending, and what the clients saw.

    python -m bench.failover --seconds 60 --kill-at 20

`kime serve --workers` are the threads that lay requests out, inside one process; several
processes are replicas, each its own `kime serve`, behind a load balancer
(docs/scale-out.md). Here two replicas (`--threads 1` each, the committed `tiny` by default)
sit behind Debian's haproxy as `bench.scale_out` runs them (`balance leastconn`, a `/ready`
check every second, `option redispatch`, `retry-on conn-failure empty-response
response-timeout 502 503 504`). `--clients` clients in a closed loop send W2-like bodies
(`bench.load.build_requests`) for `--seconds`; at `--kill-at` replica 0 gets SIGKILL. A client
does what `kime.client.Client(retry=Retry(attempts=4))` does: a 502, 503 or 504 or a dropped
connection is sent again after 0.2, 0.4 and 0.8 s.

The closing note: per second, answers and what failed at first and after the retries; the
requests a client saw fail at least once (and how), the answers lost after every retry (the
check: none; exit 1 otherwise), and that the survivor answered every second after the kill.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import sys
import time
from collections import Counter, defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .load import build_requests
from .machine import machine_info
from .overload import TINY, post
from .scale_out import Setup
from .stats import percentile

RETRY_PAUSES = (0.2, 0.4, 0.8)
"""`kime.client.Retry(attempts=4)`'s pauses: what a client that follows docs/serving.md does."""
RETRIED = {502, 503, 504}


async def ask(port: int, body: bytes, timeout: float) -> Tuple[List[Any], float]:
    """One request as a retrying client sends it: each attempt's outcome, and the seconds."""
    start, outcomes = time.monotonic(), []
    for pause in RETRY_PAUSES + (None,):
        status, _ = await post(port, body, timeout)
        outcomes.append(status)
        if status == 200 or (isinstance(status, int) and status not in RETRIED) or pause is None:
            break
        await asyncio.sleep(pause)
    return outcomes, time.monotonic() - start


async def drive(port: int, bodies: List[bytes], clients: int, seconds: float, kill_at: float,
                kill: Any, timeout: float) -> Tuple[List[Tuple[float, List[Any], float]], float]:
    """The closed loop, calling `kill()` at `kill_at`; each request's (start, outcomes,
    seconds), and when the kill happened (seconds from the start)."""
    t0 = time.monotonic()
    records: List[Tuple[float, List[Any], float]] = []
    counter = iter(range(10 ** 9))
    killed: List[float] = []

    async def client() -> None:
        while time.monotonic() - t0 < seconds:
            body = bodies[next(counter) % len(bodies)]
            start = time.monotonic() - t0
            outcomes, took = await ask(port, body, timeout)
            records.append((start, outcomes, took))

    async def killer() -> None:
        if kill_at < seconds:
            await asyncio.sleep(kill_at)
            kill()
            killed.append(time.monotonic() - t0)

    await asyncio.gather(killer(), *(client() for _ in range(clients)))
    return records, killed[0] if killed else seconds


def run(args: argparse.Namespace) -> Dict[str, Any]:
    if not shutil.which("haproxy") and not os.path.exists("/usr/sbin/haproxy"):
        raise SystemExit("bench.failover needs haproxy (apt-get install haproxy)")
    bodies = [json.dumps(b).encode() for b in build_requests(args.model, 3000, salt="f")]
    setup = Setup("haproxy", args.model, 2)  # two kime serve --threads 1, haproxy in front
    victim = setup.parts[0]
    try:
        loop = asyncio.new_event_loop()
        loop.run_until_complete(drive(setup.port, bodies[:200], args.clients, 3.0, 3.0,
                                      lambda: None, args.timeout))  # warm both replicas
        records, killed_at = loop.run_until_complete(drive(
            setup.port, bodies[200:], args.clients, args.seconds, args.kill_at,
            lambda: os.killpg(victim.proc.pid, signal.SIGKILL), args.timeout))
        loop.close()
        victim_code = victim.proc.wait(timeout=30)
    finally:
        setup.stop()
    per: Dict[int, Counter] = defaultdict(Counter)
    for start, outcomes, took in records:
        second = per[int(start + took)]
        second["answered" if outcomes[-1] == 200 else "lost"] += 1
        second["failed first"] += outcomes[0] != 200
    first_failures = Counter(str(o[0]) for _, o, _ in records if o[0] != 200)
    after = [r for r in records if r[0] >= killed_at]
    seconds_after = range(int(killed_at) + 1, int(args.seconds))
    return {
        "machine": machine_info(), "model": args.model, "clients": args.clients,
        "seconds": args.seconds, "killed_at_s": killed_at, "victim_exit": victim_code,
        "requests": len(records), "answered": sum(1 for r in records if r[1][-1] == 200),
        "lost": [{"start_s": r[0], "outcomes": [str(o) for o in r[1]]}
                 for r in records if r[1][-1] != 200],
        "failed_at_first": dict(first_failures),
        "retried_and_answered": sum(1 for r in records if len(r[1]) > 1 and r[1][-1] == 200),
        "p50_ms_before": 1000 * percentile([r[2] for r in records if r[0] < killed_at], 50),
        "p50_ms_after": 1000 * percentile([r[2] for r in after], 50),
        "p99_ms_after": 1000 * percentile([r[2] for r in after], 99),
        "silent_seconds_after_kill": [s for s in seconds_after if not per[s]["answered"]],
        "per_second": [{"second": s, **per[s]} for s in sorted(per)],
    }


def report(res: Dict[str, Any]) -> str:
    m = res["machine"]
    lines = ["failover: two kime serve replicas (%s, --threads 1) behind haproxy, %d clients "
             "for %.0f s on %s (%d cores); replica 0 SIGKILLed at %.1f s (exit %s)"
             % (os.path.basename(res["model"]), res["clients"], res["seconds"], m["cpu"],
                m["cores"], res["killed_at_s"], res["victim_exit"]),
             "", "second  answered  failed at first  lost"]
    for r in res["per_second"]:
        lines.append("%6d  %8d  %15d  %4d" % (r["second"], r.get("answered", 0),
                                              r.get("failed first", 0), r.get("lost", 0)))
    lines += ["", "clients saw: %d requests, %d answered; %d failed at first (%s), %d of them "
              "answered on a retry; %d lost after every retry; p50 %.0f ms before the kill, "
              "%.0f ms after (p99 %.0f ms); seconds after the kill with no answer: %s" % (
                  res["requests"], res["answered"], sum(res["failed_at_first"].values()),
                  ", ".join("%s=%d" % kv for kv in sorted(res["failed_at_first"].items()))
                  or "none", res["retried_and_answered"], len(res["lost"]),
                  res["p50_ms_before"], res["p50_ms_after"], res["p99_ms_after"],
                  res["silent_seconds_after_kill"] or "none")]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="a kime serve replica SIGKILLed under load")
    ap.add_argument("--model", default=TINY, help="a checkpoint (default: the committed tiny)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--kill-at", type=float, default=20.0)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--timeout", type=float, default=30.0, help="a request's patience (s)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    res = run(args)
    print(report(res))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    ok = not res["lost"] and not res["silent_seconds_after_kill"]
    print("PASS" if ok else "FAIL: %d answers lost, %d silent seconds after the kill"
          % (len(res["lost"]), len(res["silent_seconds_after_kill"])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
