"""The Router's loaded engines: an LRU of at most `max_loaded` agents, thread-safe, where two
callers needing the same unloaded checkpoint share one build, and an agent evicted while a call
is using it finishes that call before it is let go.

Letting go of an agent is Laya's (drop the reference, collect) plus one step of kime's own: an
engine keeps a scheduler thread, and a running thread holds the weights alive, so a released
agent's thread is stopped. The engine starts a new one if somebody still holding the agent calls
it again, so a caller who kept what `Router.load` returned keeps a working agent, as in Laya.
"""
from __future__ import annotations

import gc
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

Evicted = List[Tuple[str, Any]]


class _Build:
    """A build in flight: waiters block on `done` and see `error` if it failed."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: Optional[BaseException] = None


def release_engine(agent: Any) -> None:
    """Stop `agent`'s scheduler thread, the only thing that holds its weights besides the
    references callers keep (the engine restarts it on the next call, if there is one)."""
    scheduler = getattr(getattr(agent, "engine", None), "scheduler", None)
    if scheduler is not None:
        scheduler.close()


class Residents:
    """Loaded agents by checkpoint name, least recently used first.

    `lock` guards every table and is never held while an agent is built; `build_lock` lets one
    build run at a time, so peak memory is one checkpoint above what is resident. An agent is
    leased for the length of a call (`acquire` / `release`); eviction never waits for a lease,
    it only defers letting the agent go until the last one is returned.
    """

    def __init__(self, max_loaded: int):
        self.max_loaded = max_loaded
        self.lock = threading.RLock()
        self.build_lock = threading.Lock()
        self.agents: Dict[str, Any] = {}
        self.order: List[str] = []
        self.last_used: Dict[str, float] = {}
        self.loading: Dict[str, _Build] = {}
        self._leases: Dict[int, int] = {}
        self._retired: Dict[int, Any] = {}

    # --- reading and leasing ----------------------------------------------------------------

    def touch(self, key: str) -> None:
        with self.lock:
            if key in self.order:
                self.order.remove(key)
            self.order.append(key)
            self.last_used[key] = time.monotonic()

    def _take(self, key: str, lease: bool) -> Optional[Any]:
        agent = self.agents.get(key)
        if agent is not None:
            self.touch(key)
            if lease:
                self._leases[id(agent)] = self._leases.get(id(agent), 0) + 1
        return agent

    def acquire(self, key: str, build: Callable[[], Any], lease: bool
                ) -> Tuple[Any, bool, Evicted]:
        """The agent for `key`, building it once however many callers ask at the same time:
        (agent, whether this call built it, what the build evicted). With `lease`, the agent is
        leased in the same critical section that finds or inserts it, so it cannot be let go
        between the two."""
        while True:
            with self.lock:
                agent = self._take(key, lease)
                if agent is not None:
                    return agent, False, []
                pending = self.loading.get(key)
                if pending is None:
                    pending = self.loading[key] = _Build()
                    break
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
        try:
            with self.build_lock:
                with self.lock:
                    agent = self._take(key, lease)  # attached while this call waited
                if agent is None:
                    built = build()
                    with self.lock:
                        agent = self._take(key, lease)  # attached while it was building
                        if agent is None:
                            self.agents[key] = built
                            agent = self._take(key, lease)
                            return agent, True, self.evict_locked()
                        return agent, False, []
                return agent, False, []
        except BaseException as exc:
            pending.error = exc
            raise
        finally:
            with self.lock:
                if self.loading.get(key) is pending:
                    del self.loading[key]
            pending.done.set()

    def release(self, agent: Any) -> None:
        """Return a lease; the last one returned lets an evicted agent go."""
        with self.lock:
            left = self._leases.get(id(agent), 0) - 1
            if left > 0:
                self._leases[id(agent)] = left
                return
            self._leases.pop(id(agent), None)
            retired = self._retired.pop(id(agent), None)
        if retired is not None:
            _let_go([retired])

    # --- eviction ---------------------------------------------------------------------------

    def evict_locked(self) -> Evicted:
        """Take out least recently used agents until `max_loaded` hold; call under `lock`."""
        evicted: Evicted = []
        while len(self.order) > self.max_loaded:
            evicted.append(self._pop_locked(self.order[0]))
        return evicted

    def _pop_locked(self, key: str) -> Tuple[str, Any]:
        if key in self.order:
            self.order.remove(key)
        self.last_used.pop(key, None)
        return key, self.agents.pop(key, None)

    def let_go(self, evicted: Evicted) -> List[str]:
        """Release what was evicted (now, or when its last lease returns); the names freed."""
        idle = []
        with self.lock:
            for _, agent in evicted:
                if agent is None or any(a is agent for a in self.agents.values()):
                    continue
                if self._leases.get(id(agent)):
                    self._retired[id(agent)] = agent
                else:
                    idle.append(agent)
        _let_go(idle)
        return [name for name, agent in evicted if agent is not None]

    def attach(self, key: str, agent: Any) -> Evicted:
        """Make `agent` the resident for `key`, growing `max_loaded` to hold it; returns the
        agent it replaced, for `let_go`."""
        with self.lock:
            replaced = self.agents.get(key)
            self.agents[key] = agent
            self.touch(key)
            self.max_loaded = max(self.max_loaded, len(self.agents))
        return [(key, replaced)] if replaced is not None and replaced is not agent else []

    def wait_builds(self, key: Optional[str]) -> None:
        """Block until no build of `key` (of anything, for None) is in flight."""
        while True:
            with self.lock:
                pending = [b for k, b in self.loading.items() if key is None or k == key]
            if not pending:
                return
            for build in pending:
                build.done.wait()

    def remove(self, key: Optional[str]) -> Evicted:
        """Take `key` (every agent, for None) out, once no build of it is in flight."""
        while True:
            self.wait_builds(key)
            with self.lock:
                if any(key is None or k == key for k in self.loading):
                    continue
                keys = list(self.order) if key is None else [key]
                return [item for item in (self._pop_locked(k) for k in keys)
                        if item[1] is not None]

    def idle(self, seconds: float) -> Evicted:
        """Take out every agent unused for `seconds` that no call holds."""
        cutoff = time.monotonic() - seconds
        with self.lock:
            stale = [k for k in self.order if self.last_used.get(k, cutoff) < cutoff
                     and not self._leases.get(id(self.agents[k])) and k not in self.loading]
            return [self._pop_locked(k) for k in stale]


def _let_go(agents: List[Any]) -> None:
    for agent in agents:
        release_engine(agent)
    if agents:
        gc.collect()  # Laya collects on eviction too: the weights go now, not at the next cycle


def start_reaper(owner: Any, seconds: float, reap: Callable[[Any, float], None]) -> None:
    """Call `reap(owner, seconds)` every few seconds on a daemon thread that holds `owner` only
    weakly, and ends when `owner` is collected."""
    stop = threading.Event()
    ref = weakref.ref(owner)
    interval = max(0.05, min(seconds / 4.0, 5.0))

    def loop() -> None:
        while not stop.wait(interval):
            target = ref()
            if target is None:
                return
            reap(target, seconds)
            del target

    weakref.finalize(owner, stop.set)
    threading.Thread(target=loop, name="kime-router-idle", daemon=True).start()
