"""The history answer's `timestamps` (the dashboard's wall-clock axis), on both databases.

Every tier of `downsampled_history` (exact rows, buckets from rows, buckets
from the rollups) gives each point the timestamp of the record at its first
step, and null where that record has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.records import build_record, normalize_record
from training_platform.history.series.answer import downsampled_history
from training_platform.history.series.plan import RAW_BUCKETING_ROWS
from training_platform.history.series.stored.refresh import refresh_rollups
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.store.models import Job

JOB = "stamps"
START = 1.7e9


def _time_of(step: int) -> float:
    return START + step * 2.5


def _store(
    factory: sessionmaker[Session],
    steps: list[int],
    untimed: Callable[[int], bool] = lambda step: False,
) -> None:
    records = [
        normalize_record({"step": step, "loss": {"actor_loss": 1.0}})
        if untimed(step)
        else build_record(step, {"loss": {"actor_loss": 1.0}}, timestamp=_time_of(step))
        for step in steps
    ]
    with factory() as session:
        session.add(Job(job_id=JOB, created_at=0.0))
        session.flush()
        for start in range(0, len(records), 5_000):
            batch = records[start : start + 5_000]
            upsert_metrics(session, job_id=JOB, records=batch, received_at=1.0)
            refresh_rollups(session, job_id=JOB, records=batch)
        session.commit()


def _history(factory: sessionmaker[Session], max_points: int, **kwargs: Any) -> dict[str, Any]:
    with factory() as session:
        return downsampled_history(
            session,
            job_id=JOB,
            start_step=kwargs.get("start_step"),
            end_step=kwargs.get("end_step"),
            max_points=max_points,
        )


def test_exact_answers_carry_every_records_timestamp(
    session_factory: sessionmaker[Session],
) -> None:
    _store(session_factory, list(range(0, 40, 2)))

    body = _history(session_factory, 100)

    assert body["downsampled"] is False
    assert body["timestamps"] == [_time_of(step) for step in body["steps"]]


@pytest.mark.parametrize("rows", [RAW_BUCKETING_ROWS - 100, 3 * RAW_BUCKETING_ROWS])
def test_buckets_carry_their_first_steps_timestamp(
    session_factory: sessionmaker[Session], rows: int
) -> None:
    """Below RAW_BUCKETING_ROWS the buckets come from rows; above, from the rollups."""
    _store(session_factory, list(range(rows)))

    for body in (
        _history(session_factory, 200),
        _history(session_factory, 150, start_step=1_003, end_step=rows - 7),
    ):
        assert body["downsampled"] is True
        assert len(body["timestamps"]) == len(body["steps"]) == body["count"]
        assert body["timestamps"] == [_time_of(step) for step in body["steps"]]


def test_a_record_without_a_timestamp_gives_null(session_factory: sessionmaker[Session]) -> None:
    # verl's file logger writes no timestamp: such points have no time, not a made-up one.
    _store(session_factory, list(range(100)), untimed=lambda step: step % 3 == 0)

    exact = _history(session_factory, 1_000)
    bucketed = _history(session_factory, 10)

    assert exact["timestamps"] == [
        None if step % 3 == 0 else _time_of(step) for step in exact["steps"]
    ]
    assert bucketed["downsampled"] is True
    assert bucketed["timestamps"] == [
        None if step % 3 == 0 else _time_of(step) for step in bucketed["steps"]
    ]
    assert None in bucketed["timestamps"]


def test_an_empty_range_has_no_timestamps(session_factory: sessionmaker[Session]) -> None:
    _store(session_factory, [5])

    assert _history(session_factory, 10, start_step=6)["timestamps"] == []
