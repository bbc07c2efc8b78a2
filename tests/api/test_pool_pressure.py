"""Requests never wait on each other for pooled database connections.

A request that held its session's connection while discovery, a sync on
request or a download took connections of their own needed two at once: as
many such requests as the pool holds then waited on each other until the
pool's timeout, and every route answered 500 (seen in CI as stalled
downloads of a job not discovered yet).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import training_platform.api.main as api_main
from tests.api.test_artifacts_api import make_profiles
from training_platform.api.main import create_app
from training_platform.settings import Settings


@pytest.fixture
def one_connection_client(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> Iterator[TestClient]:
    """The app with a pool of a single connection and a short wait for it."""
    make_engine = api_main.make_engine

    def single_connection_engine(url: str, **kwargs: Any) -> Any:
        return make_engine(url, pool_size=1, max_overflow=0, pool_timeout=3, **kwargs)

    monkeypatch.setattr(api_main, "make_engine", single_connection_engine)
    with TestClient(create_app(settings), raise_server_exceptions=False) as client:
        assert client.app.state.engine.pool.size() == 1  # type: ignore[attr-defined]
        yield client


def test_a_job_discovered_on_request_needs_one_connection_at_a_time(
    one_connection_client: TestClient, metrics_dir: Path
) -> None:
    make_profiles(metrics_dir, "run1")  # files only: the job is not registered yet

    assert one_connection_client.get("/api/jobs/run1").status_code == 200
    make_profiles(metrics_dir, "run2")
    download = one_connection_client.get("/api/jobs/run2/artifacts/step_10/trace.json")
    assert download.status_code == 200


def test_a_sync_on_request_needs_one_connection_at_a_time(
    one_connection_client: TestClient, metrics_dir: Path
) -> None:
    (metrics_dir / "run1_metrics.jsonl").write_bytes(b'{"step": 0, "timestamp": 1.0}\n')

    response = one_connection_client.post("/api/monitoring/run1/metrics/sync")

    assert response.status_code == 200, response.text
    assert one_connection_client.get("/api/jobs/run1").json()["metrics_count"] == 1


def test_an_unknown_job_is_still_404(one_connection_client: TestClient) -> None:
    assert one_connection_client.get("/api/jobs/nope").status_code == 404
    assert one_connection_client.get("/api/jobs/nope/artifacts/x.json").status_code == 404
