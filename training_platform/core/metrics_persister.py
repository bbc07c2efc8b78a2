"""Read -> parse -> upsert -> advance the offset, exactly once.

The exactly-once argument, in three rules:

1. Rows are upserted by primary key (job_id, step): replaying a line can only
   rewrite the same row with the same (or a newer) record, never add one.
2. The byte offset is committed in the same transaction as the rows read up to
   it, so a crash at any point leaves either both or neither.
3. The file is read *outside* the transaction, then the offset is advanced with
   a compare-and-swap (`UPDATE ... WHERE offset = <the one we read from>`) as
   the transaction's first statement. Two syncs of one job racing (the
   background poller and `POST .../sync`, or two server processes) cannot both
   win: the loser rolls back and re-reads from the winner's offset. Being the
   first statement also takes SQLite's write lock before any read, which avoids
   WAL's stale-snapshot "database is locked" on lock upgrade.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard, TypeVar, cast

from sqlalchemy import CursorResult, delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire import STATUS_VALUES, decode_line, normalize_record
from training_platform.core.database import dialect_insert, upsert_sql
from training_platform.core.gc_pause import collector_paused
from training_platform.core.metric_rows import ROW_KEYS, record_to_params, record_to_row
from training_platform.core.metrics_reader import MetricsReader, ReadBatch, ReadPosition
from training_platform.core.models import Anomaly, Job, SyncState, TrainingMetric
from training_platform.core.rollups import refresh_rollups

logger = logging.getLogger(__name__)
T = TypeVar("T")

_UPSERT_CHUNK = 5_000  # rows per executemany: bounds statement memory on both drivers
_MAX_CAS_RETRIES = 5


@dataclass
class SyncResult:
    """What one `sync_metrics_from_file` call did (the sync endpoint returns it)."""

    job_id: str
    new_metrics: int = 0
    lines_malformed: int = 0
    lines_oversized: int = 0
    resets: int = 0
    offset: int = 0
    file_size: int = 0
    at_eof: bool = True
    errors: list[str] = field(default_factory=list)


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


def _chunks(rows: list[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


_STAGE_TABLE = "tp_metrics_stage"
_SMALL_BATCH = 64


def _upsert_sql(paramstyle: str, source: str | None = None) -> str:
    """INSERT ... ON CONFLICT (job_id, step) DO UPDATE, from parameters or a staging table."""
    return upsert_sql("training_metrics", ROW_KEYS, ("job_id", "step"), paramstyle, source)


def _bulk_upsert(session: Session, params: list[list[Any]], *, appending: bool) -> None:
    """Write rows with the fastest path each database offers.

    SQLAlchemy's per-row parameter processing costs more than the database
    does here, so rows go to the DBAPI cursor directly (see benchmarks/):
    SQLite takes a plain `executemany`. PostgreSQL takes COPY: straight into
    the table when `appending` (every step is past the job's last stored one,
    so no row can conflict: the CAS that opened this transaction keeps other
    syncs of the job out until it commits), otherwise into a per-connection
    temporary table, then one INSERT ... SELECT ... ON CONFLICT. Either is
    several times faster than even pipelined executemany.
    """
    connection = session.connection()
    dialect = connection.dialect
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    columns = ", ".join(f'"{key}"' for key in ROW_KEYS)
    try:
        # Live syncs carry a few records: on PostgreSQL, COPY's staging table
        # would cost more round trips than a pipelined executemany of so few.
        if dialect.name != "postgresql" or len(params) <= _SMALL_BATCH:
            for chunk in _chunks(params, _UPSERT_CHUNK):
                cursor.executemany(_upsert_sql(dialect.paramstyle), chunk)
            return
        if appending:
            with cursor.copy(f"COPY training_metrics ({columns}) FROM STDIN") as copy:
                for row in params:
                    copy.write_row(row)
            return
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE_TABLE} "
            "(LIKE training_metrics INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        with cursor.copy(f"COPY {_STAGE_TABLE} ({columns}) FROM STDIN") as copy:
            for row in params:
                copy.write_row(row)
        cursor.execute(_upsert_sql(dialect.paramstyle, _STAGE_TABLE))
        cursor.execute(f"TRUNCATE {_STAGE_TABLE}")
    finally:
        cursor.close()


def upsert_metrics(
    session: Session, *, job_id: str, records: list[dict[str, Any]], received_at: float
) -> int:
    """Insert or replace one row per step (the last record for a step wins).

    Also refreshes the callback-reported anomalies of the steps written. Only
    adds/flushes: the caller owns the transaction. Returns the rows written.
    """
    if not records:
        return 0
    latest: dict[int, dict[str, Any]] = {}
    for record in records:  # later lines win within a batch too
        latest[record["step"]] = record
    params = [record_to_params(job_id, record, received_at) for record in latest.values()]

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

    _bulk_upsert(session, params, appending=appending)
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
    return len(params)


def upsert_anomalies(session: Session, rows: list[dict[str, Any]]) -> None:
    """Insert anomalies; one per (job, step, type, source), the newest message wins."""
    insert = dialect_insert(session)
    stmt = insert(Anomaly.__table__)
    stmt = stmt.on_conflict_do_update(
        index_elements=["job_id", "step", "type", "source"],
        set_={"severity": stmt.excluded.severity, "message": stmt.excluded.message},
    )
    unique = {(r["job_id"], r["step"], r["type"], r["source"]): r for r in rows}
    for chunk in _chunks(list(unique.values()), _UPSERT_CHUNK):
        session.execute(stmt, chunk)


def ensure_sync_state(session: Session, job_id: str) -> None:
    """Create the job's sync_state row if missing (it is what the CAS updates)."""
    insert = dialect_insert(session)
    session.execute(
        insert(SyncState.__table__)
        .values(
            job_id=job_id,
            offset=0,
            discarding=False,
            lines_malformed=0,
            lines_oversized=0,
            records_ingested=0,
            resets=0,
        )
        .on_conflict_do_nothing(index_elements=["job_id"])
    )


