"""A job says it had an anomaly worth stopping for, whichever side found it (issue 30
§4, the documents' "mark the job's status on anomaly"): `anomaly_detected` and
`anomaly_reason` in the job, the jobs list, the live `status` message and the
webhook's `job_anomaly` event; the trainer's own flag stays in
`trainer_anomaly_detected`; migration 0018 marks the jobs stored before it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from alembic import command
from fastapi.testclient import TestClient
from sqlalchemy import text

from tests.api.live_support import (
    append_steps,
    live_server,
    live_settings,
    open_ws,
    receive_until,
    wait_for,
)
from tests.webhook_receiver import Receiver
from training_platform.settings import Settings
from training_platform.store.database import alembic_config, make_engine


def sync(client: TestClient, job_id: str = "run1") -> None:
    assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200


def test_a_critical_incident_the_platform_finds_marks_the_job(
    client: TestClient, run1: Path
) -> None:
    append_steps(run1, range(3))
    sync(client)
    job = client.get("/api/jobs/run1").json()
    assert (job["anomaly_detected"], job["anomaly_reason"]) == (False, None)
    before = job["status"]

    append_steps(run1, [3], kl={"mean": 7.0})  # a KL blow-up: critical, found by the platform
    sync(client)
    job = client.get("/api/jobs/run1").json()
    assert job["anomaly_detected"] is True and job["has_anomaly"] is True
    assert job["anomaly_reason"].startswith("kl_explosion at step 3")
    assert job["trainer_anomaly_detected"] is False  # the status file said nothing
    assert job["status"] == before  # the run's lifecycle stays the trainer's
    listed = {j["job_id"]: j for j in client.get("/api/jobs").json()["jobs"]}["run1"]
    assert (listed["anomaly_detected"], listed["health"]) == (True, "critical")

    append_steps(run1, [4], kl={"mean": 9.0})  # later ones do not replace the first
    sync(client)
    assert (
        client.get("/api/jobs/run1").json()["anomaly_reason"].startswith("kl_explosion at step 3")
    )


def test_a_warning_does_not_mark_the_job(client: TestClient, run1: Path) -> None:
    append_steps(run1, range(3))
    append_steps(run1, [3], kl={"mean": 0.9})  # high, not an explosion: a warning at most
    sync(client)
    job = client.get("/api/jobs/run1").json()
    assert job["anomaly_detected"] is False and job["anomaly_reason"] is None


def test_the_live_status_and_the_webhook_say_it_once(
    settings: Settings, run1: Path, receiver: Receiver
) -> None:
    with live_server(live_settings(settings, webhook_url=receiver.url)) as server:
        append_steps(run1, range(3))
        httpx.post(server.http_url("/api/monitoring/run1/metrics/sync"), timeout=10)
        with open_ws(server.ws_url("/api/monitoring/run1/live")) as ws:
            receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
            append_steps(run1, [3], kl={"mean": 7.0})
            append_steps(run1, [4, 5], kl={"mean": 8.0})

            def flagged(got: list[dict[str, Any]]) -> bool:
                return any(m["type"] == "status" and m["data"]["anomaly_detected"] for m in got)

            messages = receive_until(ws, flagged, timeout=20)
        assert wait_for(lambda: bool(receiver.events("job_anomaly")))
        httpx.post(server.http_url("/api/monitoring/run1/metrics/sync"), timeout=10)
    status = next(
        m["data"] for m in messages if m["type"] == "status" and m["data"]["anomaly_detected"]
    )
    assert status["anomaly_reason"].startswith("kl_explosion at step 3")
    assert status["trainer_anomaly_detected"] is False
    (event,) = receiver.events("job_anomaly")  # once, though more critical incidents came
    assert event["job_id"] == "run1" and event["anomaly_reason"].startswith("kl_explosion")
    assert event["trainer_anomaly_detected"] is False and event["status"] == status["status"]
    assert len(receiver.events("anomaly")) >= 1  # each incident is still told as before


def test_the_trainers_own_flag_reaches_the_webhook_too(
    settings: Settings, metrics_dir: Path, receiver: Receiver
) -> None:
    status_file = metrics_dir / "run2_status.json"
    running = {"status": "running", "current_step": 1, "total_steps": 10,
               "anomaly_detected": False, "anomaly_reason": None}  # fmt: skip
    status_file.write_text(json.dumps(running))
    append_steps(metrics_dir / "run2_metrics.jsonl", range(2))
    with live_server(live_settings(settings, webhook_url=receiver.url)) as server:
        sync_url = server.http_url("/api/monitoring/run2/metrics/sync")
        httpx.post(sync_url, timeout=10)
        flagged = {**running, "anomaly_detected": True, "anomaly_reason": "loss is NaN"}
        status_file.write_text(json.dumps(flagged))
        append_steps(metrics_dir / "run2_metrics.jsonl", [2])
        httpx.post(sync_url, timeout=10)
        assert wait_for(lambda: bool(receiver.events("job_anomaly")))
        job = httpx.get(server.http_url("/api/jobs/run2"), timeout=10).json()
    (event,) = receiver.events("job_anomaly")
    assert (event["anomaly_reason"], event["trainer_anomaly_detected"]) == ("loss is NaN", True)
    assert (job["anomaly_detected"], job["trainer_anomaly_detected"]) == (True, True)


def test_0018_marks_the_jobs_with_a_critical_anomaly_stored_before_it(
    empty_database_url: str,
) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0017")
    engine = make_engine(empty_database_url)
    anomalies = [("blown", 7, "kl_explosion", "critical", "kl.mean 9.0"),
                 ("blown", 3, "nan_loss", "critical", "loss is NaN"),
                 ("blown", 1, "entropy_drop", "warning", "low"),
                 ("warned", 2, "entropy_drop", "warning", "low")]  # fmt: skip
    try:
        with engine.begin() as connection:
            for job in ("blown", "warned", "clean"):
                connection.execute(
                    text(
                        "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected,"
                        " created_at) VALUES (:job, 'local', true, 'running', false, 1.0)"
                    ),
                    {"job": job},
                )
            for job, step, kind, severity, message in anomalies:
                connection.execute(
                    text(
                        "INSERT INTO anomalies (job_id, step, type, severity, message, source,"
                        " created_at) VALUES (:job, :step, :kind, :severity, :message,"
                        " 'platform', 1.0)"
                    ),
                    {"job": job, "step": step, "kind": kind, "severity": severity,
                     "message": message},
                )  # fmt: skip
        command.upgrade(config, "head")
        with engine.connect() as connection:
            marked: dict[str, str | None] = dict(
                connection.execute(text("SELECT job_id, critical_incident FROM jobs")).all()
            )
    finally:
        engine.dispose()
    assert marked == {"blown": "nan_loss at step 3: loss is NaN", "warned": None, "clean": None}
