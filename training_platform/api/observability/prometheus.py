"""`GET /metrics`: the Prometheus text format, from the app's own registry.

One `CollectorRegistry` per app, not prometheus_client's global one: tests
(and any process that builds several apps) would otherwise see each other's
series, or fail registering the same name twice.

Requests and WebSockets are seen by one ASGI middleware, outermost, so it
times everything the app answers (a refused `Host` included) and costs one
`observe` per request:

- HTTP: a latency histogram by method, route *template* (`/api/jobs/{job_id}`,
  never the raw path: the series stay bounded whatever clients ask for;
  `<unmatched>` for paths no route serves) and status code.
- WebSockets are not requests: the middleware counts the open ones by kind
  (live stream, playback) from their accept to their end, and the clients
  closed with 1013 (too slow, or this process fell behind the cross-process
  stream, or their job was deleted) by reason. No code of the live stream
  changes for either.
"""

from __future__ import annotations

import time
from typing import Final

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import Response
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from training_platform.api.deps import require_token
from training_platform.api.observability.collectors import (
    IngestCollector,
    LeaseCollector,
    PoolCollector,
)
from training_platform.api.websocket import CLOSE_TRY_AGAIN
from training_platform.live.cluster_link import GAP_REASON

PREFIX: Final = "training_platform_"
# The text format every Prometheus reads (prometheus_client's CONTENT_TYPE_LATEST
# says 1.0.0 in recent releases, which servers before Prometheus 3 do not know).
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
UNMATCHED: Final = "<unmatched>"
METHODS: Final = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# Seconds; the API answers in milliseconds, exports and profile reports take seconds.
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServerMetrics:
    """The app's registry and the series the middleware updates."""

    def __init__(self, app: FastAPI) -> None:
        self.registry = CollectorRegistry()
        self.request_seconds = Histogram(
            PREFIX + "http_request_duration_seconds",
            "HTTP requests: seconds until the response was sent, by method, route "
            "template and status code.",
            ("method", "route", "status"),
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.live_clients = Gauge(
            PREFIX + "live_clients",
            "WebSocket clients connected to this process, by kind (live, playback).",
            ("kind",),
            registry=self.registry,
        )
        for kind in ("live", "playback"):
            self.live_clients.labels(kind)  # present at 0 before the first client
        self.live_drops = Counter(
            PREFIX + "live_clients_dropped",
            "WebSocket clients closed with 1013 to reconnect, by reason: too_slow (queue "
            "full or a send timed out), server_behind (this process missed cross-process "
            "announcements), other (e.g. the job was deleted).",
            ("reason",),
            registry=self.registry,
        )
        for reason in ("too_slow", "server_behind", "other"):
            self.live_drops.labels(reason)
        self.registry.register(IngestCollector(app))
        self.registry.register(PoolCollector(app))
        self.registry.register(LeaseCollector(app))

    def render(self) -> bytes:
        return generate_latest(self.registry)


def route_template(scope: Scope) -> str:
    """The matched route's whole path template (`/api/jobs/{job_id}`), or `UNMATCHED`.

    `scope["route"]` is the route that answered; depending on the FastAPI
    version its template may lack the prefixes of the routers it was included
    through (`/jobs/{job_id}` under `/api`). Those are literal, so they are the
    part of the path before the first place the route's own pattern matches
    the rest: found without reading FastAPI's internals, and bounded (a prefix
    of the route's literal prefixes) whatever the path.
    """
    route = scope.get("route")
    template = getattr(route, "path_format", None) or getattr(route, "path", None)
    pattern = getattr(route, "path_regex", None)
    if not isinstance(template, str) or not template:
        return UNMATCHED
    path = str(scope.get("path", ""))
    if pattern is None or pattern.match(path):
        return template
    for index, char in enumerate(path):
        if char == "/" and index > 0 and pattern.match(path[index:]):
            return path[:index] + template
    return template


def socket_kind(scope: Scope) -> str:
    path = route_template(scope)
    for kind in ("live", "playback"):
        if path.endswith("/" + kind):
            return kind
    return "other"


def drop_reason(reason: str) -> str:
    if reason.startswith("too slow"):
        return "too_slow"
    return "server_behind" if reason == GAP_REASON else "other"


class MetricsMiddleware:
    """Times HTTP requests; counts open WebSockets and the ones closed to reconnect."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self._websocket(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = 500  # what the client gets when the app raises before answering

        async def send_noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_noting_status)
        finally:
            method = str(scope.get("method", "GET"))
            method = method if method in METHODS else "OTHER"  # a client may send any word
            labels = (method, route_template(scope), str(status))
            self.metrics.request_seconds.labels(*labels).observe(time.perf_counter() - started)

    async def _websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind: str | None = None

        async def send_counting(message: Message) -> None:
            nonlocal kind
            if message["type"] == "websocket.accept" and kind is None:
                kind = socket_kind(scope)
                self.metrics.live_clients.labels(kind).inc()
            elif message["type"] == "websocket.close" and message.get("code") == CLOSE_TRY_AGAIN:
                self.metrics.live_drops.labels(drop_reason(str(message.get("reason", "")))).inc()
            await send(message)

        try:
            await self.app(scope, receive, send_counting)
        finally:
            if kind is not None:
                self.metrics.live_clients.labels(kind).dec()


def install_metrics(app: FastAPI) -> None:
    """The registry on `app.state.metrics`, the middleware (outermost), `GET /metrics`."""
    metrics = ServerMetrics(app)
    app.state.metrics = metrics
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    router = APIRouter(tags=["operations"])

    # Job ids are labels: behind the API token when one is set (Prometheus sends
    # it with `authorization: {credentials: ...}`, docs/platform.md).
    @router.get(
        "/metrics",
        summary="Prometheus metrics",
        response_class=Response,
        dependencies=[Depends(require_token)],
    )
    async def prometheus_metrics(request: Request) -> Response:
        """This process's series in the Prometheus text format (docs/platform.md, Operations)."""
        body = await run_in_threadpool(request.app.state.metrics.render)
        return Response(body, media_type=CONTENT_TYPE)

    app.include_router(router)
