"""`kime serve --engine ray`: laya serve's API on Ray Serve, replicas across a cluster's nodes.

Each replica is one `kime serve` app (`create_app`, its lifespan run by Serve through uvicorn's
code) over its own engine with `threads` threads, and asks Ray for that many CPUs, so replicas x
threads never oversubscribe a node. Serve's proxy takes `--host`/`--port` and spreads requests
over the replicas; a replica's own admission (`max_queue`) still answers 503 past its bound, so
Serve's `max_ongoing_requests` is set to it (Serve's default of 5 would starve the scheduler,
which merges concurrent requests into shared forward passes), and `max_queued_requests` bounds
what waits at the proxy (503 past it).

- `/metrics` through the proxy reaches one replica; it answers for all of them. Every replica
  posts its own text to a `MetricsBoard` (one more deployment of the application, no CPUs) every
  `PUSH_S` seconds and on each scrape, and the scrape answers the board's sheets with each
  sample labelled `replica` (`metrics.labelled_union`). A replica that stops posting for
  `STALE_S` leaves the answer, as a Prometheus target that goes away does.
- Health: Serve calls `check_health` every `HEALTH_PERIOD_S`; it runs one one-row forward pass
  through each resident engine's scheduler (no cache), so a wedged or closed engine fails it and
  Serve replaces the replica.
- Sizing (`Sizing.check`) is refused up front, before anything is deployed, when the replicas do
  not fit the cluster's nodes.

`deployment(...)` gives the Serve application for `serve.run`; `run(settings)` is the command:
it connects (or starts a local Ray), checks the size, deploys, waits for SIGTERM or SIGINT, then
deletes the application (in-flight requests drain for `graceful_shutdown` seconds) and shuts Serve
down when it started it.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

from ray import serve

from .settings import ConfigError, Settings

_log = logging.getLogger("kime.serve")

APP_NAME = "kime"
PUSH_S = 1.0
"""How often a replica posts its metrics to the board."""
STALE_S = 10.0
"""A replica whose sheet is older than this has stopped (died, or was scaled away)."""
HEALTH_PERIOD_S = 5.0
HEALTH_TIMEOUT_S = 30.0
TARGET_ONGOING = 8
"""Autoscaling's target of requests in flight per replica: enough for the scheduler to merge."""
LOG_LEVELS = {"critical": "CRITICAL", "error": "ERROR", "warning": "WARNING", "info": "INFO",
              "debug": "DEBUG", "trace": "DEBUG"}
"""uvicorn's `--log-level` names as the replicas' Python logging levels."""
CONTROLLER = ("SERVE_CONTROLLER_ACTOR", "serve")
"""Serve's controller actor (name, namespace): whether Serve runs on the cluster already."""


