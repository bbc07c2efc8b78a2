"""`GET /livez`, `GET /readyz` (and `/healthz`), and who may call the operations routes."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.api.live_support import live_server, live_settings
from training_platform.api.main import create_app
from training_platform.api.observability.readiness import Readiness, schema_head
from training_platform.settings import Settings
from training_platform.store.database import make_engine


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def test_livez_and_healthz_answer(client: TestClient) -> None:
    assert client.get("/livez").json() == {"status": "ok"}
    assert client.get("/healthz").json() == {"status": "ok"}


def test_readyz_is_200_on_a_migrated_database(client: TestClient) -> None:
    response = client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {
        "status": "ok",
        # The fixture's settings turn the background sync off: not a failure.
        "checks": {"database": "ok", "schema": "ok", "background_sync": "disabled"},
        "failed": [],
    }


def test_readyz_sees_the_background_sync_running(settings: Settings, run1: Path) -> None:
    with live_server(live_settings(settings)) as server:
        response = httpx.get(server.http_url("/readyz"), timeout=10)
        assert response.status_code == 200, response.text
        assert response.json()["checks"]["background_sync"] == "ok"
        for task in server.hub._tasks:  # the poll task dies: no longer ready
            task.get_loop().call_soon_threadsafe(task.cancel)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            response = httpx.get(server.http_url("/readyz"), timeout=10)
            if response.status_code == 503:
                break
            time.sleep(0.05)
        assert response.status_code == 503, response.text
        assert response.json()["failed"] == ["background_sync"]
        assert response.json()["checks"]["background_sync"] == "not running"
        assert httpx.get(server.http_url("/livez"), timeout=10).status_code == 200


def test_readyz_is_503_naming_the_database_when_it_is_unreachable(client: TestClient) -> None:
    app: FastAPI = client.app  # type: ignore[assignment]
    working = app.state.engine
    unreachable = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{closed_port()}/test")
    app.state.engine = unreachable
    try:
        response = client.get("/readyz")
    finally:
        app.state.engine = working
        unreachable.dispose()
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["status"] == "unavailable"
    assert body["failed"] == ["database", "schema"]
    assert body["checks"]["database"].startswith("failed: OperationalError"), body
    assert client.get("/livez").status_code == 200  # alive all the same
    assert client.get("/readyz").status_code == 200  # and ready again once it answers


def test_readyz_is_503_naming_the_schema_when_it_is_not_at_head(client: TestClient) -> None:
    app: FastAPI = client.app  # type: ignore[assignment]
    with app.state.engine.begin() as connection:
        head = connection.execute(text("SELECT version_num FROM alembic_version")).scalar_one()
        connection.execute(text("UPDATE alembic_version SET version_num = 'older'"))
    try:
        response = client.get("/readyz")
    finally:
        with app.state.engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = :v"), {"v": head})
    assert response.status_code == 503, response.text
    assert response.json()["failed"] == ["schema"]
    assert response.json()["checks"]["schema"] == f"at revision older, needs {head}"
    assert client.get("/readyz").status_code == 200


def test_readyz_never_answers_500(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> None:
    async def broken(self: Readiness, app: FastAPI) -> dict[str, str]:
        raise RuntimeError("something unforeseen")

    monkeypatch.setattr(Readiness, "checks", broken)
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json()["failed"] == ["readiness"]
    assert "something unforeseen" in response.json()["checks"]["readiness"]


def test_a_database_that_never_answers_is_503_within_the_timeout() -> None:
    """A server that accepts the connection and then says nothing (a hung database):
    the probe answers within its timeout, and concurrent probes share one check."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        engine = make_engine(f"postgresql+psycopg://postgres@127.0.0.1:{port}/test")
        app = SimpleNamespace(
            state=SimpleNamespace(
                engine=engine,
                live_hub=SimpleNamespace(polling=lambda: True),
                settings=SimpleNamespace(poll_interval=1.0),
            )
        )
        readiness = Readiness(timeout=0.3)
        schema_head()  # read once per process, outside the timeout (the first probe does)

        async def probe_twice() -> list[dict[str, str]]:
            first = asyncio.create_task(readiness.checks(app))  # type: ignore[arg-type]
            await asyncio.sleep(0)
            shared = readiness._in_flight
            second = await readiness.checks(app)  # type: ignore[arg-type]
            assert readiness._in_flight is shared  # one check in flight, not two
            return [await first, second]

        started = time.monotonic()
        results = asyncio.run(probe_twice())
        assert time.monotonic() - started < 5
    engine.dispose()
    for checks in results:
        assert checks["database"] == "failed: no answer within 0.3 s"
        assert checks["background_sync"] == "ok"


def test_the_probes_are_open_and_metrics_need_the_token(settings: Settings) -> None:
    secured = settings.model_copy(update={"api_token": "s3cret"})
    with TestClient(create_app(secured)) as client:
        for path in ("/livez", "/readyz", "/healthz"):
            assert client.get(path).status_code == 200, path
        assert client.get("/api/jobs").status_code == 401
        # Job ids are labels: /metrics is behind the token like /api.
        assert client.get("/metrics").status_code == 401
        authorized = client.get("/metrics", headers={"Authorization": "Bearer s3cret"})
        assert authorized.status_code == 200
        assert "training_platform_http_request_duration_seconds" in authorized.text
