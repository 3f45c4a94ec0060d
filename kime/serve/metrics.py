"""`/metrics`: the server's Prometheus metrics, on `prometheus_client`.

Each app gets a `CollectorRegistry` of its own (never the process-global one), so two apps in
one process, as the tests build, count apart. The HTTP and answer counters are
`prometheus_client` counters (each takes its own lock); the scheduler, cache and memory figures
are the engine's own and are read when scraped, by `EngineCollector`, from the engine's public
attributes. Names, labels and help texts are those of kime's first hand-rendered `/metrics`, so
dashboards built on it keep working.

A server over a Router labels every engine figure and every answer counter with `model`, the
checkpoint it belongs to, and adds `kime_model_loaded` (1 for a resident checkpoint, 0 for one
registered but not loaded). The single-model server's metrics carry no `model` label, as before.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..engine import Kime

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The text format `generate_latest` writes."""
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


Engines = Callable[[], List[Tuple[Optional[str], "Kime"]]]
"""Gives the engines to read at a scrape, as (model label, engine) pairs; None: no label."""


class EngineCollector(Collector):
    """The scheduler's counters and queue depth, the caches' statistics and the model's memory,
    read from each engine at each scrape (they are the engines' counters, not the server's)."""

    def __init__(self, engines: Engines, labelled: bool,
                 registered: Optional[Callable[[], Sequence[str]]] = None):
        self.engines = engines
        self.model_labels = ["model"] if labelled else []
        self.registered = registered

    def collect(self) -> Iterator[Metric]:
        engines = self.engines()
        models = self.model_labels
        metric: Metric

        def values(name: Optional[str]) -> List[str]:
            return [name] if models else []  # type: ignore[list-item]  # labelled: name is set

        for name, help_, read in (
                ("kime_scheduler_runs_total",
                 "Forward runs of the scheduler, each over one or more merged requests.",
                 lambda s: s.runs),
                ("kime_scheduler_batches_total", "Backend batches run.", lambda s: s.batches),
                ("kime_scheduler_rows_total", "Rows (one per question and state) run.",
                 lambda s: s.rows),
                ("kime_scheduler_merged_total", "Submissions merged into another caller's batch.",
                 lambda s: s.merged),
                ("kime_scheduler_dropped_total",
                 "Submissions dropped before their forward pass (caller gone).",
                 lambda s: s.dropped)):
            metric = CounterMetricFamily(name, help_, labels=models)
            for model, engine in engines:
                metric.add_metric(values(model), read(engine.scheduler))
            yield metric
        metric = GaugeMetricFamily("kime_queue_depth", "Submissions waiting for the device.",
                                   labels=models)
        for model, engine in engines:
            metric.add_metric(values(model), engine.scheduler.depth())
        yield metric
        stats = [(model, sorted(engine.cache_stats().items())) for model, engine in engines]
        for key, family, help_ in (("hits", CounterMetricFamily, "Cache hits."),
                                   ("misses", CounterMetricFamily, "Cache misses."),
                                   ("hit_ratio", GaugeMetricFamily, "Cache hit ratio."),
                                   ("size", GaugeMetricFamily, "Entries in the cache.")):
            metric = family("kime_cache_" + key, help_, labels=models + ["cache"])
            for model, caches in stats:
                for cache, figures in caches:
                    metric.add_metric(values(model) + [cache], figures[key])
            yield metric
        metric = GaugeMetricFamily("kime_memory_bytes", "Bytes the model holds on its device.",
                                   labels=models + ["kind"])
        for model, engine in engines:
            memory = engine.memory()
            metric.add_metric(values(model) + ["weights"], memory.weights)
            metric.add_metric(values(model) + ["plans"], memory.plans)
        yield metric
        if self.registered is not None:
            loaded = {model for model, _ in engines}
            metric = GaugeMetricFamily("kime_model_loaded", "1 for a checkpoint loaded now, 0 "
                                       "for one registered but not loaded.", labels=["model"])
            for model in self.registered():
                metric.add_metric([model], 1.0 if model in loaded else 0.0)
            yield metric


