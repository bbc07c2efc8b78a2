"""Storing another tool's records merged into the steps already stored.

Other tools log a step in pieces: TensorBoard one event per tag (often split
across reads and files), Trackio and MLflow one row per `log` call. So a
record read from them is merged into its step's stored record (newer values
win, group by group) rather than replacing it: the stored row and the
announced record are the step's every value so far. The platform's own
metrics file writes whole steps and replaces them (`metrics_file.py`).
"""

from __future__ import annotations

from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.ingest.file_kinds import StoredRows
from training_platform.ingest.metrics_file import METRICS
from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import TrainingMetric

# The parts of a record that are not groups of name -> value: the newer one's.
_NOT_GROUPS: Final = frozenset({"step", "timestamp", "anomalies"})


def store_merged(
    session: Session,
    job_id: str,
    records: list[dict[str, Any]],
    received_at: float,
    notes: list[str],
) -> StoredRows:
    """Each record merged into its step's stored record (newer values win), then stored
    as the metrics file's records are. The records are completed in place: what is
    announced is the step as stored."""
    latest: dict[int, dict[str, Any]] = {}
    for record in records:  # a step logged twice in one batch: the later one completed
        earlier = latest.get(record["step"])
        if earlier is not None:
            _merge_into(record, earlier)
        latest[record["step"]] = record
    for step, earlier in _stored(session, job_id, sorted(latest)).items():
        _merge_into(latest[step], earlier)
    return METRICS.store(session, job_id, records, received_at, notes)


def _stored(session: Session, job_id: str, steps: list[int]) -> dict[int, dict[str, Any]]:
    """The stored records of `steps` (sorted); appends, the common case, cost one
    indexed max() lookup."""
    stored_max = session.scalar(
        select(func.max(TrainingMetric.step)).where(TrainingMetric.job_id == job_id)
    )
    if stored_max is None or steps[0] > stored_max:
        return {}
    found: dict[int, dict[str, Any]] = {}
    for start in range(0, len(steps), 500):
        rows = session.scalars(
            select(TrainingMetric).where(
                TrainingMetric.job_id == job_id, TrainingMetric.step.in_(steps[start : start + 500])
            )
        )
        found.update((row.step, row_to_record(row)) for row in rows)
    return found


def _merge_into(record: dict[str, Any], earlier: dict[str, Any]) -> None:
    for group, values in earlier.items():
        if group in _NOT_GROUPS:
            continue
        newer = record.get(group)
        if isinstance(values, dict) and isinstance(newer, dict):
            record[group] = {**values, **newer}
        elif newer is None:
            record[group] = values
