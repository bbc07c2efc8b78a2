"""The metrics file as a kind of line file: `{job_id}_metrics.jsonl` -> `training_metrics`.

Its lines are the wire records of docs/contract.md §1; a step's newest record
wins; the downsampling buckets (`history/series/stored/refresh.py`) and the callback's
anomalies commit with the rows. `sync_metrics_from_file` is the persister
(`ingest/persister.py`) applied to this kind.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire.lines import decode_line
from training_platform.callbacks.wire.records import normalize_record
from training_platform.history.series.stored.refresh import refresh_rollups
from training_platform.ingest.file_kinds import LineFileKind, StoredRows
from training_platform.ingest.persister import CommittedBatch, SyncResult, sync_file
from training_platform.ingest.readers import METRICS_SUFFIX, MetricsReader, ReadPosition
from training_platform.store.bulk_write import UPSERT_CHUNK, bulk_upsert, chunks
from training_platform.store.database import dialect_insert
from training_platform.store.metric_rows import record_to_params, record_to_row
from training_platform.store.models import Anomaly, TrainingMetric


def parse_platform_metric(
    data: bytes | str | Mapping[str, Any], *, job_id: str, received_at: float | None = None
) -> dict[str, Any]:
    """A `training_metrics` row (column -> value) from one JSONL line or record.

    Raises `RecordError` when the line is not a valid record.
    """
    if isinstance(data, str):
        data = data.encode()
    record = (
        decode_line(data.rstrip(b"\n")) if isinstance(data, bytes) else normalize_record(dict(data))
    )
    return record_to_row(job_id, record, time.time() if received_at is None else received_at)


def upsert_metrics(
    session: Session,
    *,
    job_id: str,
    records: list[dict[str, Any]],
    received_at: float,
    notes: list[str] | None = None,
    written_anomalies: list[dict[str, Any]] | None = None,
) -> int:
    """Insert or replace one row per step (the last record for a step wins).

    Also refreshes the callback-reported anomalies of the steps written
    (`written_anomalies` gets the rows, as stored). Only adds/flushes: the
    caller owns the transaction. Returns the rows written. Values no database
    could store are replaced (see `store/storable.py`), in the records too;
    `notes` gets "step N: what changed" for each.
    """
    if not records:
        return 0
    latest: dict[int, dict[str, Any]] = {}
    for record in records:  # later lines win within a batch too
        latest[record["step"]] = record
    params = [_params(job_id, record, received_at, notes) for record in latest.values()]

    # A step we already hold is being rewritten (a run resumed from a
    # checkpoint): its old callback anomalies must go with the old record.
    # Appends, the common case, skip this with one indexed max() lookup.
    stored_max = session.scalar(
        select(func.max(TrainingMetric.step)).where(TrainingMetric.job_id == job_id)
    )
    appending = stored_max is None or min(latest) > stored_max
    if stored_max is not None and not appending:
        rewritten = [step for step in latest if step <= stored_max]
        for chunk_start in range(0, len(rewritten), 500):
            session.execute(
                delete(Anomaly).where(
                    Anomaly.job_id == job_id,
                    Anomaly.source == "callback",
                    Anomaly.step.in_(rewritten[chunk_start : chunk_start + 500]),
                )
            )

    bulk_upsert(session, params, appending=appending)
    # The downsampling buckets commit with the rows they summarise.
    refresh_rollups(session, job_id=job_id, records=list(latest.values()), rows=params)

    anomaly_rows = [
        {
            "job_id": job_id,
            "step": step,
            "type": anomaly["type"],
            "severity": anomaly["severity"],
            "message": anomaly["message"],
            "source": "callback",
            "created_at": received_at,
        }
        for step, record in latest.items()
        for anomaly in record.get("anomalies") or ()
    ]
    if anomaly_rows:
        upsert_anomalies(session, anomaly_rows)
        if written_anomalies is not None:
            written_anomalies.extend(anomaly_rows)
    return len(params)


def _store(
    session: Session,
    job_id: str,
    records: list[dict[str, Any]],
    received_at: float,
    notes: list[str],
) -> StoredRows:
    # `upsert_metrics` is looked up when called: tests replace it to crash mid-batch.
    anomalies: list[dict[str, Any]] = []
    written = upsert_metrics(
        session,
        job_id=job_id,
        records=records,
        received_at=received_at,
        notes=notes,
        written_anomalies=anomalies,
    )
    return StoredRows(written, anomalies)


def _step(record: dict[str, Any]) -> int:
    step: int = record["step"]
    return step


METRICS = LineFileKind(
    name="metrics",
    suffix=METRICS_SUFFIX,
    decode=decode_line,
    store=_store,
    key=_step,
    required=True,  # a job is its metrics file
)


def sync_metrics_from_file(
    factory: sessionmaker[Session],
    job_id: str,
    reader: MetricsReader,
    *,
    max_batches: int | None = None,
    on_commit: Callable[[CommittedBatch], None] | None = None,
    position: ReadPosition | None = None,
) -> SyncResult:
    """`sync_file` of the job's metrics file (see there)."""
    return sync_file(
        factory,
        job_id,
        reader,
        METRICS,
        max_batches=max_batches,
        on_commit=on_commit,
        position=position,
    )


def _params(
    job_id: str, record: dict[str, Any], received_at: float, notes: list[str] | None
) -> list[Any]:
    if notes is None:
        return record_to_params(job_id, record, received_at)
    changes: list[str] = []
    params = record_to_params(job_id, record, received_at, notes=changes)
    notes.extend(f"step {record['step']}: {change}" for change in changes)
    return params


def upsert_anomalies(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert anomalies; one per (job, step, type, source), the newest message wins."""
    insert = dialect_insert(session)
    stmt = insert(Anomaly.__table__)
    stmt = stmt.on_conflict_do_update(
        index_elements=["job_id", "step", "type", "source"],
        set_={
            "severity": stmt.excluded.severity,
            "message": stmt.excluded.message,
            "evidence": stmt.excluded.evidence,
            "end_step": stmt.excluded.end_step,
        },
    )
    unique = {(r["job_id"], r["step"], r["type"], r["source"]): r for r in rows}
    for chunk in chunks(list(unique.values()), UPSERT_CHUNK):
        session.execute(stmt, chunk)