def _load_position(factory: sessionmaker[Session], job_id: str) -> ReadPosition:
    with factory() as session:
        state = session.get(SyncState, job_id)
        if state is None:
            ensure_sync_state(session, job_id)
            session.commit()
            return ReadPosition()
        return ReadPosition(state.offset, state.fingerprint, state.discarding)


def sync_metrics_from_file(
    factory: sessionmaker[Session],
    job_id: str,
    reader: MetricsReader,
    *,
    max_batches: int | None = None,
    on_commit: Callable[[list[dict[str, Any]]], None] | None = None,
    position: ReadPosition | None = None,
) -> SyncResult:
    """Ingest every complete new line of the job's metrics file.

    Loops batch by batch (each bounded by the reader's `max_bytes`, each its own
    transaction) until the reader reports end of file or `max_batches` is hit.
    `on_commit`, if given, receives each batch's records (one per step, the
    newest, in file order) right after their transaction commits: only stored
    records are ever announced. Raises `MetricsSourceError` when the file
    cannot be read.

    `position`, if given, is the job's committed position as just read from
    `sync_state` by the caller (saves a round trip); the CAS still checks it.
    After a commit the next batch starts from the position just committed;
    only a lost CAS reads the position again.
    """
    result = SyncResult(job_id=job_id)
    batches = 0
    retries = 0
    while True:
        if position is None:
            position = _load_position(factory, job_id)
        with collector_paused():  # a batch is many small objects and no cycles
            batch = reader.read_metrics_incremental(position)
            written = _commit_batch(factory, job_id, position, batch)
            if written is not None and on_commit is not None and batch.records:
                latest = {record["step"]: record for record in batch.records}
                on_commit(sorted(latest.values(), key=_file_order(batch.records)))
        if written is None:
            # Another sync moved the offset since we read it: drop our batch
            # and read again from where the winner left off.
            position = None
            retries += 1
            if retries > _MAX_CAS_RETRIES:
                logger.warning("sync of %s kept losing the race; stopping this round", job_id)
                break
            continue
        position = batch.position  # what this transaction committed
        result.new_metrics += written
        result.lines_malformed += batch.malformed
        result.lines_oversized += batch.oversized
        result.resets += int(batch.reset)
        result.offset = batch.position.offset
        result.file_size = batch.file_size
        result.at_eof = batch.at_eof
        result.errors.extend(batch.errors[: max(0, 20 - len(result.errors))])
        batches += 1
        if batch.at_eof or (max_batches is not None and batches >= max_batches):
            break
    return result


