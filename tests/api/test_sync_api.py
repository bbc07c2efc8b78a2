"""`POST .../metrics/sync`: a long backlog answers within its time budget, the rest follows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.api.main import create_app
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.settings import Settings
from training_platform.store.models import SyncState, TrainingMetric

BACKLOG = 4_000  # lines; with 4 KiB batches, ~100 transactions: far more than the budget allows


def write_backlog(directory: Path, job_id: str, steps: int) -> Path:
    path = directory / f"{job_id}_metrics.jsonl"
    with path.open("ab") as handle:
        handle.writelines(
            encode_record(build_record(step, {"loss": 1.0 / (step + 1)}, timestamp=1.0 + step))
            for step in range(steps)
        )
    return path


@pytest.fixture
def budgeted_client(settings: Settings) -> Iterator[TestClient]:
    """The server with a tiny request budget and small batches (a backlog in miniature)."""
    small = settings.model_copy(update={"sync_request_budget": 0.01, "sync_batch_bytes": 4096})
    with TestClient(create_app(small)) as client:
        yield client


def wait_for(
    client: TestClient, job_id: str, count: int, status: str | None = None, timeout: float = 60.0
) -> dict:
    """The job once `count` steps are stored, its whole file read (and `status` copied)."""
    deadline = time.monotonic() + timeout
    while True:
        job = client.get(f"/api/jobs/{job_id}").json()
        caught_up = job["metrics_count"] >= count and job["sync"]["offset"] == job_size(job)
        # The status file is read right after the last batch commits, not with it.
        if caught_up and status in (None, job["status"]):
            return job
        assert time.monotonic() < deadline, f"background sync stalled at {job['metrics_count']}"
        time.sleep(0.05)


def job_size(job: dict) -> int:
    return (Path(job["metrics_dir"]) / f"{job['job_id']}_metrics.jsonl").stat().st_size


def test_a_long_backlog_answers_within_the_budget_and_the_rest_follows_in_the_background(
    budgeted_client: TestClient, metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    path = write_backlog(metrics_dir, "big", BACKLOG)
    (metrics_dir / "big_status.json").write_text('{"job_id": "big", "status": "completed"}')
    size = path.stat().st_size

    started = time.monotonic()
    answer = budgeted_client.post("/api/monitoring/big/metrics/sync").json()
    elapsed = time.monotonic() - started

    assert answer["at_eof"] is False
    assert 0 < answer["new_metrics"] < BACKLOG
    assert answer["bytes_remaining"] == size - answer["offset"] > 0
    assert answer["file_size"] == size
    # The status file says completed, but lines are still waiting: announcing
    # the end now would put it before the run's last steps.
    assert answer["status_changed"] is False
    assert elapsed < 5.0

    # The server's poller is off (PLATFORM_POLL_INTERVAL=0): the rest is
    # ingested because the request handed it to the background sync.
    job = wait_for(budgeted_client, "big", BACKLOG, status="completed")

    assert job["metrics_count"] == BACKLOG
    with session_factory() as session:
        state = session.get(SyncState, ("big", "metrics"))
        assert state is not None
        # Every line ingested exactly once, whichever sync read it.
        assert (state.offset, state.records_ingested) == (size, BACKLOG)
        steps = session.scalars(
            select(TrainingMetric.step).where(TrainingMetric.job_id == "big")
        ).all()
        assert sorted(steps) == list(range(BACKLOG))


def test_manual_syncs_racing_the_background_one_ingest_every_line_once(
    budgeted_client: TestClient, metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    path = write_backlog(metrics_dir, "big", BACKLOG)
    answers = [budgeted_client.post("/api/monitoring/big/metrics/sync").json() for _ in range(5)]

    wait_for(budgeted_client, "big", BACKLOG)

    offsets = [answer["offset"] for answer in answers]
    assert offsets == sorted(offsets)  # each sync went on from where the last one stopped
    with session_factory() as session:
        state = session.get(SyncState, ("big", "metrics"))
        assert state is not None and state.offset == path.stat().st_size
        assert state.records_ingested == BACKLOG
        rows = session.scalar(
            select(func.count()).select_from(TrainingMetric).where(TrainingMetric.job_id == "big")
        )
    assert rows == BACKLOG
    # The background catch-up may still hold the job for its last reads (the
    # status and run files, the live announcements): with a 10 ms budget the
    # answer is then its progress. Nothing is left to ingest either way, and a
    # sync that gets the job finds the end of the file.
    deadline = time.monotonic() + 10
    while True:
        final = budgeted_client.post("/api/monitoring/big/metrics/sync").json()
        assert (final["bytes_remaining"], final["new_metrics"]) == (0, 0)
        if final["at_eof"] or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert final["at_eof"] is True


def test_a_small_backlog_is_ingested_whole_in_the_request(
    client: TestClient, metrics_dir: Path
) -> None:
    path = write_backlog(metrics_dir, "small", 50)
    (metrics_dir / "small_status.json").write_text('{"job_id": "small", "status": "completed"}')

    answer = client.post("/api/monitoring/small/metrics/sync").json()

    assert answer["at_eof"] is True
    assert (answer["new_metrics"], answer["bytes_remaining"]) == (50, 0)
    assert answer["offset"] == path.stat().st_size
    assert answer["status_changed"] is True


def test_the_request_budget_is_a_setting_with_a_sane_default() -> None:
    assert Settings().sync_request_budget == 2.0
    assert Settings(PLATFORM_SYNC_REQUEST_BUDGET="0.5").sync_request_budget == 0.5
    with pytest.raises(ValueError):
        Settings(PLATFORM_SYNC_REQUEST_BUDGET="0")


def test_a_sync_already_running_for_the_job_does_not_hold_the_request(
    budgeted_client: TestClient, metrics_dir: Path
) -> None:
    path = write_backlog(metrics_dir, "big", 200)
    first = budgeted_client.post("/api/monitoring/big/metrics/sync").json()
    wait_for(budgeted_client, "big", 200)
    write_backlog(metrics_dir, "big", 10)
    service = budgeted_client.app.state.sync_service  # type: ignore[attr-defined]

    # Another sync of the job (a background catch-up) is holding its lock.
    with service.job_lock("big"):
        started = time.monotonic()
        busy = budgeted_client.post("/api/monitoring/big/metrics/sync").json()
        elapsed = time.monotonic() - started

    assert elapsed < 2.0
    assert (busy["new_metrics"], busy["at_eof"]) == (0, False)
    assert busy["offset"] >= first["offset"]
    assert busy["bytes_remaining"] == busy["file_size"] - busy["offset"]
    # The busy answer handed the rest to the background sync, which goes on
    # once the lock is free.
    assert wait_for(budgeted_client, "big", 200)["sync"]["offset"] == path.stat().st_size


def test_deleting_a_job_stops_its_background_catch_up_promptly(
    budgeted_client: TestClient, metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    path = write_backlog(metrics_dir, "huge", 10 * BACKLOG)  # ~1,000 batches to go
    first = budgeted_client.post("/api/monitoring/huge/metrics/sync").json()
    assert first["at_eof"] is False  # the rest is being ingested in the background now
    time.sleep(0.2)

    started = time.monotonic()
    response = budgeted_client.delete("/api/jobs/huge")
    elapsed = time.monotonic() - started

    assert response.status_code == 204
    assert elapsed < 3.0  # not the whole catch-up
    time.sleep(0.5)  # whatever was in flight has stopped: nothing comes back
    with session_factory() as session:
        stored = session.scalar(
            select(func.count()).select_from(TrainingMetric).where(TrainingMetric.job_id == "huge")
        )
        assert stored == 0
        assert session.get(SyncState, ("huge", "metrics")) is None
    assert budgeted_client.get("/api/jobs/huge").status_code == 404
    assert path.exists()
