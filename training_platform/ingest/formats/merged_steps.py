"""Storing another tool's records merged into the steps already stored.

Other tools log a step in pieces: TensorBoard one event per tag (often split
across reads and files), Trackio and MLflow one row per `log` call. So a
record read from them is merged into its step's stored record (newer values
win, group by group) rather than replacing it: the stored row and the
announced record are the step's every value so far. The platform's own
metrics file writes whole steps and replaces them (`metrics_file.py`).
"""

from __future__ import annotations

import json
from bisect import bisect_right
from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.ingest.file_kinds import LineFileKind, ReadDatabase, ScanFile, StoredRows
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
    announced is the step as stored; a step whose values did not change is taken
    out of `records` (neither written nor announced: a source read again)."""
    latest: dict[int, dict[str, Any]] = {}
    for record in records:  # a step logged twice in one batch: the later one completed
        earlier = latest.get(record["step"])
        if earlier is not None:
            _merge_into(record, earlier)
        latest[record["step"]] = record
    unchanged: set[int] = set()
    for step, earlier in _stored(session, job_id, sorted(latest)).items():
        _merge_into(latest[step], earlier)
        if _values(latest[step]) == _values(earlier):
            unchanged.add(step)  # read again (a source re-read): not written, not announced
    if unchanged:
        records[:] = [record for record in records if record["step"] not in unchanged]
    if not records:
        return StoredRows(0)
    return METRICS.store(session, job_id, records, received_at, notes)


def _values(record: dict[str, Any]) -> str:
    """A record's values, comparable (NaN equal to NaN), its time aside."""
    kept = {group: values for group, values in record.items() if group not in _NOT_GROUPS}
    return json.dumps(kept, sort_keys=True, default=str)


def _stored(session: Session, job_id: str, steps: list[int]) -> dict[int, dict[str, Any]]:
    """The stored records of `steps` (sorted); appends, the common case, cost one
    indexed max() lookup. Only steps up to the stored maximum can be stored, so only
    they are looked up: a batch cut within a step (MLflow's, by rowid) looks up
    that one step, not every step after it."""
    stored_max = session.scalar(
        select(func.max(TrainingMetric.step)).where(TrainingMetric.job_id == job_id)
    )
    if stored_max is None:
        return {}
    steps = steps[: bisect_right(steps, stored_max)]
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


def merged_metrics_kind(
    *,
    file: str | None = None,
    scan: ScanFile | None = None,
    query: ReadDatabase | None = None,
) -> LineFileKind:
    """Another tool's metrics as a kind: stored merged per step, announced as metrics.

    A file read by `scan` (one of several a run has) is its own kind, named
    ``metrics.<file>`` (its own `sync_state` row); rows read by `query` are the
    job's ``metrics``.
    """
    return LineFileKind(
        name=METRICS.name if scan is None else f"{METRICS.name}.{file}",
        suffix="",
        decode=METRICS.decode,  # never called: `scan` or `query` reads the rows
        store=store_merged,
        key=METRICS.key,
        required=query is not None,
        file=file,
        scan=scan,
        query=query,
    )