def _commit_batch(
    factory: sessionmaker[Session], job_id: str, position: ReadPosition, batch: ReadBatch
) -> int | None:
    """Commit `batch`, read from `position`, in one transaction: the rows written.

    None when the compare-and-swap lost (the offset is no longer `position`):
    then nothing was written.
    """
    now = time.time()
    session = factory()
    try:
        # The CAS: must stay the first statement of the transaction (see module doc).
        advanced = cast(
            CursorResult[Any],
            session.execute(
                update(SyncState)
                .where(
                    SyncState.job_id == job_id,
                    SyncState.offset == position.offset,
                    SyncState.fingerprint.is_(None)
                    if position.fingerprint is None
                    else SyncState.fingerprint == position.fingerprint,
                    SyncState.discarding == position.discarding,
                )
                .values(
                    offset=batch.position.offset,
                    fingerprint=batch.position.fingerprint,
                    discarding=batch.position.discarding,
                    lines_malformed=SyncState.lines_malformed + batch.malformed,
                    lines_oversized=SyncState.lines_oversized + batch.oversized,
                    records_ingested=SyncState.records_ingested + len(batch.records),
                    resets=SyncState.resets + int(batch.reset),
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            ),
        )
        if advanced.rowcount != 1:
            session.rollback()
            return None
        written = upsert_metrics(session, job_id=job_id, records=batch.records, received_at=now)
        session.execute(
            update(Job)
            .where(Job.job_id == job_id)
            .values(last_synced_at=now, last_sync_error=None)
            .execution_options(synchronize_session=False)
        )
        session.commit()
        return written
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def _file_order(records: list[dict[str, Any]]) -> Callable[[dict[str, Any]], int]:
    """Sort key: where each step's newest record stands in the batch."""
    last_index = {record["step"]: index for index, record in enumerate(records)}
    return lambda record: last_index[record["step"]]


def _finite_number(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def sync_anomaly_from_status_file(session: Session, job: Job, reader: MetricsReader) -> bool:
    """Copy status, steps and the anomaly flag from `{job_id}_status.json` onto the job.

    Returns True when anything changed. A missing or unreadable status file
    changes nothing (the reader logs why).
    """
    status = reader.read_status()
    if not status:
        return False
    changes: dict[str, Any] = {}
    value = status.get("status")
    if isinstance(value, str) and value in STATUS_VALUES:
        changes["status"] = value
    for key in ("current_step", "total_steps"):
        number = status.get(key)
        if isinstance(number, int) and not isinstance(number, bool) and number >= 0:
            changes[key] = number
    if isinstance(status.get("anomaly_detected"), bool):
        changes["anomaly_detected"] = status["anomaly_detected"]
    reason = status.get("anomaly_reason")
    if reason is None or isinstance(reason, str):
        changes["anomaly_reason"] = reason
    for key in ("started_at", "updated_at"):
        number = status.get(key)
        if _finite_number(number):
            changes[key] = float(number)
    changed = False
    for key, value in changes.items():
        if getattr(job, key) != value:
            setattr(job, key, value)
            changed = True
    return changed
