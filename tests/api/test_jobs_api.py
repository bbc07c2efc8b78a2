"""`/api/jobs`: discovery, registration, errors and the API token."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import event, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from tests.api.live_support import (
    append_steps,
    close_code,
    has_step,
    live_server,
    live_settings,
    open_ws,
    receive,
    receive_until,
)
from training_platform.api.main import create_app
from training_platform.api.websocket import CLOSE_TRY_AGAIN
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.settings import Settings
from training_platform.store.database import make_session_factory as session_factory_for
from training_platform.store.jobs import summarize_jobs
from training_platform.store.models import Anomaly, Job, MetricRollup, SyncState, TrainingMetric


def write_job(directory: Path, job_id: str, steps: int = 3) -> Path:
    path = directory / f"{job_id}_metrics.jsonl"
    with path.open("ab") as handle:
        for step in range(steps):
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=1.0)))
    return path


def test_jobs_appearing_in_the_metrics_dir_are_listed_without_any_call(
    client: TestClient, metrics_dir: Path
) -> None:
    assert client.get("/api/jobs").json() == {"jobs": []}
    write_job(metrics_dir, "grpo-7")
    (metrics_dir / "notes.txt").write_text("not a job")
    (metrics_dir / "bad id!_metrics.jsonl").write_text("")

    jobs = client.get("/api/jobs").json()["jobs"]

    assert [job["job_id"] for job in jobs] == ["grpo-7"]
    assert jobs[0]["source"] == "local" and jobs[0]["discovered"] is True


def test_get_job_reports_progress_counts_and_status(client: TestClient, metrics_dir: Path) -> None:
    write_job(metrics_dir, "run1", steps=4)
    (metrics_dir / "run1_status.json").write_text(
        '{"job_id": "run1", "status": "running", "current_step": 3, "total_steps": 10,'
        ' "anomaly_detected": false, "anomaly_reason": null, "started_at": 1.0,'
        ' "updated_at": 2.0}'
    )
    assert client.post("/api/monitoring/run1/metrics/sync").json()["status_changed"] is True

    job = client.get("/api/jobs/run1").json()

    assert (job["status"], job["current_step"], job["total_steps"]) == ("running", 3, 10)
    assert (job["metrics_count"], job["latest_step"], job["has_anomaly"]) == (4, 3, False)
    assert job["sync"]["offset"] == (metrics_dir / "run1_metrics.jsonl").stat().st_size


def test_unknown_job_is_404_with_a_json_error(client: TestClient) -> None:
    response = client.get("/api/jobs/nope")
    assert response.status_code == 404
    assert response.json() == {"detail": "job 'nope' not found", "code": "job_not_found"}


def test_register_a_local_directory_then_same_again_then_conflict(
    client: TestClient, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    write_job(runs, "run7", steps=2)

    created = client.post("/api/jobs", json={"job_id": "run7", "metrics_dir": str(runs)})
    again = client.post("/api/jobs", json={"job_id": "run7", "metrics_dir": str(runs)})
    other = client.post("/api/jobs", json={"job_id": "run7", "metrics_dir": str(tmp_path)})

    assert (created.status_code, again.status_code, other.status_code) == (201, 200, 409)
    assert created.json()["discovered"] is False
    assert other.json()["code"] == "job_conflict"
    assert client.post("/api/monitoring/run7/metrics/sync").json()["new_metrics"] == 2


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"job_id": "x", "metrics_dir": "/definitely/not/here"}, "invalid_source"),
        ({"job_id": "../etc", "metrics_dir": "/tmp"}, "validation_error"),
        ({"job_id": "x"}, "validation_error"),
        (
            {
                "job_id": "x",
                "metrics_dir": "/tmp",
                "ssh": {"host": "h", "username": "u", "key_path": "k", "remote_dir": "/r"},
            },
            "validation_error",
        ),
        (
            {
                "job_id": "x",
                "ssh": {
                    "host": "h",
                    "username": "u",
                    "key_path": "k",
                    "remote_dir": "/r",
                    "password": "hunter2",
                },
            },
            "validation_error",
        ),
        (
            {
                "job_id": "x",
                "ssh": {
                    "host": "h",
                    "username": "u",
                    "key_path": "/etc/passwd",
                    "remote_dir": "/r",
                },
            },
            "invalid_source",
        ),
        (
            {
                "job_id": "x",
                "ssh": {
                    "host": "h",
                    "username": "u",
                    "key_path": "../../id_rsa",
                    "remote_dir": "/r",
                },
            },
            "invalid_source",
        ),
        ({"job_id": "x", "metrics_dir": "/tmp", "surprise": 1}, "validation_error"),
    ],
)
def test_bad_registrations_are_422_with_a_reason(client: TestClient, body: dict, code: str) -> None:
    response = client.post("/api/jobs", json=body)
    assert response.status_code == 422
    assert response.json()["code"] == code
    assert client.get("/api/jobs").json() == {"jobs": []}


@pytest.mark.parametrize(
    "path",
    [
        "/api/jobs/..%2F..%2Fetc%2Fpasswd",
        "/api/jobs/%2E%2E",
        "/api/jobs/.hidden",
        "/api/monitoring/..%2Fsecret/metrics",
        "/api/monitoring/secret%00/metrics",
        "/api/monitoring/" + "a" * 129 + "/metrics",
    ],
)
def test_path_traversal_in_job_id_is_refused_and_reads_nothing_outside(
    client: TestClient, metrics_dir: Path, path: str
) -> None:
    write_job(metrics_dir.parent, "secret")  # next to the metrics dir, not inside it

    response = client.get(path)

    assert 400 <= response.status_code < 500
    assert "secret" not in response.text.replace("..%2Fsecret", "")
    assert client.get("/api/jobs").json() == {"jobs": []}


def test_token_is_required_on_every_api_route_when_configured(
    settings: Settings, metrics_dir: Path
) -> None:
    write_job(metrics_dir, "run1")
    secured = settings.model_copy(update={"api_token": "s3cret"})
    routes = [
        ("GET", "/api/jobs"),
        ("GET", "/api/jobs/run1"),
        ("POST", "/api/jobs"),
        ("GET", "/api/monitoring/run1/metrics"),
        ("GET", "/api/monitoring/run1/metrics/anomalies"),
        ("POST", "/api/monitoring/run1/metrics/sync"),
        ("DELETE", "/api/jobs/run1"),
    ]
    with TestClient(create_app(secured)) as client:
        for method, path in routes:
            response = client.request(method, path)
            assert response.status_code == 401, path
            assert response.headers["www-authenticate"] == "Bearer"
            wrong = client.request(method, path, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401, path
        good = {"Authorization": "Bearer s3cret"}
        assert client.get("/api/jobs", headers=good).status_code == 200
        assert client.post("/api/monitoring/run1/metrics/sync", headers=good).status_code == 200
        assert client.get("/healthz").status_code == 200


def test_without_a_token_configured_the_api_is_open(client: TestClient) -> None:
    assert client.get("/api/jobs").status_code == 200


def test_every_route_is_described_in_openapi(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()
    for path, methods in spec["paths"].items():
        for method, operation in methods.items():
            assert operation.get("description"), f"{method.upper()} {path} has no description"
            assert operation.get("summary"), f"{method.upper()} {path} has no summary"


# -- health ---------------------------------------------------------------------------


def write_anomaly(directory: Path, job_id: str, step: int, severity: str) -> None:
    anomaly = {"type": f"probe_{severity}", "severity": severity, "message": f"a {severity}"}
    record = build_record(step, {"loss": 1.0}, timestamp=1.0 + step, anomalies=[anomaly])
    with (directory / f"{job_id}_metrics.jsonl").open("ab") as handle:
        handle.write(encode_record(record))


def health_of(client: TestClient) -> dict[str, str]:
    return {job["job_id"]: job["health"] for job in client.get("/api/jobs").json()["jobs"]}


def test_health_is_the_worst_anomaly_severity_of_the_run(
    client: TestClient, metrics_dir: Path
) -> None:
    for job_id in ("calm", "noted", "warned", "broken"):
        write_job(metrics_dir, job_id)
    write_anomaly(metrics_dir, "noted", 3, "info")
    write_anomaly(metrics_dir, "warned", 3, "warning")
    write_anomaly(metrics_dir, "broken", 3, "warning")
    write_anomaly(metrics_dir, "broken", 4, "critical")
    for job_id in ("calm", "noted", "warned", "broken"):
        client.post(f"/api/monitoring/{job_id}/metrics/sync")

    assert health_of(client) == {
        "calm": "ok",
        "noted": "ok",
        "warned": "warning",
        "broken": "critical",
    }
    assert client.get("/api/jobs/broken").json()["health"] == "critical"


def test_health_changes_as_soon_as_an_anomaly_lands(client: TestClient, metrics_dir: Path) -> None:
    write_job(metrics_dir, "run1")
    client.post("/api/monitoring/run1/metrics/sync")
    assert client.get("/api/jobs/run1").json()["health"] == "ok"

    write_anomaly(metrics_dir, "run1", 3, "critical")
    client.post("/api/monitoring/run1/metrics/sync")

    assert client.get("/api/jobs/run1").json()["health"] == "critical"


def test_a_stalled_run_or_a_flag_in_the_status_file_is_a_warning(
    client: TestClient, metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    write_job(metrics_dir, "silent")
    write_job(metrics_dir, "flagged")
    (metrics_dir / "flagged_status.json").write_text(
        '{"job_id": "flagged", "status": "running", "anomaly_detected": true,'
        ' "anomaly_reason": "kl explosion"}'
    )
    for job_id in ("silent", "flagged"):
        client.post(f"/api/monitoring/{job_id}/metrics/sync")
    # What the live pipeline writes when a running job's file goes silent
    # (tests/live cover when it decides so).
    with session_factory.begin() as session:
        session.execute(update(Job).where(Job.job_id == "silent").values(status="stalled"))

    assert health_of(client) == {"silent": "warning", "flagged": "warning"}


def test_jobs_can_be_filtered_by_health(client: TestClient, metrics_dir: Path) -> None:
    for job_id in ("calm", "warned", "broken"):
        write_job(metrics_dir, job_id)
    write_anomaly(metrics_dir, "warned", 3, "warning")
    write_anomaly(metrics_dir, "broken", 3, "critical")
    for job_id in ("calm", "warned", "broken"):
        client.post(f"/api/monitoring/{job_id}/metrics/sync")

    def listed(health: str) -> list[str]:
        response = client.get("/api/jobs", params={"health": health})
        assert response.status_code == 200
        return [job["job_id"] for job in response.json()["jobs"]]

    assert (listed("ok"), listed("warning"), listed("critical")) == (
        ["calm"],
        ["warned"],
        ["broken"],
    )
    bad = client.get("/api/jobs", params={"health": "sick"})
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["query", "health"]


def test_the_jobs_list_costs_one_query_whatever_the_number_of_jobs(
    client: TestClient, metrics_dir: Path, engine: Engine
) -> None:
    def statements_for_list() -> int:
        seen: list[str] = []

        def count(*args: object) -> None:
            seen.append(str(args[2]))

        event.listen(engine, "before_cursor_execute", count)
        try:
            with session_factory_for(engine)() as session:
                summarize_jobs(session)
        finally:
            event.remove(engine, "before_cursor_execute", count)
        return len(seen)

    write_job(metrics_dir, "first")
    client.get("/api/jobs")
    one = statements_for_list()
    for index in range(20):
        write_job(metrics_dir, f"more{index}")
        write_anomaly(metrics_dir, f"more{index}", 3, "warning")
    client.get("/api/jobs")

    assert statements_for_list() == one == 1


# -- delete ---------------------------------------------------------------------------


def rows_of(session_factory: sessionmaker[Session], job_id: str) -> dict[str, int]:
    tables = (Job, TrainingMetric, Anomaly, SyncState, MetricRollup)
    with session_factory() as session:
        return {
            table.__tablename__: session.scalar(
                select(func.count()).select_from(table).where(table.job_id == job_id)
            )
            or 0
            for table in tables
        }


def test_delete_removes_the_rows_and_never_the_files(
    client: TestClient, metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    path = write_job(metrics_dir, "doomed", steps=40)
    write_anomaly(metrics_dir, "doomed", 40, "critical")
    (metrics_dir / "doomed_status.json").write_text('{"job_id": "doomed", "status": "running"}')
    write_job(metrics_dir, "kept", steps=3)
    client.post("/api/monitoring/doomed/metrics/sync")
    client.post("/api/monitoring/kept/metrics/sync")
    files_before = {p.name: p.read_bytes() for p in metrics_dir.iterdir()}
    assert rows_of(session_factory, "doomed")["metric_rollups"] > 0

    response = client.delete("/api/jobs/doomed")

    assert response.status_code == 204 and response.content == b""
    assert set(rows_of(session_factory, "doomed").values()) == {0}
    assert rows_of(session_factory, "kept")["training_metrics"] == 3
    assert {p.name: p.read_bytes() for p in metrics_dir.iterdir()} == files_before
    assert path.exists()
    assert client.get("/api/jobs/doomed").status_code == 404
    assert client.post("/api/monitoring/doomed/metrics/sync").status_code == 404
    assert client.delete("/api/jobs/doomed").status_code == 404


def test_a_deleted_job_still_being_written_is_not_rediscovered(
    client: TestClient, metrics_dir: Path
) -> None:
    write_job(metrics_dir, "run1", steps=3)
    client.post("/api/monitoring/run1/metrics/sync")
    assert client.delete("/api/jobs/run1").status_code == 204

    write_job(metrics_dir, "run1", steps=2)  # the trainer goes on writing
    (metrics_dir / "run1_status.json").write_text('{"job_id": "run1", "status": "running"}')

    assert [job["job_id"] for job in client.get("/api/jobs").json()["jobs"]] == []
    assert client.get("/api/monitoring/run1/metrics").status_code == 404
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 404


def test_registering_a_deleted_job_brings_it_back_from_the_start_of_its_file(
    client: TestClient, metrics_dir: Path
) -> None:
    write_job(metrics_dir, "run1", steps=3)
    client.post("/api/monitoring/run1/metrics/sync")
    client.delete("/api/jobs/run1")
    write_job(metrics_dir, "run1", steps=2)

    created = client.post("/api/jobs", json={"job_id": "run1", "metrics_dir": str(metrics_dir)})

    assert created.status_code == 201
    assert client.post("/api/monitoring/run1/metrics/sync").json()["new_metrics"] == 3
    job = client.get("/api/jobs/run1").json()
    # Read again from the first line: 5 lines, steps 0-2 then 0-1 again.
    assert (job["metrics_count"], job["sync"]["records_ingested"]) == (3, 5)
    assert client.delete("/api/jobs/run1").status_code == 204


def test_delete_of_an_unknown_job_is_404(client: TestClient) -> None:
    response = client.delete("/api/jobs/nope")
    assert response.status_code == 404
    assert response.json()["code"] == "job_not_found"


def test_delete_disconnects_live_subscribers_and_stops_the_live_sync(
    settings: Settings, run1: Path
) -> None:
    with (
        live_server(live_settings(settings)) as server,
        open_ws(server.ws_url("/api/monitoring/run1/live")) as ws,
    ):
        assert receive(ws)["type"] == "status"
        append_steps(run1, range(3))
        assert has_step(2)(receive_until(ws, has_step(2)))

        assert httpx.delete(server.http_url("/api/jobs/run1")).status_code == 204

        assert close_code(ws) == (CLOSE_TRY_AGAIN, "job deleted")
        append_steps(run1, range(3, 6))  # the trainer goes on; file events keep coming
        time.sleep(1.0)  # several background rounds
        assert httpx.get(server.http_url("/api/jobs")).json() == {"jobs": []}
        assert server.hub.service.stall.silent_for("run1") is None
