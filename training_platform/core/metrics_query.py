"""Reading metric history and anomalies back out (REST, playback, backfill)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from training_platform.core.metric_rows import row_to_record
from training_platform.core.models import Anomaly, TrainingMetric


def list_metrics(
    session: Session,
    *,
    job_id: str,
    start_step: int | None = None,
    end_step: int | None = None,
    limit: int | None = None,
    nonfinite_as_strings: bool = False,
) -> list[dict[str, Any]]:
    """Records of a job in step order, `start_step` and `end_step` inclusive."""
    query = select(TrainingMetric).where(TrainingMetric.job_id == job_id)
    if start_step is not None:
        query = query.where(TrainingMetric.step >= start_step)
    if end_step is not None:
        query = query.where(TrainingMetric.step <= end_step)
    query = query.order_by(TrainingMetric.step)
    if limit is not None:
        query = query.limit(limit)
    return [
        row_to_record(row, nonfinite_as_strings=nonfinite_as_strings)
        for row in session.scalars(query)
    ]


def list_anomalies(
    session: Session,
    *,
    job_id: str,
    start_step: int | None = None,
    end_step: int | None = None,
    source: str | None = None,
    limit: int | None = None,
) -> list[Anomaly]:
    query = select(Anomaly).where(Anomaly.job_id == job_id)
    if start_step is not None:
        query = query.where(Anomaly.step >= start_step)
    if end_step is not None:
        query = query.where(Anomaly.step <= end_step)
    if source is not None:
        query = query.where(Anomaly.source == source)
    query = query.order_by(Anomaly.step, Anomaly.id)
    if limit is not None:
        query = query.limit(limit)
    return list(session.scalars(query))
