"""`GET /api/jobs` and `GET /api/jobs/{id}` name the process that ingests each job
(PostgreSQL: its lease holder); on SQLite, one process and no leases, nobody."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from fastapi.testclient import TestClient

from tests.api.live_support import append_steps


def test_the_jobs_list_names_the_ingesting_process(client: TestClient, metrics_dir: Path) -> None:
    append_steps(metrics_dir / "run1_metrics.jsonl", range(3))
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    listed = client.get("/api/jobs").json()["jobs"]
    one = client.get("/api/jobs/run1").json()
    if client.app.state.sync_service.leases is None:  # type: ignore[attr-defined]
        assert listed[0]["ingested_by"] is None and one["ingested_by"] is None
        return
    by = listed[0]["ingested_by"]
    assert by["pid"] == os.getpid() and by["hostname"] == socket.gethostname()
    assert by["instance_id"] == client.get("/api/instances").json()["self"]
    assert one["ingested_by"] == by