@dataclass(frozen=True)
class Sizing:
    """How many replicas, each with `threads` threads and as many CPUs; `autoscale` (MIN, MAX)
    lets Serve choose between them, starting at `replicas`."""

    replicas: int
    threads: int
    autoscale: Optional[Tuple[int, int]] = None

    @classmethod
    def of(cls, settings: Settings) -> "Sizing":
        """The sizing the settings ask for. `--threads-per-replica` and `--threads` mean the
        same here; given both, they must agree. Neither: one thread per replica."""
        per, threads = settings.threads_per_replica, settings.threads
        if per and threads and per != threads:
            raise ConfigError("--threads-per-replica %d and --threads %d disagree: with --engine "
                              "ray they are the same setting; give one" % (per, threads))
        bounds = None
        if settings.autoscale:  # MIN:MAX, checked by the settings
            lo, hi = settings.autoscale.split(":")
            bounds = (int(lo), int(hi))
        replicas = settings.replicas
        if bounds is not None:
            if replicas is None:
                replicas = max(bounds[0], 1)
            elif not bounds[0] <= replicas <= bounds[1]:
                raise ConfigError("--replicas %d is outside --autoscale %s: with autoscaling it "
                                  "is the number to start with" % (replicas, settings.autoscale))
        return cls(replicas=1 if replicas is None else replicas, threads=per or threads or 1,
                   autoscale=bounds)

    @property
    def most(self) -> int:
        """The most replicas this sizing may run at once."""
        return self.autoscale[1] if self.autoscale else self.replicas

    def check(self, nodes: Sequence[Tuple[str, float]]) -> None:
        """Refuse (`ConfigError`) a sizing whose replicas do not fit on `nodes` (address, CPUs):
        a replica runs on one node, so each node holds floor(CPUs / threads) of them."""
        fits = sum(int(cpus // self.threads) for _, cpus in nodes)
        if self.most <= fits:
            return
        listing = ", ".join("%s %g CPU" % node for node in nodes) or "no nodes"
        raise ConfigError(
            "%d replica(s) x %d thread(s) do not fit this Ray cluster: each replica takes %d "
            "CPU(s) on one node, and its nodes (%s) hold %d. Use fewer replicas or threads, or "
            "add nodes" % (self.most, self.threads, self.threads, listing, fits))

    def options(self, settings: Settings) -> Dict[str, Any]:
        """The Serve deployment options of the replicas."""
        ongoing = settings.max_queue or 1000
        opts: Dict[str, Any] = {
            "ray_actor_options": {"num_cpus": self.threads},
            "max_ongoing_requests": ongoing,
            "max_queued_requests": settings.max_queue or -1,
            "health_check_period_s": HEALTH_PERIOD_S,
            "health_check_timeout_s": HEALTH_TIMEOUT_S,
            "graceful_shutdown_timeout_s": settings.graceful_shutdown,
            "graceful_shutdown_wait_loop_s": 0.5,
        }
        if self.autoscale:
            opts["autoscaling_config"] = {
                "min_replicas": self.autoscale[0], "max_replicas": self.autoscale[1],
                "initial_replicas": self.replicas, "target_ongoing_requests": TARGET_ONGOING}
        else:
            opts["num_replicas"] = self.replicas
        return opts


def ray_nodes() -> List[Tuple[str, float]]:
    """The live nodes of the connected cluster: (address, CPUs)."""
    import ray

    return [(node["NodeManagerAddress"], float(node["Resources"].get("CPU", 0.0)))
            for node in ray.nodes() if node.get("Alive")]


def probe(engines: Sequence[Tuple[Optional[str], Any]]) -> None:
    """Raise `RuntimeError` unless every engine answers one uncached one-row forward pass
    through its scheduler: what a request needs, so a closed or failing engine fails it (a
    wedged one runs past Serve's health check timeout). No engine at all fails too."""
    if not engines:
        raise RuntimeError("no checkpoint is loaded")
    for name, engine in engines:
        try:
            engine.warm([(1, 4, 1)])
        except Exception as e:
            raise RuntimeError("the engine%s cannot answer: %s"
                               % (" of " + name if name else "", e)) from e


class MetricsBoard:
    """The replicas' latest `/metrics` texts, by replica: one per application."""

    def __init__(self) -> None:
        self.sheets: Dict[str, Tuple[float, bytes]] = {}

    def post(self, replica: str, text: bytes) -> None:
        self.sheets[replica] = (time.monotonic(), text)

    def leave(self, replica: str) -> None:
        self.sheets.pop(replica, None)

    def read(self) -> List[Tuple[str, bytes]]:
        """Every live replica's text, oldest replica first (stale ones dropped)."""
        cutoff = time.monotonic() - STALE_S
        self.sheets = {r: s for r, s in self.sheets.items() if s[0] >= cutoff}
        return [(replica, text) for replica, (_, text) in sorted(self.sheets.items())]


@serve.ingress()
class Replica:
    """One replica: the settings' model on `threads` threads and `kime serve`'s app over it,
    whose `/metrics` answers for every replica of the application (through `board`)."""

    async def __init__(self, settings: Dict[str, Any], board: Any) -> None:  # type: ignore[misc]
        # Serve awaits an async constructor (it runs on the replica's event loop)
        from .app import create_app, load_model

        self.settings = Settings(**settings)
        self.model, name = await asyncio.to_thread(load_model, self.settings)
        self.board = board
        self.replica = serve.get_replica_context().replica_id.unique_id
        self.server = create_app(self.model, self.settings, name, gather=self.gather)
        self.poster = asyncio.ensure_future(self.post_every())

    def __serve_build_asgi_app__(self) -> Any:
        root = self.settings.root_path
        app = self.server
        if not root:
            return app

        async def rooted(scope: Dict[str, Any], receive: Any, send: Any) -> None:
            # what uvicorn does with --root-path and Serve's proxy does not: the public prefix
            if scope["type"] == "http":
                scope = dict(scope, root_path=root, path=root + scope["path"])
            await app(scope, receive, send)

        return rooted

    async def post_every(self) -> None:
        while True:
            try:
                await self.board.post.remote(self.replica, self.server.metrics.render())
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the board is being replaced; the next post will do
                _log.debug("metrics post failed: %s", e)
            await asyncio.sleep(PUSH_S)

    async def gather(self) -> bytes:
        """Every replica's metrics, labelled; this replica's own, fresh, among them."""
        from .metrics import labelled_union

        own = self.server.metrics.render()
        try:
            await self.board.post.remote(self.replica, own)
            sheets = await asyncio.wait_for(self.board.read.remote(), timeout=5.0)
        except Exception as e:  # no board: this replica's own metrics, still labelled
            _log.warning("metrics board unreachable (%s): answering this replica's only", e)
            sheets = [(self.replica, own)]
        return labelled_union(sheets)

    async def check_health(self) -> None:
        """Serve's health check (`probe`). Raising fails it; Serve then replaces this replica."""
        await asyncio.to_thread(probe, self.server.service.served.engines())

    async def __del__(self) -> None:
        if not hasattr(self, "poster"):  # the constructor failed before it started posting
            return
        self.poster.cancel()
        try:
            await self.board.leave.remote(self.replica)
        except Exception:  # the board may be gone first: its sheet goes stale anyway
            pass


def deployment(model: Optional[str] = None, *, replicas: Optional[int] = None,
               threads_per_replica: int = 1,
               autoscale: Optional[str] = None, settings: Optional[Settings] = None) -> Any:
    """The Serve application (`serve.run(app, route_prefix="/")`) of `kime serve` over `model`
    (a source `kime.load` takes; None: the checkpoints `settings` name, or Laya's Router), in
    `replicas` replicas (default 1) of `threads_per_replica` threads and CPUs each, or between
    the bounds of `autoscale` (`"MIN:MAX"`, starting at `replicas`, default MIN or 1).
    `settings` are the other `kime serve` settings. Raises `ConfigError` for a size that does
    not parse or agree with itself."""
    base = (settings or Settings()).model_copy()
    values = base.model_dump()
    if model is not None:
        values["model"] = [model]
    values.update(replicas=replicas, threads_per_replica=threads_per_replica, threads=0,
                  autoscale=autoscale or base.autoscale)
    chosen = Settings(**values)
    return application(chosen, Sizing.of(chosen))


def application(settings: Settings, sizing: Sizing) -> Any:
    """The Serve application: the board, and the replicas bound to it."""
    values = settings.model_dump()
    # the size is the deployment's, not the replicas': a new size is then a config change that
    # Serve applies by adding or draining replicas, not a new version that replaces them all
    values.update(threads=sizing.threads, threads_per_replica=0, replicas=None, autoscale=None,
                  engine="local", ray_address=None)
    board: Any = serve.deployment(MetricsBoard, name="MetricsBoard", num_replicas=1,
                                  ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000)
    logs = {"log_level": LOG_LEVELS.get(settings.log_level.lower(), "INFO")}
    replica: Any = serve.deployment(Replica, name="KimeServe", logging_config=logs,
                                    **sizing.options(settings))
    return replica.bind(values, board.bind())


def serve_running() -> bool:
    """Whether Serve's controller runs on the connected cluster."""
    import ray

    try:
        ray.get_actor(CONTROLLER[0], namespace=CONTROLLER[1])
    except ValueError:
        return False
    return True


def run(settings: Settings) -> None:
    """`kime serve --engine ray`: connect to `ray_address` (none: start a local Ray on this
    machine, never another's), refuse a sizing that does not fit, deploy, and serve until SIGTERM
    or SIGINT; then delete the application, draining requests in flight, and shut Serve down
    if this command started it."""
    import ray

    sizing = Sizing.of(settings)
    address = settings.ray_address or os.environ.get("RAY_ADDRESS") or "local"
    ray.init(address=address, include_dashboard=False if address == "local" else None,
             logging_level=logging.WARNING)
    stop = threading.Event()
    started = False
    try:
        sizing.check(ray_nodes())
        started = not serve_running()
        serve.start(http_options={"host": settings.host, "port": settings.port})
        previous = {s: signal.signal(s, lambda *_: stop.set())
                    for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            try:
                serve.run(application(settings, sizing), name=APP_NAME, route_prefix="/",
                          blocking=False)
            except Exception as e:  # Serve's text ends with the replica's own error
                last = [line for line in str(e).splitlines() if line.strip()][-1:]
                raise RuntimeError("the replicas did not start: %s" % (
                    last[0].strip() if last else type(e).__name__)) from e
            print("kime serve on Ray Serve at http://%s:%d: %s replica(s) x %d thread(s)"
                  % (settings.host, settings.port,
                     "%d-%d" % sizing.autoscale if sizing.autoscale else sizing.replicas,
                     sizing.threads), flush=True)
            while not stop.wait(0.5):
                pass
            _log.info("stopping: draining requests in flight, deleting the replicas")
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            serve.delete(APP_NAME)  # waits for the replicas' graceful shutdown
    finally:
        try:
            if started and serve_running():
                serve.shutdown()
        finally:
            ray.shutdown()


__all__ = ["APP_NAME", "MetricsBoard", "Replica", "Sizing", "application", "deployment", "probe",
           "run"]
