"""`/metrics`: the server's Prometheus metrics, on `prometheus_client`.

Each app gets a `CollectorRegistry` of its own (never the process-global one), so two apps in
one process, as the tests build, count apart. The HTTP and answer counters are
`prometheus_client` counters (each takes its own lock); the scheduler, cache and memory figures
are the engine's own and are read when scraped, by `EngineCollector`, from the engine's public
attributes. Names, labels and help texts are those of kime's first hand-rendered `/metrics`, so
dashboards built on it keep working.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Iterator, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..engine import Kime

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format `generate_latest` writes."""
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class EngineCollector(Collector):
    """The scheduler's counters and queue depth, the caches' statistics and the model's memory,
    read from the engine at each scrape (they are the engine's counters, not the server's)."""

    def __init__(self, engine: Kime):
        self.engine = engine

    def collect(self) -> Iterator[Metric]:
        sched = self.engine.scheduler
        for name, help_, value in (
                ("kime_scheduler_runs_total",
                 "Forward runs of the scheduler, each over one or more merged requests.",
                 sched.runs),
                ("kime_scheduler_batches_total", "Backend batches run.", sched.batches),
                ("kime_scheduler_rows_total", "Rows (one per question and state) run.", sched.rows),
                ("kime_scheduler_merged_total", "Submissions merged into another caller's batch.",
                 sched.merged),
                ("kime_scheduler_dropped_total",
                 "Submissions dropped before their forward pass (caller gone).", sched.dropped)):
            yield CounterMetricFamily(name, help_, value=value)
        yield GaugeMetricFamily("kime_queue_depth", "Submissions waiting for the device.",
                                value=sched.depth())
        stats = sorted(self.engine.cache_stats().items())
        for key, family, help_ in (("hits", CounterMetricFamily, "Cache hits."),
                                   ("misses", CounterMetricFamily, "Cache misses."),
                                   ("hit_ratio", GaugeMetricFamily, "Cache hit ratio."),
                                   ("size", GaugeMetricFamily, "Entries in the cache.")):
            metric = family("kime_cache_" + key, help_, labels=["cache"])
            for cache, figures in stats:
                metric.add_metric([cache], figures[key])
            yield metric
        memory = self.engine.memory()
        metric = GaugeMetricFamily("kime_memory_bytes", "Bytes the model holds on its device.",
                                   labels=["kind"])
        metric.add_metric(["weights"], memory.weights)
        metric.add_metric(["plans"], memory.plans)
        yield metric


class Metrics:
    """The server's counters and the engine's collector, in one registry per app."""

    def __init__(self, engine: Kime):
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter("kime_http_requests_total",
                                "HTTP requests by method, path and status.",
                                ["method", "path", "status"], registry=r)
        self.latency = Histogram("kime_http_request_duration_seconds", "HTTP request latency.",
                                 ["path"], buckets=LATENCY_BUCKETS, registry=r)
        self.in_progress = Gauge("kime_http_requests_in_progress",
                                 "HTTP requests being handled now.", ["path"], registry=r)
        self.states_answered = Counter("kime_states_answered_total", "States answered.",
                                       registry=r)
        self.truncated_questions = Counter("kime_truncated_questions_total",
                                           "Question rows whose state was cut to fit max_len.",
                                           registry=r)
        self.truncated_states = Counter("kime_truncated_states_total",
                                        "Answered states with at least one truncated question.",
                                        registry=r)
        self.rejected_busy = Counter("kime_rejected_busy_total",
                                     "Requests refused with 503 (queue full).", registry=r)
        self.disconnects = Counter("kime_client_disconnects_total",
                                   "Requests whose client hung up before the answer (their queued "
                                   "work dropped).", registry=r)
        r.register(EngineCollector(engine))

    def observe(self, method: str, path: str, status: int, seconds: float) -> None:
        """One finished HTTP request."""
        self.requests.labels(method, path, str(status)).inc()
        self.latency.labels(path).observe(seconds)

    def answered(self, results: Sequence[Dict[str, Any]]) -> None:
        """Laya result dicts sent back: states answered and the ones whose state was cut."""
        cut = [len(r.get("usage", {}).get("truncated_questions") or []) for r in results]
        self.states_answered.inc(len(results))
        self.truncated_questions.inc(sum(cut))
        self.truncated_states.inc(sum(1 for n in cut if n))

    def render(self) -> bytes:
        """The registry in Prometheus' text format (`CONTENT_TYPE`)."""
        return generate_latest(self.registry)
