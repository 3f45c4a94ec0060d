"""The HTTP app: laya serve's routes over one engine or a Router of several, and `serve`,
which runs it under uvicorn.

`POST /v1/systemone` and `POST /v1/systemone/batch` take laya serve's request bodies and answer
its response bodies, status codes and `detail` texts; the answers are `kime.laya.Agent`'s (and,
over a Router, carry `routing`), so they equal in-process calls. Both routes run one pipeline
(`Service.decide`): auth, admission, the body, laya serve's checks, the forward pass, metrics,
the response; they differ only in the body's shape and the response's. What answers is a
`served.One` or `served.Routed`. The forward pass never runs on the event loop: a request is
laid out on a worker thread and its rows go to its engine's scheduler, which merges concurrent
callers into shared backend batches.
"""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import (TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Dict, List, Optional,
                    Sequence, Tuple, Union)

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from ..errors import InvalidRequest
from . import schema, wire
from ..laya.limits import BODY_BYTES
from .metrics import CONTENT_TYPE, Metrics
from .protocol import with_header_deadline
from .foreign import Foreign, is_foreign
from .served import Served, served_for
from .settings import Settings

if TYPE_CHECKING:
    from ..engine import Kime
    from ..laya.agent import Agent
    from ..laya.router import Router

_log = logging.getLogger("kime.serve")

LIVENESS_ONLY = {"status": "ok"}
UNAUTHORIZED = "invalid or missing bearer token"
BUSY = "server busy, try again later"
BUSY_BODY = json.dumps({"detail": BUSY}, separators=(",", ":")).encode()
DECISIONS = ("/v1/systemone", "/v1/systemone/batch")
"""The routes that take a slot (`Service.admit`)."""
PATHS = ("/health", "/ready", "/v1/models", "/metrics", "/v1/systemone", "/v1/systemone/batch")
"""The paths metrics name; any other is counted as `other`, so a scanner cannot grow the labels."""


