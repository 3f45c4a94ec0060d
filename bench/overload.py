"""Overload: `kime serve` driven at a multiple of its capacity, and how it comes back.

    python -m bench.overload --factor 10 --seconds 60

The server runs in its own process (`bench.load.start_kime`, the committed `tiny` by default)
with `--max-queue`. Three phases, each request a W2-like body (`bench.load.build_requests`: a
~300-token state unique per request, five questions) on a connection of its own:

1. capacity: `--clients` clients in a closed loop for `--calibrate` seconds; the answers per
   second are the capacity, and their p99 the normal latency;
2. the burst: requests arrive open-loop at `--factor` times the capacity for `--seconds`,
   whatever comes back (a client gives up after `--timeout` seconds);
3. after: the closed loop again for `--after` seconds.

What it reports (and checks; exit 1 on a failure): every answer is a 200 or a 503 with
`Retry-After` (nothing else, no connection refused or reset), a 503 comes back faster than an
answer (their p99s during the burst), no request waits past its timeout, the requests in flight
stay within `--max-queue` (sampled from `/ready`), and within 5 s of the burst's last arrival
the p99 is back to normal (`recovery_s`: a 3-second window's within 1.5x the capacity
phase's).
It also prints per second: arrivals, 200s, 503s and p99. The client shares the machine's
cores with the server; the achieved arrival rate is printed beside the target, so a client
that could not keep up is visible.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import threading
import time
from collections import defaultdict
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .load import Server, build_requests, start_kime
from .machine import machine_info
from .stats import percentile

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = os.path.join(os.path.dirname(HERE), "tests", "goldens", "checkpoints", "tiny")
RECOVERY_LIMIT_S = 5.0
SLOWER = 1.5
WINDOW_S = 3
"""Back to normal: a 3-second window's p99 within 1.5x the p99 under normal load. A window of
one second holds a hundred answers on tiny, whose p99 is one or two samples: on a shared
machine it moves by half from second to second with nothing wrong."""

Record = Tuple[float, float, Any, bool]
"""(start, seconds, status or an error's name, whether a 503 carried Retry-After)."""


async def post(port: int, body: bytes, timeout: float) -> Tuple[Any, bool]:
    """One POST /v1/systemone on its own connection: (status, Retry-After given), or the
    name of what went wrong (`timeout`, `ConnectionResetError`, ...)."""
    head = ("POST /v1/systemone HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            "content-length: %d\r\nconnection: close\r\n\r\n" % len(body)).encode()

    async def exchange() -> Tuple[Any, bool]:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(head + body)
            await writer.drain()
            data = await reader.read()
        finally:
            writer.close()
        top, _, _ = data.partition(b"\r\n\r\n")
        lines = top.split(b"\r\n")
        if not lines or not lines[0].startswith(b"HTTP/"):
            return "no-response", False
        retry_after = any(line.lower().startswith(b"retry-after:") for line in lines[1:])
        return int(lines[0].split(b" ", 2)[1]), retry_after

    try:
        return await asyncio.wait_for(exchange(), timeout)
    except asyncio.TimeoutError:
        return "timeout", False
    except OSError as e:
        return type(e).__name__, False


class Run:
    """Every request's record, and the bodies handed out one each."""

    def __init__(self, port: int, bodies: List[bytes], timeout: float):
        self.port, self.bodies, self.timeout = port, bodies, timeout
        self.records: List[Record] = []
        self.next = 0

    async def one(self) -> None:
        body = self.bodies[self.next % len(self.bodies)]
        self.next += 1
        start = time.monotonic()
        status, retry_after = await post(self.port, body, self.timeout)
        self.records.append((start, time.monotonic() - start, status, retry_after))

    async def closed(self, clients: int, seconds: float) -> None:
        end = time.monotonic() + seconds

        async def client() -> None:
            while time.monotonic() < end:
                await self.one()

        await asyncio.gather(*(client() for _ in range(clients)))

    async def open(self, rate: float, seconds: float) -> None:
        """Arrivals every 1/rate seconds, none waiting for another's answer."""
        start, tasks, n = time.monotonic(), [], 0
        while True:
            due = start + n / rate
            if due >= start + seconds:
                break
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            tasks.append(asyncio.ensure_future(self.one()))
            n += 1
        await asyncio.gather(*tasks)


def sample_in_flight(server: Server, stop: threading.Event, out: List[Tuple[float, float]]) -> None:
    """The requests holding a slot (what `--max-queue` bounds, `/ready`'s `in_flight`), every
    half second."""
    while not stop.wait(0.5):
        try:
            _, body = server.get("/ready")  # 503 while full, with the count all the same
            out.append((time.monotonic(), float(json.loads(body)["in_flight"])))
        except (OSError, ValueError, KeyError):
            out.append((time.monotonic(), math.nan))


def seconds_table(records: Sequence[Record], t0: float) -> List[Dict[str, Any]]:
    """Per second since `t0`: arrivals, answers by kind and the p99 of the 200s ending then."""
    by: Dict[int, Dict[str, Any]] = defaultdict(lambda: {"arrivals": 0, "ok": 0, "busy": 0,
                                                         "other": 0, "lat": []})
    for start, took, status, _ in records:
        by[int(start - t0)]["arrivals"] += 1
        end = by[int(start + took - t0)]
        kind = "ok" if status == 200 else "busy" if status == 503 else "other"
        end[kind] += 1
        if status == 200:
            end["lat"].append(took)
    return [{"second": s, "arrivals": v["arrivals"], "ok": v["ok"], "busy": v["busy"],
             "other": v["other"], "p99_ms": 1000 * percentile(v["lat"], 99)}
            for s, v in sorted(by.items())]


def recovery(records: Sequence[Record], t0: float, burst_end: int, normal_ms: float) -> float:
    """Seconds from the burst's last arrival to the first `WINDOW_S`-second window whose
    answers have their p99 within `SLOWER` times `normal_ms` (inf when none has). The first,
    not every later one: on a shared machine a neighbour's load can slow a later window, which
    says nothing about the burst."""
    ends: Dict[int, List[float]] = defaultdict(list)
    for start, took, status, _ in records:
        if status == 200:
            ends[int(start + took - t0)].append(took)
    last = max(ends, default=burst_end) - WINDOW_S + 1
    for w in range(burst_end, last + 1):
        window = [x for s in range(w, w + WINDOW_S) for x in ends.get(s, [])]
        if window and 1000 * percentile(window, 99) <= SLOWER * normal_ms:
            return float(w - burst_end)
    return math.inf


def run(args: argparse.Namespace) -> Dict[str, Any]:
    bodies = [json.dumps(b).encode() for b in build_requests(args.model, 4000, salt="o")]
    server = start_kime(args.model, threads=args.threads, extra=["--max-queue",
                                                                  str(args.max_queue)])
    stop = threading.Event()
    in_flight: List[Tuple[float, float]] = []
    sampler = threading.Thread(target=sample_in_flight, args=(server, stop, in_flight),
                               daemon=True)
    try:
        loop = asyncio.new_event_loop()
        warm = Run(server.port, bodies, args.timeout)
        loop.run_until_complete(warm.closed(args.clients, 3.0))  # plans, caches, pages
        calib = Run(server.port, bodies[500:], args.timeout)
        loop.run_until_complete(calib.closed(args.clients, args.calibrate))
        answered = [r for r in calib.records if r[2] == 200]
        capacity = len(answered) / args.calibrate
        normal_p99 = 1000 * percentile([r[1] for r in answered], 99)
        sampler.start()
        burst = Run(server.port, bodies[1500:], args.timeout)
        t0 = time.monotonic()
        target = args.rate or args.factor * capacity
        loop.run_until_complete(burst.open(target, args.seconds))
        after = Run(server.port, bodies[3000:], args.timeout)
        loop.run_until_complete(after.closed(args.clients, args.after))
        stop.set()
        loop.close()
    finally:
        stop.set()
        server.stop()
    records = burst.records + after.records
    rows = seconds_table(records, t0)
    busy = [r for r in burst.records if r[2] == 503]
    return {
        "machine": machine_info(), "model": args.model, "capacity_rps": capacity,
        "normal_p99_ms": normal_p99, "factor": args.factor, "seconds": args.seconds,
        "target_rps": target,
        "sent_rps": len(burst.records) / max(1e-9, max(r[0] for r in burst.records) - t0),
        "max_queue": args.max_queue, "timeout_s": args.timeout,
        "statuses": _count(r[2] for r in records),
        "busy_without_retry_after": sum(1 for r in busy if not r[3]),
        "busy_p50_ms": 1000 * percentile([r[1] for r in busy], 50),
        "busy_p99_ms": 1000 * percentile([r[1] for r in busy], 99),
        "ok_p99_ms_burst": 1000 * percentile([r[1] for r in burst.records if r[2] == 200], 99),
        "slowest_s": max(r[1] for r in records),
        "past_timeout": sum(1 for r in records if r[2] == "timeout"),
        "max_in_flight": max((v for _, v in in_flight if not math.isnan(v)), default=math.nan),
        "recovery_s": recovery(records, t0, int(math.ceil(args.seconds)), normal_p99),
        "per_second": rows,
    }


def _count(items: Any) -> Dict[str, int]:
    out: Dict[str, int] = defaultdict(int)
    for item in items:
        out[str(item)] += 1
    return dict(sorted(out.items()))


def check(res: Dict[str, Any]) -> List[str]:
    """What broke the overload's promises, in words; [] when none did."""
    bad = ["%d answers were %s" % (n, s) for s, n in res["statuses"].items()
           if s not in ("200", "503")]
    if res["busy_without_retry_after"]:
        bad.append("%d 503s without Retry-After" % res["busy_without_retry_after"])
    if res["past_timeout"]:
        bad.append("%d requests waited past the %.0f s timeout" % (res["past_timeout"],
                                                                    res["timeout_s"]))
    if res["max_in_flight"] > res["max_queue"]:
        bad.append("%d requests in flight, past --max-queue %d" % (res["max_in_flight"],
                                                                   res["max_queue"]))
    if not res["busy_p99_ms"] <= res["ok_p99_ms_burst"]:
        bad.append("503s slower than answers (p99 %.0f ms > %.0f ms)" % (
            res["busy_p99_ms"], res["ok_p99_ms_burst"]))
    if not res["recovery_s"] <= RECOVERY_LIMIT_S:
        bad.append("p99 back to normal %.1f s after the burst, not within %.0f" % (
            res["recovery_s"], RECOVERY_LIMIT_S))
    return bad


def report(res: Dict[str, Any]) -> str:
    m = res["machine"]
    lines = [
        "overload: %s, %s (%d cores), capacity %.1f answers/s at p99 %.0f ms; burst %.0fx = "
        "%.0f req/s for %.0f s (sent %.0f req/s), --max-queue %d, client timeout %.0f s"
        % (os.path.basename(res["model"]), m["cpu"], m["cores"], res["capacity_rps"],
           res["normal_p99_ms"], res["target_rps"] / res["capacity_rps"], res["target_rps"],
           res["seconds"],
           res["sent_rps"], res["max_queue"], res["timeout_s"]),
        "", "second  arrivals   200   503  other  p99 200 (ms)"]
    for r in res["per_second"]:
        lines.append("%6d  %8d  %4d  %4d  %5d  %12.0f" % (r["second"], r["arrivals"], r["ok"],
                                                           r["busy"], r["other"], r["p99_ms"]))
    lines += ["", "statuses: %s" % ", ".join("%s=%d" % kv for kv in res["statuses"].items()),
              "503: p50 %.1f ms, p99 %.1f ms, %d without Retry-After; 200 during the burst: p99 "
              "%.0f ms; slowest %.2f s; past the timeout %d; most in flight %s of %d; p99 (%d s "
              "windows) back within %.1fx normal %.1f s after the burst's last arrival" % (
                  res["busy_p50_ms"], res["busy_p99_ms"], res["busy_without_retry_after"],
                  res["ok_p99_ms_burst"], res["slowest_s"], res["past_timeout"],
                  "%.0f" % res["max_in_flight"], res["max_queue"], WINDOW_S, SLOWER,
                  res["recovery_s"])]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description="kime serve at a multiple of its capacity")
    ap.add_argument("--model", default=TINY, help="a checkpoint (default: the committed tiny)")
    ap.add_argument("--factor", type=float, default=10.0)
    ap.add_argument("--rate", type=float, default=0.0,
                    help="the burst's arrivals per second, instead of --factor x capacity "
                    "(to compare two builds at one load)")
    ap.add_argument("--seconds", type=float, default=60.0, help="the burst's length")
    ap.add_argument("--calibrate", type=float, default=15.0, help="seconds measuring capacity")
    ap.add_argument("--after", type=float, default=20.0, help="seconds of normal load after")
    ap.add_argument("--clients", type=int, default=8, help="the closed loop's clients")
    ap.add_argument("--timeout", type=float, default=10.0, help="a client's patience (s)")
    ap.add_argument("--max-queue", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    res = run(args)
    print(report(res))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1, default=str)
    bad = check(res)
    print("FAIL: " + "; ".join(bad) if bad else "PASS")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
