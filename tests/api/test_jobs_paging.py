"""`GET /api/jobs` pages: limit, offset, order, the total in `X-Total-Count`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.store.models import Job


def write_job(directory: Path, job_id: str, *, anomaly: str | None = None) -> None:
    anomalies = [{"type": "probe", "severity": anomaly, "message": "m"}] if anomaly else None
    record = build_record(0, {"loss": 1.0}, timestamp=1.0, anomalies=anomalies)
    (directory / f"{job_id}_metrics.jsonl").write_bytes(encode_record(record))


def listed(client: TestClient, **params: str | int) -> tuple[list[str], int]:
    response = client.get("/api/jobs", params=params)
    assert response.status_code == 200, response.text
    return [job["job_id"] for job in response.json()["jobs"]], int(
        response.headers["X-Total-Count"]
    )


def test_the_default_page_is_100_jobs_and_the_header_has_the_total(
    client: TestClient, metrics_dir: Path
) -> None:
    for index in range(105):
        write_job(metrics_dir, f"run{index:03d}")

    response = client.get("/api/jobs")
    assert response.status_code == 200
    assert list(response.json()) == ["jobs"]  # the body old clients read is unchanged
    assert len(response.json()["jobs"]) == 100
    assert response.headers["X-Total-Count"] == "105"


def test_pages_cover_every_job_once_in_a_stable_order(
    client: TestClient, metrics_dir: Path
) -> None:
    # Discovered in one call, so they share created_at: the job id breaks the tie.
    names = [f"job{index:02d}" for index in range(23)]
    for name in names:
        write_job(metrics_dir, name)
    everything, total = listed(client, limit=500)
    assert total == 23 and everything == sorted(names)

    paged: list[str] = []
    for offset in range(0, 30, 7):
        page, total = listed(client, limit=7, offset=offset)
        assert total == 23 and len(page) == min(7, max(0, 23 - offset))
        paged += page
    assert paged == everything
    assert listed(client, limit=7, offset=7) == (everything[7:14], 23)  # asked again: same
    assert listed(client, offset=100) == ([], 23)


def test_newest_created_first_and_most_recently_updated_first(
    client: TestClient, metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    for name in ("old", "middle", "new"):
        write_job(metrics_dir, name)
    client.get("/api/jobs")  # discovered; now give them distinct times
    with session_factory.begin() as session:
        for name, created, updated in (
            ("old", 100.0, 900.0),
            ("middle", 200.0, None),
            ("new", 300.0, 150.0),
        ):
            session.execute(
                update(Job).where(Job.job_id == name).values(created_at=created, updated_at=updated)
            )

    assert listed(client)[0] == ["new", "middle", "old"]
    assert listed(client, order="created")[0] == ["new", "middle", "old"]
    # A job without a status update counts from its registration.
    assert listed(client, order="updated")[0] == ["old", "middle", "new"]
    assert listed(client, order="updated", limit=1, offset=1)[0] == ["middle"]


def test_a_health_filter_pages_and_counts_the_matching_jobs(
    client: TestClient, metrics_dir: Path
) -> None:
    for index in range(5):
        write_job(metrics_dir, f"calm{index}")
        write_job(metrics_dir, f"hot{index}", anomaly="critical")
    write_job(metrics_dir, "warm", anomaly="warning")
    (metrics_dir / "flagged_status.json").write_text(
        json.dumps({"job_id": "flagged", "status": "running", "anomaly_detected": True})
    )
    write_job(metrics_dir, "flagged")
    client.get("/api/jobs")
    for job_id in [*(f"calm{i}" for i in range(5)), *(f"hot{i}" for i in range(5)), "warm"]:
        assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200
    assert client.post("/api/monitoring/flagged/metrics/sync").status_code == 200

    critical, total = listed(client, health="critical", limit=3)
    assert total == 5 and len(critical) == 3 and all(name.startswith("hot") for name in critical)
    rest, _ = listed(client, health="critical", limit=3, offset=3)
    assert sorted(critical + rest) == [f"hot{i}" for i in range(5)]
    assert listed(client, health="warning") == (["flagged", "warm"], 2)
    assert listed(client, health="ok")[1] == 5


@pytest.mark.parametrize(
    ("params", "where"),
    [
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"limit": "ten"}, "limit"),
        ({"offset": -1}, "offset"),
        ({"offset": 2**63}, "offset"),
        ({"order": "random"}, "order"),
    ],
)
def test_bad_paging_parameters_are_422(
    client: TestClient, params: dict[str, str | int], where: str
) -> None:
    response = client.get("/api/jobs", params=params)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", where]
