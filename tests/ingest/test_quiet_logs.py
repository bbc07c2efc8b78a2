"""Quiet logs over many rounds: a stall and a failing sync are logged once per change."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.ingest.polling import PollRule, poll_once
from training_platform.ingest.readers import SYMLINK_REFUSED
from training_platform.ingest.registry import register_job
from training_platform.ingest.stall import StallWatch
from training_platform.ingest.sync_service import SyncService
from training_platform.settings import Settings


class FakeClock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def append(path: Path, *steps: int) -> None:
    with path.open("ab") as handle:
        for step in steps:
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=10.0 * step)))


def messages(caplog: pytest.LogCaptureFixture, job_id: str, level: int) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == level and job_id in record.getMessage()
    ]


def test_a_stall_is_logged_once_when_it_starts_and_once_when_it_ends(
    session_factory: sessionmaker[Session],
    settings: Settings,
    metrics_dir: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = metrics_dir / "run1_metrics.jsonl"
    (metrics_dir / "run1_status.json").write_text(
        json.dumps({"job_id": "run1", "status": "running", "updated_at": 1.0})
    )
    append(metrics, 0, 1, 2)  # 10 s apart: stalled after 30 s of silence
    clock = FakeClock(time.time())
    # The sync service marks stalls itself: no listener is needed for it.
    service = SyncService(
        session_factory, settings, stall=StallWatch(factor=3, min_seconds=5, clock=clock)
    )
    caplog.set_level(logging.INFO, logger="training_platform")

    service.sync_job("run1")
    clock.now += 60
    for _ in range(5):  # every round re-reads "running" from the status file
        service.sync_job("run1")
        clock.now += 1
    stalled = messages(caplog, "run1", logging.WARNING)
    assert len(stalled) == 1 and "stalled" in stalled[0]

    append(metrics, 3)
    for _ in range(3):
        service.sync_job("run1")
    assert len(messages(caplog, "run1", logging.WARNING)) == 1
    recovered = messages(caplog, "run1", logging.INFO)
    assert len(recovered) == 1 and "no longer stalled" in recovered[0]

    clock.now += 60  # stalls again: logged again, once
    for _ in range(3):
        service.sync_job("run1")
    assert len(messages(caplog, "run1", logging.WARNING)) == 2


def test_a_failing_sync_logs_its_error_once_per_change(
    session_factory: sessionmaker[Session],
    settings: Settings,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    with session_factory.begin() as session:
        register_job(session, settings, job_id="ghost", metrics_dir=str(runs))
    service = SyncService(session_factory, settings)
    rule = PollRule(service, settings)
    caplog.set_level(logging.DEBUG, logger="training_platform")

    for _ in range(4):  # its metrics file does not exist
        poll_once(service, rule)
    missing = messages(caplog, "ghost", logging.WARNING)
    assert len(missing) == 1 and "does not exist" in missing[0]
    assert not [record for record in caplog.records if record.exc_info]  # no traceback

    target = tmp_path / "real_metrics.jsonl"
    append(target, 0)
    (runs / "ghost_metrics.jsonl").symlink_to(target)  # refused: another error
    for _ in range(3):
        poll_once(service, rule)
    refused = messages(caplog, "ghost", logging.WARNING)
    assert len(refused) == 2 and SYMLINK_REFUSED in refused[1]

    (runs / "ghost_metrics.jsonl").unlink()
    append(runs / "ghost_metrics.jsonl", 0, 1)
    for _ in range(3):
        poll_once(service, rule)
    assert len(messages(caplog, "ghost", logging.WARNING)) == 2
    works = messages(caplog, "ghost", logging.INFO)
    assert len(works) == 1 and "works again" in works[0]
