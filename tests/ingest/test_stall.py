"""Stall detection with an injected clock: a "running" run whose file stopped growing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.ingest.stall import StallWatch
from training_platform.ingest.sync_service import SyncService
from training_platform.settings import Settings
from training_platform.store.models import Job


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_silence_counts_against_the_runs_own_step_time() -> None:
    clock = FakeClock(1000.0)
    watch = StallWatch(factor=10, min_seconds=5, clock=clock)
    watch.note_records("run1", [{"step": s, "timestamp": 100.0 + 2 * s} for s in range(5)])

    assert watch.step_time("run1") == 2.0 and watch.threshold("run1") == 20.0
    clock.now += 19
    assert not watch.is_stalled("run1")
    clock.now += 2
    assert watch.is_stalled("run1")
    watch.note_records("run1", [{"step": 5, "timestamp": 110.0}])  # it moved again
    assert not watch.is_stalled("run1")


def test_the_minimum_applies_to_fast_runs_and_a_fresh_status_is_a_sign_of_life() -> None:
    clock = FakeClock(1000.0)
    watch = StallWatch(factor=10, min_seconds=60, clock=clock)
    watch.note_records("run1", [{"step": s, "timestamp": 100.0 + 0.1 * s} for s in range(5)])
    watch.note_status("run1", 5.0)  # the first value seen is only a baseline
    clock.now += 50
    assert not watch.is_stalled("run1")  # 50 s > 10 x 0.1 s, but < the 60 s minimum
    clock.now += 20
    watch.note_status("run1", 5.0)  # unchanged: no sign of life
    assert watch.is_stalled("run1")
    watch.note_status("run1", 6.0)  # the trainer rewrote its status file
    assert not watch.is_stalled("run1")


@pytest.fixture
def run1(metrics_dir: Path) -> Path:
    path = metrics_dir / "run1_metrics.jsonl"
    path.write_bytes(b"")
    (metrics_dir / "run1_status.json").write_text(
        json.dumps({"job_id": "run1", "status": "running", "current_step": 0, "updated_at": 1.0})
    )
    return path


def append(path: Path, *steps: int) -> None:
    with path.open("ab") as handle:
        for step in steps:
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=10.0 * step)))


def service_with(
    factory: sessionmaker[Session], settings: Settings, clock: FakeClock
) -> SyncService:
    return SyncService(factory, settings, stall=StallWatch(factor=3, min_seconds=5, clock=clock))


def status_of(factory: sessionmaker[Session]) -> str:
    with factory() as session:
        job = session.get(Job, "run1")
        assert job is not None
        return job.status


def test_a_silent_running_job_is_marked_stalled_then_running_again(
    session_factory: sessionmaker[Session], settings: Settings, run1: Path
) -> None:
    clock = FakeClock(time.time())
    service = service_with(session_factory, settings, clock)
    append(run1, 0, 1, 2)  # 10 s apart: stalled after 30 s of silence
    assert service.sync_job("run1").status_changed
    assert status_of(session_factory) == "running"

    clock.now += 25
    assert not service.sync_job("run1").status_changed
    clock.now += 10
    assert service.sync_job("run1").status_changed
    assert status_of(session_factory) == "stalled"
    # The status file still says running: re-reading it must not flip the mark back.
    assert not service.sync_job("run1").status_changed
    assert status_of(session_factory) == "stalled"

    append(run1, 3)
    assert service.sync_job("run1").status_changed
    assert status_of(session_factory) == "running"


def test_after_a_restart_silence_is_counted_from_the_last_stored_record(
    session_factory: sessionmaker[Session], settings: Settings, run1: Path
) -> None:
    append(run1, 0, 1, 2)
    service_with(session_factory, settings, FakeClock(time.time())).sync_job("run1")

    soon = service_with(session_factory, settings, FakeClock(time.time() + 20))
    soon.sync_job("run1")
    assert status_of(session_factory) == "running"
    late = service_with(session_factory, settings, FakeClock(time.time() + 40))
    late.sync_job("run1")
    assert status_of(session_factory) == "stalled"


def test_a_finished_run_is_never_stalled(
    session_factory: sessionmaker[Session], settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    clock = FakeClock(time.time())
    service = service_with(session_factory, settings, clock)
    append(run1, 0, 1)
    (metrics_dir / "run1_status.json").write_text(json.dumps({"status": "completed"}))
    service.sync_job("run1")
    clock.now += 3600
    service.sync_job("run1")
    assert status_of(session_factory) == "completed"
