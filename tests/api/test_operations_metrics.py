"""`GET /metrics` (docs/platform.md, "Operations"): scraped and parsed as Prometheus does.

Each test moves something real (lines appended and synced, a WebSocket
open, a pooled connection held, a request answered) and looks for the series
that must move with it, on both database backends.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from types import SimpleNamespace

import httpx
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from starlette.types import Message, Receive, Scope, Send

from tests.api.live_support import (
    append_steps,
    live_server,
    live_settings,
    open_ws,
    receive,
    record_line,
    wait_for,
)
from training_platform.api.observability.prometheus import (
    MetricsMiddleware,
    ServerMetrics,
    route_template,
)
from training_platform.live.cluster_link import GAP_REASON
from training_platform.settings import Settings

Labels = frozenset[tuple[str, str]]


def scrape(text: str) -> dict[str, dict[Labels, float]]:
    """Sample name -> {labels: value}, parsed by prometheus_client's own parser."""
    samples: dict[str, dict[Labels, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, {})[frozenset(sample.labels.items())] = sample.value
    return samples


def labels(**values: str) -> Labels:
    return frozenset(values.items())


def get_metrics(client: TestClient) -> dict[str, dict[Labels, float]]:
    response = client.get("/metrics")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    return scrape(response.text)


def test_the_ingest_counters_move_for_the_job_whose_lines_were_synced(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    (metrics_dir / "run2_metrics.jsonl").write_bytes(record_line(0))
    records = "training_platform_ingest_records_total"
    run1_metrics = labels(job_id="run1", kind="metrics")
    before = get_metrics(client)
    assert before.get(records, {}).get(run1_metrics, 0) == 0

    append_steps(run1, range(3))
    with run1.open("ab") as handle:
        handle.write(b"this is not json\n")
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    after = get_metrics(client)
    assert after[records][run1_metrics] == 3
    skipped = after["training_platform_ingest_lines_skipped_total"]
    assert skipped[labels(job_id="run1", kind="metrics", reason="malformed")] == 1
    assert skipped[labels(job_id="run1", kind="metrics", reason="oversized")] == 0
    assert after["training_platform_ingest_lag_bytes"][run1_metrics] == 0  # read to the end
    assert after["training_platform_ingest_last_record_timestamp_seconds"][run1_metrics] > 0
    # Only jobs this process ingested have series: run2 was never synced here.
    assert not [key for key in after[records] if ("job_id", "run2") in key]

    append_steps(run1, range(3, 5))
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    assert get_metrics(client)[records][run1_metrics] == 5


def test_a_deleted_jobs_series_go_away(client: TestClient, run1: Path) -> None:
    append_steps(run1, range(2))
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    records = "training_platform_ingest_records_total"
    assert get_metrics(client)[records][labels(job_id="run1", kind="metrics")] == 2
    run1.unlink()  # else the next discovery registers it again
    assert client.delete("/api/jobs/run1").status_code == 204
    assert not [key for key in get_metrics(client).get(records, {}) if ("job_id", "run1") in key]


def test_request_latency_is_by_route_template_never_the_raw_path(
    client: TestClient, run1: Path
) -> None:
    append_steps(run1, range(2))
    client.post("/api/monitoring/run1/metrics/sync")
    assert client.get("/api/jobs/run1").status_code == 200
    assert client.get("/api/jobs/no-such-job").status_code == 404
    assert client.get("/api/monitoring/run1/metrics?limit=1").status_code == 200
    assert client.get("/not/a/route/at/all").status_code == 404
    assert client.request("BREW", "/api/jobs").status_code == 405
    counts = get_metrics(client)["training_platform_http_request_duration_seconds_count"]
    job = "/api/jobs/{job_id}"
    assert counts[labels(method="GET", route=job, status="200")] == 1
    assert counts[labels(method="GET", route=job, status="404")] == 1
    metrics_route = "/api/monitoring/{job_id}/metrics"
    assert counts[labels(method="GET", route=metrics_route, status="200")] == 1
    sync_route = "/api/monitoring/{job_id}/metrics/sync"
    assert counts[labels(method="POST", route=sync_route, status="200")] == 1
    assert counts[labels(method="GET", route="<unmatched>", status="404")] == 1
    assert counts[labels(method="OTHER", route="/api/jobs", status="405")] == 1  # no "BREW"
    routes = {dict(key)["route"] for key in counts}
    assert not [route for route in routes if "run1" in route or "no-such-job" in route], routes


def test_the_pool_gauges_show_connections_held(client: TestClient, settings: Settings) -> None:
    """Connections held show; background work (on PostgreSQL the cross-process
    feed's sweep) may hold one more for a moment, so the counts are bounds."""
    app: FastAPI = client.app  # type: ignore[assignment]
    dialect = "sqlite" if settings.database_url.startswith("sqlite") else "postgresql"
    before = get_metrics(client)
    assert before["training_platform_db_pool_info"] == {
        labels(dialect=dialect, pool="QueuePool"): 1
    }
    assert before["training_platform_db_pool_size"][labels()] == 5  # SQLAlchemy's default
    assert before["training_platform_db_pool_max_overflow"][labels()] == 10
    checked_out = "training_platform_db_pool_checked_out"
    overflow = "training_platform_db_pool_overflow"
    with contextlib.ExitStack() as held:
        for _ in range(7):  # two past the pool's size
            held.enter_context(app.state.engine.connect())
        during = get_metrics(client)
        assert during[checked_out][labels()] >= 7
        assert during[overflow][labels()] >= 2
    assert wait_for(lambda: get_metrics(client)[checked_out][labels()] < 7)
    after = get_metrics(client)
    assert after["training_platform_db_pool_checked_in"][labels()] >= 4
    assert after[overflow][labels()] < 2  # the connections past the size were closed


def test_an_open_websocket_shows_in_the_live_clients_gauge(settings: Settings, run1: Path) -> None:
    with live_server(live_settings(settings)) as server:

        def live_clients() -> dict[Labels, float]:
            response = httpx.get(server.http_url("/metrics"), timeout=10)
            return scrape(response.text)["training_platform_live_clients"]

        assert live_clients() == {labels(kind="live"): 0, labels(kind="playback"): 0}
        with open_ws(server.ws_url("/api/monitoring/run1/live")) as ws:
            assert receive(ws)["type"] == "status"
            assert live_clients()[labels(kind="live")] == 1
        assert wait_for(lambda: live_clients()[labels(kind="live")] == 0)
        # WebSockets are not requests: no latency series for the live route.
        text = httpx.get(server.http_url("/metrics"), timeout=10).text
        counts = scrape(text)["training_platform_http_request_duration_seconds_count"]
        assert not [key for key in counts if dict(key)["route"].endswith("/live")]


def _closing_app(reason: str, code: int) -> object:
    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.close", "code": code, "reason": reason})

    return app


def test_clients_closed_to_reconnect_are_counted_by_reason() -> None:
    metrics = ServerMetrics(FastAPI())
    route = SimpleNamespace(path="/api/monitoring/{job_id}/live")  # as the router leaves it
    scope = {"type": "websocket", "path": "/api/monitoring/run1/live", "route": route}

    async def sent(message: Message) -> None:
        pass

    async def nothing() -> Message:
        return {"type": "websocket.receive"}

    closes = [
        ("too slow: 1000 messages behind; reconnect", 1013),
        ("too slow: a send took longer than 10 s", 1013),
        (GAP_REASON, 1013),
        ("job deleted", 1013),
        ("run finished", 1000),  # a normal close is no drop
    ]
    for reason, code in closes:
        middleware = MetricsMiddleware(_closing_app(reason, code), metrics)  # type: ignore[arg-type]
        asyncio.run(middleware(dict(scope), nothing, sent))
    dropped = scrape(metrics.render().decode())["training_platform_live_clients_dropped_total"]
    assert dropped == {
        labels(reason="too_slow"): 2,
        labels(reason="server_behind"): 1,
        labels(reason="other"): 1,
    }
    # Each socket was counted while open and is gone now.
    assert scrape(metrics.render().decode())["training_platform_live_clients"] == {
        labels(kind="live"): 0,
        labels(kind="playback"): 0,
    }


def test_a_route_template_keeps_its_routers_prefixes() -> None:
    """FastAPI versions differ in whether `scope["route"]` knows the `/api` prefix."""
    app = FastAPI()
    route = next(r for r in app.router.routes if getattr(r, "path", "") == "/openapi.json")
    assert route_template({"route": route, "path": "/openapi.json"}) == "/openapi.json"

    from fastapi import APIRouter

    inner = APIRouter()

    @inner.get("/jobs/{job_id}")
    def job(job_id: str) -> str:
        return job_id

    relative = inner.routes[0]
    assert route_template({"route": relative, "path": "/api/jobs/x"}) == "/api/jobs/{job_id}"
    assert route_template({"route": relative, "path": "/jobs/x"}) == "/jobs/{job_id}"
    assert route_template({"path": "/anything"}) == "<unmatched>"
