"""`/api/jobs`: discovery, registration, errors and the API token."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from training_platform.api.main import create_app
from training_platform.callbacks.wire import build_record, encode_record
from training_platform.settings import Settings


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
