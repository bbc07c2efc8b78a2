"""Reading metric history and anomalies back out (REST, playback, backfill)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import Anomaly, TrainingMetric


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
    """The stored rows, one per (step, type, source), in step order."""
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


@dataclass(frozen=True)
class AnomalyPage:
    rows: list[Anomaly]
    next_start_step: int | None  # where the next page starts; None: nothing remains
    truncated: bool  # one step alone had more than `limit` rows: the rest of it is left out


def anomaly_page(
    session: Session,
    *,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    source: str | None,
    limit: int,
) -> AnomalyPage:
    """At most `limit` stored rows, whole steps only, so incidents never split across pages."""
    rows = list_anomalies(
        session,
        job_id=job_id,
        start_step=start_step,
        end_step=end_step,
        source=source,
        limit=limit + 1,
    )
    if len(rows) <= limit:
        return AnomalyPage(rows, None, False)
    next_step = rows[limit].step
    whole = [row for row in rows[:limit] if row.step != next_step]
    if whole:
        return AnomalyPage(whole, next_step, False)
    # One step has more rows than the page holds (a tiny `limit`): serve what
    # fits and move on, saying so, rather than answering the same page forever.
    return AnomalyPage(rows[:limit], next_step + 1, True)
