"""Background rounds over jobs whose files did not change cost nothing.

An idle round issues no database statement and at most one `os.stat` per job;
an append, a replaced status file or a stall still gets its job synced.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.live.hub import LiveHub
from training_platform.services import build_services
from training_platform.settings import Settings
from training_platform.store.models import Job, RunFile, TrainingMetric

JOBS = ("alpha", "beta", "gamma")


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def append(metrics_dir: Path, job_id: str, *steps: int) -> None:
    with (metrics_dir / f"{job_id}_metrics.jsonl").open("ab") as handle:
        for step in steps:
            record = build_record(step, {"loss": 1.0}, timestamp=10.0 * step)
            handle.write(encode_record(record))


def write_status(metrics_dir: Path, job_id: str, status: str, updated_at: float) -> None:
    """As the trainer's callback does: a new file renamed over the old one."""
    temporary = metrics_dir / f".{job_id}_status.json.tmp"
    temporary.write_text(json.dumps({"job_id": job_id, "status": status, "updated_at": updated_at}))
    os.replace(temporary, metrics_dir / f"{job_id}_status.json")


@contextmanager
def counting(engine: Engine, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """Counts SQL statements sent on `engine` and calls of `os.stat`."""
    counts = {"statements": 0, "stats": 0}
    real_stat = os.stat

    def count_statement(*_: Any) -> None:
        counts["statements"] += 1

    def counted_stat(*args: Any, **kwargs: Any) -> os.stat_result:
        counts["stats"] += 1
        return real_stat(*args, **kwargs)

    event.listen(engine, "before_cursor_execute", count_statement)
    monkeypatch.setattr(os, "stat", counted_stat)
    try:
        yield counts
    finally:
        monkeypatch.setattr(os, "stat", real_stat)
        event.remove(engine, "before_cursor_execute", count_statement)


@pytest.fixture
def hub(
    session_factory: sessionmaker[Session], settings: Settings, metrics_dir: Path
) -> tuple[LiveHub, FakeClock]:
    for job_id in JOBS:
        append(metrics_dir, job_id, 0, 1, 2)
        write_status(metrics_dir, job_id, "running", 1.0)
    polled = settings.model_copy(
        update={
            "poll_interval": 1e-6,  # every round is due: the test decides when rounds run
            "watch_files": False,
            "stall_factor": 3.0,
            "stall_min_seconds": 5.0,
        }
    )
    clock = FakeClock(time.time())
    return build_services(session_factory, polled, clock=clock).hub, clock


def run_rounds(hub: LiveHub, *steps: Callable[[], object]) -> None:
    """One round after each step (a callable run between rounds), syncs included."""

    async def scenario() -> None:
        hub.pipeline.attach(asyncio.get_running_loop())
        for step in steps:
            step()
            await hub.poll_round()
            await hub.wait_for_syncs()

    asyncio.run(scenario())


def stored_steps(factory: sessionmaker[Session], job_id: str) -> list[int]:
    with factory() as session:
        return list(
            session.scalars(select(TrainingMetric.step).where(TrainingMetric.job_id == job_id))
        )


def status_of(factory: sessionmaker[Session], job_id: str) -> str:
    with factory() as session:
        job = session.get(Job, job_id)
        assert job is not None
        return job.status


def test_an_idle_round_issues_no_statement_and_one_stat_per_job(
    hub: tuple[LiveHub, FakeClock],
    engine: Engine,
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live_hub, _ = hub
    run_rounds(live_hub, lambda: None)  # the first round discovers and ingests everything
    assert all(stored_steps(session_factory, job_id) == [0, 1, 2] for job_id in JOBS)

    with counting(engine, monkeypatch) as counts:
        run_rounds(live_hub, lambda: None, lambda: None, lambda: None)
    assert counts["statements"] == 0
    assert counts["stats"] <= 3 * len(JOBS)  # three rounds, at most one stat per job each


def test_a_changed_file_is_still_synced_and_only_its_job(
    hub: tuple[LiveHub, FakeClock],
    engine: Engine,
    session_factory: sessionmaker[Session],
    metrics_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live_hub, _ = hub
    run_rounds(live_hub, lambda: None)
    synced: list[str] = []
    monkeypatch.setattr(
        live_hub.service, "sync_in_background", _spy(live_hub.service.sync_in_background, synced)
    )

    run_rounds(live_hub, lambda: append(metrics_dir, "beta", 3))
    assert synced == ["beta"]
    assert stored_steps(session_factory, "beta") == [0, 1, 2, 3]

    # A new status file (renamed over the old one, same size) is a change too.
    run_rounds(live_hub, lambda: write_status(metrics_dir, "gamma", "completed", 2.0))
    assert synced == ["beta", "gamma"]
    assert status_of(session_factory, "gamma") == "completed"

    # So is a run file written (or rewritten) by the trainer: its metadata is stored.
    def write_run_file() -> None:
        temporary = metrics_dir / ".alpha_run.json.tmp"
        temporary.write_text(json.dumps({"job_id": "alpha", "project": "idle-p"}))
        os.replace(temporary, metrics_dir / "alpha_run.json")

    run_rounds(live_hub, write_run_file)
    assert synced == ["beta", "gamma", "alpha"]
    with session_factory() as session:
        run = session.get(RunFile, "alpha")
        assert run is not None and run.project == "idle-p"

    with counting(engine, monkeypatch) as counts:
        run_rounds(live_hub, lambda: None)
    assert counts["statements"] == 0 and synced == ["beta", "gamma", "alpha"]


def test_a_silent_running_job_is_synced_once_to_be_marked_stalled(
    hub: tuple[LiveHub, FakeClock],
    engine: Engine,
    session_factory: sessionmaker[Session],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    live_hub, clock = hub
    run_rounds(live_hub, lambda: None)
    assert status_of(session_factory, "alpha") == "running"

    def time_passes() -> None:
        clock.now += 3600

    run_rounds(live_hub, time_passes)  # files unchanged, but silence is news
    assert {status_of(session_factory, job_id) for job_id in JOBS} == {"stalled"}

    with counting(engine, monkeypatch) as counts:
        run_rounds(live_hub, time_passes, time_passes)
    assert counts["statements"] == 0


def test_a_registered_job_is_picked_up_by_the_next_round(
    hub: tuple[LiveHub, FakeClock],
    session_factory: sessionmaker[Session],
    tmp_path: Path,
) -> None:
    live_hub, _ = hub
    run_rounds(live_hub, lambda: None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    append(elsewhere, "delta", 0, 1)

    def register() -> None:
        with session_factory.begin() as session:
            session.add(
                Job(
                    job_id="delta",
                    source="local",
                    discovered=False,
                    metrics_dir=str(elsewhere),
                    status="pending",
                    anomaly_detected=False,
                    created_at=time.time(),
                )
            )
        live_hub.jobs_changed()  # what POST /api/jobs does

    run_rounds(live_hub, register)
    assert stored_steps(session_factory, "delta") == [0, 1]


def _spy(sync: Callable[[str], Any], synced: list[str]) -> Callable[[str], Any]:
    def recorded(job_id: str) -> Any:
        synced.append(job_id)
        return sync(job_id)

    return recorded