class Service:
    """An engine or a Router behind laya serve's routes: the app's state and its handlers."""

    def __init__(self, model: Union[Kime, Agent, Router], settings: Settings,
                 name: Optional[str] = None,
                 gather: Optional[Callable[[], Awaitable[bytes]]] = None):
        self.served: Served = (Foreign(model, settings) if is_foreign(model)
                               else served_for(model, settings, name))
        self.gather = gather
        self.settings = settings
        self.metrics = Metrics(self.served.engines, self.served.registered)
        self.served.watch(self.metrics)
        self.in_flight = 0
        self._expected = [("Bearer " + k).encode("utf-8", "surrogateescape")
                          for k in settings.api_keys]

    @property
    def open(self) -> bool:
        """No keys configured: every route answers everyone (and the docs are served)."""
        return not self._expected

    @asynccontextmanager
    async def lifespan(self, _app: Any) -> AsyncIterator[None]:
        """Validation, layout and routing run on a bounded pool of `workers` threads; the
        engines are closed when the app stops."""
        pool = ThreadPoolExecutor(max_workers=self.settings.workers,
                                  thread_name_prefix="kime-serve")
        asyncio.get_running_loop().set_default_executor(pool)
        reaper = asyncio.ensure_future(self.served.idle_unloads())
        try:
            yield
        finally:
            reaper.cancel()
            pool.shutdown(wait=True)
            self.served.close()

    # --- the steps ------------------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        if self.open:
            return True
        supplied = (request.headers.get("authorization") or "").encode("utf-8", "surrogateescape")
        ok = False
        for key in self._expected:  # every key, so the time does not say which one came close
            ok |= hmac.compare_digest(supplied, key)
        return ok

    def check_auth(self, request: Request) -> None:
        if not self.authorized(request):
            raise HTTPException(status_code=401, detail=UNAUTHORIZED)

    def busy(self) -> Tuple[bool, int]:
        """Whether `max_queue` requests are in flight, and how many are."""
        n = self.in_flight
        return bool(self.settings.max_queue) and n >= self.settings.max_queue, n

    def admit(self) -> None:
        """Take a slot or answer 503. A slot is held from here, before the body is read, until
        the handler ends (answered, refused, timed out or hung up on): counting only what waits
        for the device would let bodies being read or laid out pile up without bound. Only the
        event loop touches the count, so it needs no lock."""
        if self.busy()[0]:
            self.metrics.rejected_busy.inc()
            raise HTTPException(status_code=503, detail=BUSY, headers={"Retry-After": "1"})
        self.in_flight += 1

    async def read_json(self, request: Request) -> Any:
        """The body, refused past `BODY_BYTES` (on its Content-Length, before reading, when
        it gives one) or when it takes longer than `body_read_timeout` to arrive."""
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > BODY_BYTES:
            raise HTTPException(status_code=413, detail="request body too large")

        async def collect() -> bytes:
            total, chunks = 0, []
            async for chunk in request.stream():
                total += len(chunk)
                if total > BODY_BYTES:
                    raise HTTPException(status_code=413, detail="request body too large")
                chunks.append(chunk)
            return b"".join(chunks)

        try:
            raw = await asyncio.wait_for(collect(), timeout=self.settings.body_read_timeout or None)
        except asyncio.TimeoutError:
            raise HTTPException(status_code=408,
                                detail="request body was not received in time") from None
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise HTTPException(status_code=400, detail="request body must be valid JSON") from None

    async def infer(self, request: Request, work: Awaitable[Any]) -> Tuple[Any, float]:
        """Await `work` and its time in ms, cancelling it if the client hangs up first: rows
        still queued for the device are then dropped instead of costing a forward pass nobody
        will read, and the cancelled call is awaited to its end (hooks included) before the
        request gives its slot back. A request that does not validate passes through (a 422);
        any other failure is logged and answered 500."""
        t0 = time.perf_counter()
        task = asyncio.ensure_future(work)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=0.05)
                if done:
                    return task.result(), (time.perf_counter() - t0) * 1000.0
                if await request.is_disconnected():
                    task.cancel()
                    self.metrics.disconnects.inc()
                    # the slot is held until the call has ended (its hooks, its lease)
                    await asyncio.wait({task})
                    if not task.cancelled():
                        task.exception()  # retrieved: an error after the hang-up is nobody's
                    raise HTTPException(status_code=499, detail="client closed the request")
        except (HTTPException, InvalidRequest):
            raise
        except Exception:
            _log.exception("inference failed")
            raise HTTPException(status_code=500, detail="inference failed") from None

    async def decide(self, request: Request, batch: bool) -> JSONResponse:
        """The pipeline both POST routes share; `batch` picks the body's and the answer's shape."""
        self.check_auth(request)
        self.admit()
        try:
            body = self.served.check(await self.read_json(request), batch)
            results, ms = await self.infer(request, self.served.answer(body, batch))
        finally:
            self.in_flight -= 1
        self.metrics.answered(results)
        strict = self.settings.jev_strict
        content = wire.batch(results, strict) if batch else wire.one(results[0], strict)
        return JSONResponse(content=content,
                            headers={"Server-Timing": "inference;dur=%.2f" % ms,
                                     "X-Inference-Time-Ms": "%.2f" % ms})

    # --- the routes -----------------------------------------------------------------------------

    async def systemone(self, request: Request) -> JSONResponse:
        return await self.decide(request, batch=False)

    async def systemone_batch(self, request: Request) -> JSONResponse:
        return await self.decide(request, batch=True)

    def health(self, request: Request) -> Dict[str, Any]:
        if not self.authorized(request):
            return dict(LIVENESS_ONLY)
        return self.served.health()

    def ready(self, request: Request) -> JSONResponse:
        busy, depth = self.busy()
        body: Dict[str, Any] = {"status": "busy" if busy else "ready"}
        if self.authorized(request):
            body.update(self.served.ready(), in_flight=depth, queue_depth=self.served.depth(),
                        max_queue=self.settings.max_queue)
        return JSONResponse(body, status_code=503 if busy else 200,
                            headers={"Retry-After": "1"} if busy else None)

    def models(self, request: Request) -> Dict[str, Any]:
        self.check_auth(request)
        return {"object": "list", "data": self.served.listing()}

    async def prometheus(self, request: Request) -> Response:
        """This server's metrics, or, with `gather`, those of every replica it is one of."""
        self.check_auth(request)
        text = await self.gather() if self.gather else self.metrics.render()
        return Response(text, media_type=CONTENT_TYPE)


async def _invalid(_request: Request, exc: Exception) -> JSONResponse:
    """laya answers a ValueError from predict with 422 and `detail: str(e)`; kime's text is
    laya's for one problem and lists them all for several, and `problems` adds every problem in
    FastAPI's format (loc, msg, type, input)."""
    assert isinstance(exc, InvalidRequest)
    return JSONResponse({"detail": str(exc), "problems": exc.problems}, status_code=422)