class Metrics:
    """The server's counters and the engines' collector, in one registry per app. With
    `registered` (a Router's names) the answer counters and engine figures are labelled by
    model."""

    def __init__(self, engines: Engines, registered: Optional[Callable[[], Sequence[str]]] = None):
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        by_model = ["model"] if registered is not None else []
        self.requests = Counter("kime_http_requests_total",
                                "HTTP requests by method, path and status.",
                                ["method", "path", "status"], registry=r)
        self.latency = Histogram("kime_http_request_duration_seconds", "HTTP request latency.",
                                 ["path"], buckets=LATENCY_BUCKETS, registry=r)
        self.in_progress = Gauge("kime_http_requests_in_progress",
                                 "HTTP requests being handled now.", ["path"], registry=r)
        self.states_answered = Counter("kime_states_answered_total", "States answered.",
                                       by_model, registry=r)
        self.truncated_questions = Counter("kime_truncated_questions_total",
                                           "Question rows whose state was cut to fit max_len.",
                                           by_model, registry=r)
        self.truncated_states = Counter("kime_truncated_states_total",
                                        "Answered states with at least one truncated question.",
                                        by_model, registry=r)
        self.rejected_busy = Counter("kime_rejected_busy_total",
                                     "Requests refused with 503 (queue full).", registry=r)
        self.disconnects = Counter("kime_client_disconnects_total",
                                   "Requests whose client hung up before the answer (their queued "
                                   "work dropped).", registry=r)
        self.by_model = bool(by_model)
        if self.by_model:
            self.loads = Counter("kime_model_loads_total", "Checkpoints the Router loaded (on "
                                 "first use, or again after an eviction or an idle unload).",
                                 ["model"], registry=r)
            self.evictions = Counter("kime_model_evictions_total", "Checkpoints the Router let "
                                     "go (max_loaded, idle unload, shutdown).", ["model"],
                                     registry=r)
        r.register(EngineCollector(engines, self.by_model, registered))

    def observe(self, method: str, path: str, status: int, seconds: float) -> None:
        """One finished HTTP request."""
        self.requests.labels(method, path, str(status)).inc()
        self.latency.labels(path).observe(seconds)

    def answered(self, results: Sequence[Dict[str, Any]]) -> None:
        """Laya result dicts sent back: states answered and the ones whose state was cut, by
        the model in each result's `routing` when the metrics are labelled by model."""
        for result in results:
            cut = len(result.get("usage", {}).get("truncated_questions") or [])
            counters = [self.states_answered, self.truncated_questions, self.truncated_states]
            if self.by_model:
                counters = [c.labels(result["routing"]["model"]) for c in counters]
            answered, questions, states = counters
            answered.inc()
            questions.inc(cut)
            states.inc(1 if cut else 0)

    def render(self) -> bytes:
        """The registry in Prometheus' text format (`CONTENT_TYPE`)."""
        return generate_latest(self.registry)


class Lifecycle:
    """A Router hook counting each checkpoint's loads and evictions into `Metrics`."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def on_load(self, ctx: Any) -> None:
        self.metrics.loads.labels(ctx.model).inc()

    def on_evict(self, ctx: Any) -> None:
        self.metrics.evictions.labels(ctx.model).inc()


def labelled_union(sheets: Sequence[Tuple[str, bytes]], label: str = "replica") -> bytes:
    """Several servers' `/metrics` texts as one, each sample labelled `label=<its server>`: what
    a scrape through a proxy answers for a deployment of several replicas, so that one scrape
    sees all the traffic (sum by the other labels for the total). A family appears once, with
    the samples of every server that has it, in the order the servers come."""
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample

    families: Dict[str, Metric] = {}
    for server, text in sheets:
        for family in text_string_to_metric_families(text.decode("utf-8")):
            merged = families.get(family.name)
            if merged is None:
                merged = families[family.name] = Metric(family.name, family.documentation,
                                                        family.type, family.unit)
            merged.samples.extend(
                Sample(s.name, {label: server, **s.labels}, s.value, s.timestamp, s.exemplar)
                for s in family.samples)

    class Union(Collector):
        def collect(self) -> Iterator[Metric]:
            return iter(families.values())

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Union())
    return generate_latest(registry)
