"""`kime serve`: Laya 0.4.15's HTTP API (`laya-serve`) over one kime engine, on FastAPI + uvicorn.

`POST /v1/systemone` and `POST /v1/systemone/batch` take laya-serve's request bodies and answer
its response bodies, status codes and `detail` texts; the answers are `kime.Agent.predict` /
`predict_batch`'s, so they equal in-process calls. The forward pass never runs on the event loop:
each request is laid out on a worker thread and its rows go to the engine's scheduler, which
merges concurrent callers into shared backend batches.

Imported only when serving: `import kime` must work without fastapi installed.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import os
import re
import threading
import time
import uuid
from bisect import bisect_left
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from .errors import InvalidRequest

_log = logging.getLogger("kime.server")

# laya-serve's limits (laya/serve.py), with its messages.
MAX_QUESTIONS = 64
MAX_STATE_CHARS = 50000
MAX_BATCH_STATES = 64
MAX_BODY_BYTES = 2 * 1024 * 1024
MAX_CHOICE_OPTIONS = 100
MAX_SCORE_LEVELS = 32
MAX_TOTAL_OPTIONS = 512
DEFAULT_MAX_TOKEN_BUDGET = 8192
BODY_READ_TIMEOUT = 10.0
BODY_REFUSALS = ("hooks", "on_predict_start", "on_predict_end", "hooks_raise", "hooks_timeout")
BATCH_BODY_OUT_PARAMETERS = ("diagnostics",)
LIVENESS_ONLY = {"status": "ok"}
UNAUTHORIZED = "invalid or missing bearer token"
BUSY = "server busy, try again later"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")
_LONE_SURROGATE_DETAIL = ("request body contains an unpaired surrogate escape; "
                          "those cannot be encoded as UTF-8")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


# --- configuration ------------------------------------------------------------------------------

@dataclass
class Settings:
    """What `kime serve` runs with. Precedence: flags > env > TOML file > these defaults."""

    model: str = "laya"
    host: str = "127.0.0.1"
    port: int = 8000
    device: str = "auto"
    precision: str = "f16"
    threads: int = 0
    api_key_file: Optional[str] = None
    api_keys: List[str] = field(default_factory=list)
    max_queue: int = 256
    max_merge: int = 0                     # submissions one forward run takes; 0: all that fit
    max_token_budget: int = DEFAULT_MAX_TOKEN_BUDGET
    body_read_timeout: float = BODY_READ_TIMEOUT
    workers: int = 32                      # threads that lay requests out (not forward passes)
    graceful_shutdown: float = 30.0       # seconds requests in flight get after SIGTERM
    log_level: str = "info"


# setting -> environment variables, first set wins (KIME_* before laya's equivalent).
ENV = {
    "model": ("KIME_MODEL",),
    "host": ("KIME_HOST", "LAYA_HOST"),
    "port": ("KIME_PORT", "LAYA_PORT"),
    "device": ("KIME_DEVICE", "LAYA_DEVICE"),
    "precision": ("KIME_PRECISION",),
    "threads": ("KIME_THREADS", "LAYA_THREADS"),
    "api_key_file": ("KIME_API_KEY_FILE",),
    "max_queue": ("KIME_MAX_QUEUE",),
    "max_merge": ("KIME_MAX_MERGE",),
    "max_token_budget": ("KIME_MAX_TOKEN_BUDGET", "LAYA_MAX_TOKEN_BUDGET"),
    "body_read_timeout": ("KIME_BODY_READ_TIMEOUT", "LAYA_BODY_READ_TIMEOUT"),
    "workers": ("KIME_WORKERS",),
    "graceful_shutdown": ("KIME_GRACEFUL_SHUTDOWN",),
    "log_level": ("KIME_LOG_LEVEL", "LAYA_LOG_LEVEL"),
}
KEY_ENV = ("KIME_API_KEY", "LAYA_API_KEY")


class ConfigError(ValueError):
    """A setting that does not parse (a flag, an environment variable or the TOML file)."""


def _coerce(name: str, value: Any, source: str) -> Any:
    kind = {f.name: f.type for f in fields(Settings)}[name]
    try:
        if kind == "int":
            if isinstance(value, bool):
                raise ValueError
            out: Any = int(value)
            if name == "port" and not 0 <= out <= 65535:
                raise ValueError
            if name in ("threads", "max_queue", "max_merge") and out < 0:
                raise ValueError
            if name in ("workers", "max_token_budget") and out < 1:
                raise ValueError
            return out
        if kind == "float":
            out = float(value)
            if not math.isfinite(out) or out < 0:
                raise ValueError
            return out
        if kind == "List[str]":
            if isinstance(value, str):
                return [value]
            return [str(v) for v in value]
        return None if value is None else str(value)
    except (TypeError, ValueError):
        raise ConfigError("invalid %s %r for %s" % (source, value, name)) from None


def load_settings(flags: Optional[Dict[str, Any]] = None, config: Optional[str] = None,
                  environ: Optional[Dict[str, str]] = None) -> Settings:
    """Settings from flags (None = not given) > environment > TOML file (`[serve]` table, or
    the top level) > defaults; then the API keys from the key file and KIME_API_KEY/LAYA_API_KEY."""
    environ = dict(os.environ if environ is None else environ)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    config = config or environ.get("KIME_CONFIG") or None
    settings = Settings()
    names = {f.name for f in fields(Settings)}
    if config:
        try:
            import tomllib
        except ImportError:  # Python 3.10
            import tomli as tomllib  # type: ignore[no-redef,import-not-found]

        try:
            with open(config, "rb") as cf:
                data = tomllib.load(cf)
        except OSError as e:
            raise ConfigError("cannot read --config %s: %s" % (config, e.strerror)) from e
        except tomllib.TOMLDecodeError as e:
            raise ConfigError("--config %s is not TOML: %s" % (config, e)) from e
        table = data.get("serve", data)
        if "api_key" in table:
            table = dict(table, api_keys=table["api_key"])
        unknown = sorted(k for k in table if k not in names and k != "api_key" and k != "serve")
        if unknown:
            raise ConfigError("--config %s: unknown setting(s) %s" % (config, ", ".join(unknown)))
        for k, v in table.items():
            if k in names:
                setattr(settings, k, _coerce(k, v, "config value"))
    for k, env_names in ENV.items():
        for env in env_names:
            raw = environ.get(env, "").strip()
            if raw:
                setattr(settings, k, _coerce(k, raw, "environment variable %s" % env))
                break
    for k, v in flags.items():
        if k in names:
            setattr(settings, k, _coerce(k, v, "flag value"))
    keys = list(settings.api_keys)
    if settings.api_key_file:
        try:
            with open(settings.api_key_file, encoding="utf-8") as kf:
                keys += [line.strip() for line in kf
                         if line.strip() and not line.strip().startswith("#")]
        except OSError as e:
            raise ConfigError("cannot read the API key file %s: %s"
                              % (settings.api_key_file, e.strerror)) from e
    for env in KEY_ENV:
        if environ.get(env, "").strip():
            keys.append(environ[env].strip())
    settings.api_keys = keys
    return settings


# --- metrics ------------------------------------------------------------------------------------

class Metrics:
    """Counters for `/metrics`, in the Prometheus text format. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Dict[Tuple[str, str, int], int] = {}
        self.latency: Dict[str, List[float]] = {}   # path -> [bucket counts..., sum, count]
        self.truncated_questions = 0
        self.truncated_requests = 0
        self.answered_states = 0
        self.rejected_busy = 0
        self.disconnected = 0

    def observe(self, method: str, path: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (method, path, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            h = self.latency.setdefault(path, [0.0] * (len(_LATENCY_BUCKETS) + 2))
            i = bisect_left(_LATENCY_BUCKETS, seconds)
            if i < len(_LATENCY_BUCKETS):
                h[i] += 1
            h[-2] += seconds
            h[-1] += 1

    def answered(self, results: Sequence[Dict[str, Any]]) -> None:
        with self._lock:
            for r in results:
                self.answered_states += 1
                cut = r.get("usage", {}).get("truncated_questions") or []
                self.truncated_questions += len(cut)
                self.truncated_requests += 1 if cut else 0

    def render(self, engine: Any) -> str:
        out: List[str] = []

        def metric(name: str, kind: str, help_: str, samples: Sequence[Tuple[str, Any]]) -> None:
            out.append("# HELP %s %s" % (name, help_))
            out.append("# TYPE %s %s" % (name, kind))
            for labels, value in samples:
                out.append("%s%s %s" % (name, labels, _num(value)))

        with self._lock:
            metric("kime_http_requests_total", "counter", "HTTP requests by method, path and status.",
                   [('{method="%s",path="%s",status="%d"}' % (m, _esc(p), s), n)
                    for (m, p, s), n in sorted(self.requests.items())])
            out.append("# HELP kime_http_request_duration_seconds HTTP request latency.")
            out.append("# TYPE kime_http_request_duration_seconds histogram")
            for path, h in sorted(self.latency.items()):
                acc = 0.0
                for bound, n in zip(_LATENCY_BUCKETS, h):
                    acc += n
                    out.append('kime_http_request_duration_seconds_bucket{path="%s",le="%s"} %s'
                               % (_esc(path), _num(bound), _num(acc)))
                out.append('kime_http_request_duration_seconds_bucket{path="%s",le="+Inf"} %s'
                           % (_esc(path), _num(h[-1])))
                out.append('kime_http_request_duration_seconds_sum{path="%s"} %s'
                           % (_esc(path), _num(h[-2])))
                out.append('kime_http_request_duration_seconds_count{path="%s"} %s'
                           % (_esc(path), _num(h[-1])))
            metric("kime_states_answered_total", "counter", "States answered.",
                   [("", self.answered_states)])
            metric("kime_truncated_questions_total", "counter",
                   "Question rows whose state was cut to fit max_len.",
                   [("", self.truncated_questions)])
            metric("kime_truncated_states_total", "counter",
                   "Answered states with at least one truncated question.",
                   [("", self.truncated_requests)])
            metric("kime_rejected_busy_total", "counter", "Requests refused with 503 (queue full).",
                   [("", self.rejected_busy)])
            metric("kime_client_disconnects_total", "counter",
                   "Requests whose client hung up before the answer (their queued work dropped).",
                   [("", self.disconnected)])
        sched = engine.scheduler
        metric("kime_scheduler_runs_total", "counter",
               "Forward runs of the scheduler, each over one or more merged requests.",
               [("", sched.runs)])
        metric("kime_scheduler_batches_total", "counter", "Backend batches run.",
               [("", sched.batches)])
        metric("kime_scheduler_rows_total", "counter", "Rows (one per question and state) run.",
               [("", sched.rows)])
        metric("kime_scheduler_merged_total", "counter",
               "Submissions merged into another caller's batch.", [("", sched.merged)])
        metric("kime_scheduler_dropped_total", "counter",
               "Submissions dropped before their forward pass (caller gone).", [("", sched.dropped)])
        metric("kime_queue_depth", "gauge", "Submissions waiting for the device.",
               [("", sched.depth())])
        stats = engine.cache_stats()
        for key, kind, help_ in (("hits", "counter", "Cache hits."),
                                 ("misses", "counter", "Cache misses."),
                                 ("hit_ratio", "gauge", "Cache hit ratio."),
                                 ("size", "gauge", "Entries in the cache.")):
            name = "kime_cache_%s" % key + ("_total" if kind == "counter" else "")
            metric(name, kind, help_, [('{cache="%s"}' % c, s[key]) for c, s in sorted(stats.items())])
        mem = engine.memory()
        metric("kime_memory_bytes", "gauge", "Bytes the model holds on its device.",
               [('{kind="weights"}', mem.weights), ('{kind="plans"}', mem.plans)])
        return "\n".join(out) + "\n"


def _num(v: Any) -> str:
    v = float(v)
    return str(int(v)) if v.is_integer() else repr(v)


def _esc(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Observe:
    """ASGI middleware: `x-request-id` on every response (the client's, or a new one) and the
    request counters/latency for `/metrics`."""

    def __init__(self, app: Any, metrics: Metrics, paths: Sequence[str]):
        self.app = app
        self.metrics = metrics
        self.paths = set(paths)

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = b""
        for k, v in scope.get("headers", []):
            if k == b"x-request-id":
                rid = v
                break
        if not rid or len(rid) > 200 or not all(33 <= c < 127 for c in rid):
            rid = uuid.uuid4().hex.encode()
        scope.setdefault("state", {})["request_id"] = rid.decode()
        t0 = time.perf_counter()
        status = [500]

        async def wrapped(message: Dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"x-request-id"]
                headers.append((b"x-request-id", rid))
                message = dict(message, headers=headers)
            await send(message)

        try:
            await self.app(scope, receive, wrapped)
        finally:
            path = scope.get("path", "")
            self.metrics.observe(scope.get("method", ""), path if path in self.paths else "other",
                                 status[0], time.perf_counter() - t0)


# --- laya-serve's request checks ----------------------------------------------------------------

def _state_length(state: Any) -> int:
    if isinstance(state, str):
        return len(state)
    try:
        return len(json.dumps(state, ensure_ascii=False))
    except (TypeError, ValueError, RecursionError):
        raise HTTPException(status_code=400, detail="'state' must be JSON-serializable")


def check_request_limits(state: Any, questions: Any) -> None:
    """laya-serve's `_check_request_limits`: 400 for a missing state or non-object questions,
    413 for too many questions/options or too long a state, 422 for a null score level."""
    if state is None:
        raise HTTPException(status_code=400, detail="'state' is required")
    if not isinstance(questions, dict):
        raise HTTPException(status_code=400, detail="'questions' must be an object")
    if len(questions) > MAX_QUESTIONS:
        raise HTTPException(status_code=413,
                            detail="too many questions (%d > %d)" % (len(questions), MAX_QUESTIONS))
    total = 0
    for qid, question in questions.items():
        if not isinstance(question, dict):
            continue
        crit, qtype = question.get("criteria"), question.get("type")
        if qtype == "choice" and isinstance(crit, (dict, list)):
            total += len(crit)
            if len(crit) > MAX_CHOICE_OPTIONS:
                raise HTTPException(status_code=413, detail="too many choice options for %r (%d > %d)"
                                    % (qid, len(crit), MAX_CHOICE_OPTIONS))
        elif qtype == "score" and isinstance(crit, list):
            total += len(crit)
            if len(crit) > MAX_SCORE_LEVELS:
                raise HTTPException(status_code=413, detail="too many score levels for %r (%d > %d)"
                                    % (qid, len(crit), MAX_SCORE_LEVELS))
            if None in crit:
                raise HTTPException(status_code=422, detail=(
                    "score question %r has a null level at index %d; give every level a "
                    "description" % (qid, crit.index(None))))
    if total > MAX_TOTAL_OPTIONS:
        raise HTTPException(status_code=413, detail="too many answer options across questions "
                            "(%d > %d)" % (total, MAX_TOTAL_OPTIONS))
    n = _state_length(state)
    if n > MAX_STATE_CHARS:
        raise HTTPException(status_code=413,
                            detail="state too large (%d > %d chars)" % (n, MAX_STATE_CHARS))


def check_batch_limits(states: Any, questions: Any) -> None:
    if not isinstance(states, list) or len(states) == 0:
        raise HTTPException(status_code=400, detail="'states' must be a non-empty list")
    if len(states) > MAX_BATCH_STATES:
        raise HTTPException(status_code=413, detail="too many states in batch (%d > %d)"
                            % (len(states), MAX_BATCH_STATES))
    for state in states:
        check_request_limits(state, questions)


def check_model(requested: Any, served: str) -> None:
    """A request may name the model this server runs, or a name that pins nothing (a Jev id
    such as "jev-1", which laya serve routes automatically). Naming another checkpoint -- one of
    Laya's aliases or a path or Hub id -- is a 422: answering it with this model would be a
    wrong answer, not a routing choice."""
    if requested is None or not isinstance(requested, str) or not requested.strip():
        return
    text = requested.strip()
    if text == served or text.lower() == served.lower():
        return
    from .hub import ALIASES, MODELS

    key = text.lower()
    if key in ALIASES or key in MODELS or "/" in text or "\\" in text:
        raise HTTPException(status_code=422, detail=(
            "unknown model %r: this server runs %r only; omit model, or send it to a server that "
            "runs %r" % (text, served, text)))


def _refusals(body: Dict[str, Any], batch: bool) -> None:
    given = sorted(k for k in BODY_REFUSALS if body.get(k) is not None)
    if given:
        raise HTTPException(status_code=422, detail=(
            "%s run inside the server process and cannot be sent to this endpoint; "
            "install them where laya-serve runs, or drop them" % ", ".join(given)))
    if batch:
        given = sorted(k for k in BATCH_BODY_OUT_PARAMETERS if body.get(k) is not None)
        if given:
            raise HTTPException(status_code=422, detail=(
                "%s is filled in place for an in-process caller and cannot be returned over "
                "HTTP; read the per-group report from the CLI or a local Router" % ", ".join(given)))


def _has_lone_surrogate(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if _LONE_SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def _budget(body: Dict[str, Any], key: str, cap: int) -> Optional[int]:
    val = body.get(key)
    if val is None:
        return None
    if not isinstance(val, int) or isinstance(val, bool):
        raise HTTPException(status_code=422, detail="%s must be an integer" % key)
    if val <= 0:
        raise HTTPException(status_code=422, detail="%s must be a positive integer" % key)
    if val > cap:
        raise HTTPException(status_code=422,
                            detail="%s exceeds server limit (%d > %d)" % (key, val, cap))
    return val


def _controls(body: Dict[str, Any], batch: bool) -> None:
    """laya's other body controls: validated as laya does; routing ones are moot with one model."""
    for key in ("lang", "lang_guess"):
        if body.get(key) is not None and not isinstance(body[key], str):
            raise HTTPException(status_code=422,
                                detail='%s must be a language code string such as "de", or null' % key)
    if body.get("min_confidence") is not None:
        raise HTTPException(status_code=422, detail="min_confidence is not supported by kime serve; "
                            "filter on each answer's answer_confidence instead")
    if body.get("model") is not None and not isinstance(body["model"], str):
        raise HTTPException(status_code=422, detail="model must be a string, or omit model to let "
                            "the router choose")
    if batch:
        val = body.get("batch_size")
        if val is not None:
            if not isinstance(val, int) or isinstance(val, bool):
                raise HTTPException(status_code=422, detail="batch_size must be an integer")
            if val < 1:
                raise HTTPException(status_code=422,
                                    detail="batch_size must be a positive integer, got %r" % (val,))
        val = body.get("sort_by_length")
        if val is not None and not isinstance(val, bool):
            raise HTTPException(status_code=422, detail="sort_by_length must be a boolean")


def jev_confidence(answer: Dict[str, Any]) -> Optional[float]:
    """laya's `x_jev_confidence` (TypeSafe Jev's confidence formula) for a choice/score answer."""
    kind, probs = answer.get("type"), answer.get("probabilities")
    if kind not in ("choice", "score") or not isinstance(probs, dict) or not probs:
        return None
    try:
        p = ([float(probs[k]) for k in sorted(probs, key=int)] if kind == "score"
             else [float(v) for v in probs.values()])
    except (TypeError, ValueError):
        return None
    if any(isinstance(v, bool) for v in probs.values()) or not all(
            math.isfinite(v) and v >= 0.0 for v in p):
        return None
    n = len(p)
    if n == 1:
        return 1.0
    total = sum(p)
    p = [v / total for v in p] if total else [1.0 / n] * n
    if kind == "choice":
        return (max(p) - 1.0 / n) / (1.0 - 1.0 / n)
    mode = max(range(n), key=p.__getitem__)
    spread = sum(v * abs(i - mode) for i, v in enumerate(p))
    center = (n - 1) / 2
    uniform = sum(abs(i - center) for i in range(n)) / n
    return max(0.0, 1.0 - spread / uniform)


def with_jev_confidence(result: Dict[str, Any]) -> Dict[str, Any]:
    """What laya-serve sends for a predict() result: `x_jev_confidence` on choice/score answers."""
    if not isinstance(result.get("answers"), dict):
        return result
    answers = {}
    for qid, a in result["answers"].items():
        conf = jev_confidence(a) if isinstance(a, dict) else None
        answers[qid] = a if conf is None else {**a, "x_jev_confidence": round(conf, 4)}
    return {**result, "answers": answers}


# --- the app ------------------------------------------------------------------------------------

def create_app(engine: Any, settings: Optional[Settings] = None) -> Any:
    """The ASGI app over a loaded `kime.Kime`. The engine is closed when the app shuts down."""
    from .laya import Agent

    settings = settings or Settings(model=engine.model_id)
    agent = Agent(engine)
    metrics = Metrics()
    expected = [("Bearer " + k).encode("utf-8", "surrogateescape") for k in settings.api_keys]
    pool: Optional[ThreadPoolExecutor] = None

    def authorized(request: Request) -> bool:
        if not expected:
            return True
        supplied = (request.headers.get("authorization") or "").encode("utf-8", "surrogateescape")
        ok = False
        for key in expected:  # every key, so the time does not say which one came close
            ok |= hmac.compare_digest(supplied, key)
        return ok

    def check_auth(request: Request) -> None:
        if not authorized(request):
            raise HTTPException(status_code=401, detail=UNAUTHORIZED)

    def admit() -> None:
        if settings.max_queue and engine.scheduler.depth() >= settings.max_queue:
            metrics.rejected_busy += 1
            raise HTTPException(status_code=503, detail=BUSY, headers={"Retry-After": "1"})

    async def read_json(request: Request) -> Any:
        length = request.headers.get("content-length")
        if length:
            try:
                if int(length) > MAX_BODY_BYTES:
                    raise HTTPException(status_code=413, detail="request body too large")
            except ValueError:
                pass

        async def collect() -> bytes:
            total, chunks = 0, []
            async for chunk in request.stream():
                total += len(chunk)
                if total > MAX_BODY_BYTES:
                    raise HTTPException(status_code=413, detail="request body too large")
                chunks.append(chunk)
            return b"".join(chunks)

        try:
            raw = await asyncio.wait_for(collect(), timeout=settings.body_read_timeout or None)
        except asyncio.TimeoutError:
            raise HTTPException(status_code=408,
                                detail="request body was not received in time") from None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise HTTPException(status_code=400, detail="request body must be valid JSON") from None

    async def until_done_or_gone(request: Request, work: Any) -> Any:
        """Await `work`, cancelling it if the client hangs up first: rows still queued for the
        device are then dropped instead of costing a forward pass nobody will read."""
        task = asyncio.ensure_future(work)
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.05)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                metrics.disconnected += 1
                raise HTTPException(status_code=499, detail="client closed the request")

    async def infer(request: Request, work: Any) -> Tuple[Any, float]:
        t0 = time.perf_counter()
        try:
            out = await until_done_or_gone(request, work)
        except InvalidRequest as e:
            # laya answers a ValueError from predict with 422 and `detail: str(e)`; kime's text is
            # laya's for one problem and lists them all for several. `problems` adds every problem
            # in FastAPI's format (loc, msg, type, input).
            raise HTTPException(status_code=422, detail=str(e)) from _Problems(e.problems)
        except HTTPException:
            raise
        except Exception:
            _log.exception("inference failed")
            raise HTTPException(status_code=500, detail="inference failed") from None
        return out, (time.perf_counter() - t0) * 1000.0

    def timed(content: Any, ms: float) -> JSONResponse:
        return JSONResponse(content=content, headers={"Server-Timing": "inference;dur=%.2f" % ms,
                                                      "X-Inference-Time-Ms": "%.2f" % ms})

    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def lifespan(_app: Any):
        nonlocal pool
        pool = ThreadPoolExecutor(max_workers=settings.workers, thread_name_prefix="kime-serve")
        # Validation and layout run on this bounded pool; the forward pass on the scheduler.
        asyncio.get_running_loop().set_default_executor(pool)
        try:
            yield
        finally:
            pool.shutdown(wait=True)
            engine.close()

    app = FastAPI(title="kime serve", lifespan=lifespan,
                  docs_url=None if expected else "/docs", redoc_url=None if expected else "/redoc",
                  openapi_url=None if expected else "/openapi.json")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        body: Dict[str, Any] = {"detail": exc.detail}
        if isinstance(exc.__cause__, _Problems):
            body["problems"] = exc.__cause__.problems
        return JSONResponse(body, status_code=exc.status_code, headers=exc.headers)

    def facts() -> Dict[str, Any]:
        return {"model": engine.model_id, "device": engine.device}

    @app.get("/health")
    def health(request: Request) -> Dict[str, Any]:
        if not authorized(request):
            return dict(LIVENESS_ONLY)
        return {"status": "ok", **facts(), "loaded": [engine.model_id]}

    @app.get("/ready")
    def ready(request: Request) -> Any:
        depth = engine.scheduler.depth()
        busy = bool(settings.max_queue) and depth >= settings.max_queue
        if not authorized(request):
            body: Dict[str, Any] = {"status": "busy" if busy else "ready"}
        else:
            body = {"status": "busy" if busy else "ready", "loaded": [engine.model_id],
                    "device": engine.device, "queue_depth": depth,
                    "max_queue": settings.max_queue}
        return JSONResponse(body, status_code=503 if busy else 200,
                            headers={"Retry-After": "1"} if busy else None)

    @app.get("/v1/models")
    def models(request: Request) -> Dict[str, Any]:
        check_auth(request)
        return {"object": "list", "data": [{"id": engine.model_id, "object": "model",
                                            "owned_by": "kime", "device": engine.device,
                                            "max_row_tokens": engine.max_row_tokens}]}

    @app.get("/metrics")
    def prometheus(request: Request) -> PlainTextResponse:
        check_auth(request)
        return PlainTextResponse(metrics.render(engine),
                                 media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/systemone")
    async def systemone(request: Request) -> Any:
        check_auth(request)
        admit()
        body = await read_json(request)
        if not isinstance(body, dict) or "questions" not in body:
            raise HTTPException(status_code=400,
                                detail="request body must be an object with a 'questions' field")
        state: Any = body.get("state")
        questions = body["questions"]
        check_request_limits(state, questions)
        _refusals(body, batch=False)
        if _has_lone_surrogate(body):
            raise HTTPException(status_code=400, detail=_LONE_SURROGATE_DETAIL)
        _controls(body, batch=False)
        check_model(body.get("model"), engine.model_id)
        max_len = _budget(body, "max_len", settings.max_token_budget)
        head_max_len = _budget(body, "head_max_len", settings.max_token_budget)
        result, ms = await infer(request, agent.predict_async(
            state, questions, max_len=max_len, head_max_len=head_max_len))
        metrics.answered([result])
        return timed(with_jev_confidence(result), ms)

    @app.post("/v1/systemone/batch")
    async def systemone_batch(request: Request) -> Any:
        check_auth(request)
        admit()
        body = await read_json(request)
        if not isinstance(body, dict) or "questions" not in body or "states" not in body:
            raise HTTPException(status_code=400, detail="request body must be an object with "
                                "'states' and 'questions' fields")
        states, questions = body["states"], body["questions"]
        check_batch_limits(states, questions)
        _refusals(body, batch=True)
        if _has_lone_surrogate(body):
            raise HTTPException(status_code=400, detail=_LONE_SURROGATE_DETAIL)
        _controls(body, batch=True)
        check_model(body.get("model"), engine.model_id)
        max_len = _budget(body, "max_len", settings.max_token_budget)
        head_max_len = _budget(body, "head_max_len", settings.max_token_budget)
        results, ms = await infer(request, agent.predict_batch_async(
            states, questions, batch_size=body.get("batch_size"), max_len=max_len,
            head_max_len=head_max_len))
        metrics.answered(results)
        return timed({"results": [with_jev_confidence(r) for r in results],
                      "total_usage": {
                          "input_tokens": sum(r.get("usage", {}).get("input_tokens", 0)
                                              for r in results),
                          "output_tokens": sum(r.get("usage", {}).get("output_tokens", 0)
                                               for r in results)}}, ms)

    paths = ["/health", "/ready", "/v1/models", "/metrics", "/v1/systemone", "/v1/systemone/batch"]
    return _Observe(app, metrics, paths)


class _Problems(Exception):
    def __init__(self, problems: List[Dict[str, Any]]):
        super().__init__("validation problems")
        self.problems = problems


def serve(settings: Settings) -> None:
    """Load the model, then run uvicorn until SIGINT/SIGTERM (requests in flight finish first,
    for up to `graceful_shutdown` seconds)."""
    import uvicorn

    from .engine import Kime

    engine = Kime(settings.model, device=settings.device, precision=settings.precision,
                  threads=settings.threads, max_merge=settings.max_merge)
    app = create_app(engine, settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port,
                            log_level=settings.log_level,
                            timeout_graceful_shutdown=(math.ceil(settings.graceful_shutdown)
                                                       if settings.graceful_shutdown else None))
    uvicorn.Server(config).run()