class RequestObserver:
    """ASGI middleware: `x-request-id` on every response (the client's, or a new one), and each
    request's count, latency and in-progress gauge for `/metrics`."""

    def __init__(self, app: Any, metrics: Metrics, paths: Sequence[str],
                 service: Optional[Service] = None):
        self.app = app
        self.metrics = metrics
        self.service = service
        self.paths = frozenset(paths)

    async def __call__(self, scope: Dict[str, Any], receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = next((v for k, v in scope.get("headers", []) if k == b"x-request-id"), b"")
        if not rid or len(rid) > 200 or not all(33 <= c < 127 for c in rid):
            rid = uuid.uuid4().hex.encode()
        scope.setdefault("state", {})["request_id"] = rid.decode()
        path = scope.get("path", "")
        root = scope.get("root_path", "")
        if root and path.startswith(root):  # behind a proxy's prefix (root_path)
            path = path[len(root):]
        path = path if path in self.paths else "other"
        t0 = time.perf_counter()
        status = 500

        async def wrapped(message: Dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k != b"x-request-id"]
                headers.append((b"x-request-id", rid))
                message = dict(message, headers=headers)
            await send(message)

        in_progress = self.metrics.in_progress.labels(path)
        in_progress.inc()
        try:
            if path in DECISIONS and scope.get("method") == "POST" and self.service is not None \
                    and self.service.busy()[0] \
                    and self.service.authorized(Request(scope)):
                await self.refuse_busy(wrapped)  # before routing: the cheapest answer it has
            else:
                await self.app(scope, receive, wrapped)
        finally:
            in_progress.dec()
            self.metrics.observe(scope.get("method", ""), path, status, time.perf_counter() - t0)


    async def refuse_busy(self, send: Callable) -> None:
        """The 503 `Service.admit` answers when the server is full, sent without FastAPI: under
        an overload most requests get it, and a refusal that costs as much as routing the
        request runs the event loop out of time to refuse the next ones (bench.overload)."""
        assert self.service is not None
        self.service.metrics.rejected_busy.inc()
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"), (b"retry-after", b"1"),
            (b"content-length", str(len(BUSY_BODY)).encode())]})
        await send({"type": "http.response.body", "body": BUSY_BODY})


def create_app(model: Union[Kime, Agent, Router], settings: Optional[Settings] = None,
               name: Optional[str] = None,
               gather: Optional[Callable[[], Awaitable[bytes]]] = None) -> Any:
    """The ASGI app over a loaded `kime.Kime` or `kime.laya.Agent` (served as `name`, else its
    model id), or over a `kime.laya.Router` (which routes every request and answers with
    `routing`), or over any object with a Router's `predict`/`predict_batch`, answered through
    them (`kime.serve.foreign`). The engines are closed when the app shuts down. `gather`,
    when given, is what `/metrics` answers (a replica's: every replica's metrics); else the
    app's own."""
    service = Service(model, settings or Settings(model=getattr(model, "model_id", [])), name,
                      gather)
    docs = service.open
    app = FastAPI(title="kime serve", lifespan=service.lifespan,
                  docs_url="/docs" if docs else None, redoc_url="/redoc" if docs else None,
                  openapi_url="/openapi.json" if docs else None)
    app.add_exception_handler(InvalidRequest, _invalid)
    routes: List[Tuple[str, str, Callable[..., Any], Optional[Dict[str, Any]]]] = [
        ("GET", "/health", service.health, None), ("GET", "/ready", service.ready, None),
        ("GET", "/v1/models", service.models, None),
        ("GET", "/metrics", service.prometheus, None),
        ("POST", "/v1/systemone", service.systemone, schema.request_body(schema.SYSTEMONE)),
        ("POST", "/v1/systemone/batch", service.systemone_batch,
         schema.request_body(schema.BATCH))]
    for method, path, handler, body in routes:
        app.add_api_route(path, handler, methods=[method], openapi_extra=body)
    return RequestObserver(app, service.metrics, PATHS, service)


def load_model(settings: Settings) -> Tuple[Union[Agent, Router], Optional[str]]:
    """What a server over `settings` answers from: the one checkpoint of a plain `--model
    SOURCE`, loaded as `kime.load` loads it (a Hub checkpoint missing from the cache is
    downloaded, unless HF_HUB_OFFLINE is set), with that source (the name it is served as);
    else the Router the settings describe, preloaded, and None."""
    from ..laya import load
    from .routing import build_router, single_source

    source = single_source(settings)
    if source is None:
        return build_router(settings), None
    agent = load(source, device=settings.device, precision=settings.precision,
                 threads=settings.threads, answer_cache=settings.answer_cache)
    if settings.max_merge:
        agent.engine.scheduler.max_merge = settings.max_merge
    return agent, source


def serve(settings: Settings) -> None:
    """Load the model (`load_model`), then run uvicorn until SIGINT/SIGTERM (requests in
    flight finish first, for up to `graceful_shutdown` seconds)."""
    import uvicorn

    model, source = load_model(settings)
    config = uvicorn.Config(create_app(model, settings, source), host=settings.host,
                            port=settings.port,
                            root_path=settings.root_path,
                            log_level=settings.log_level,
                            http=with_header_deadline(settings.header_read_timeout),
                            timeout_graceful_shutdown=(math.ceil(settings.graceful_shutdown)
                                                       if settings.graceful_shutdown else None))
    uvicorn.Server(config).run()
