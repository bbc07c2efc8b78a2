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
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import CursorResult, case, delete, func, select, update
from sqlalchemy.orm import Session, sessionmaker

from training_platform.callbacks.wire import decode_line, normalize_record
from training_platform.core.bulk_write import UPSERT_CHUNK, bulk_upsert, chunks
from training_platform.core.database import dialect_insert
from training_platform.core.gc_pause import collector_paused
from training_platform.core.line_isolation import (
    describe,
    find_unstorable,
    is_data_error,
    probe_error,
)
from training_platform.core.metric_rows import record_to_params, record_to_row
from training_platform.core.metrics_reader import MetricsReader, ReadBatch, ReadPosition
from training_platform.core.models import Anomaly, Job, SyncState, TrainingMetric
from training_platform.core.rollups import refresh_rollups
from training_platform.core.status_file import sync_anomaly_from_status_file

logger = logging.getLogger(__name__)

__all__ = [  # the status file is read in its own module; docs/contract.md names it here
    "SyncResult",
    "parse_platform_metric",
    "sync_anomaly_from_status_file",
    "sync_metrics_from_file",
    "upsert_anomalies",
    "upsert_metrics",
]
_MAX_CAS_RETRIES = 5
_MAX_ERRORS = 20  # SyncResult.errors: the first few say enough


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


def upsert_metrics(
    session: Session,
    *,
    job_id: str,
    records: list[dict[str, Any]],
    received_at: float,
    notes: list[str] | None = None,
) -> int:
    """Insert or replace one row per step (the last record for a step wins).

    Also refreshes the callback-reported anomalies of the steps written. Only
    adds/flushes: the caller owns the transaction. Returns the rows written.
    Values no database could store are replaced (see `core/storable.py`), in
    the records too; `notes` gets "step N: what changed" for each.
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
    return len(params)


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
        set_={"severity": stmt.excluded.severity, "message": stmt.excluded.message},
    )
    unique = {(r["job_id"], r["step"], r["type"], r["source"]): r for r in rows}
    for chunk in chunks(list(unique.values()), UPSERT_CHUNK):
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
            committed = _commit_batch(factory, job_id, position, batch)
            if committed is not None and on_commit is not None and committed.records:
                stored = committed.records
                latest = {record["step"]: record for record in stored}
                on_commit(sorted(latest.values(), key=_file_order(stored)))
        if committed is None:
            # Another sync moved the offset since we read it: drop our batch
            # and read again from where the winner left off.
            position = None
            retries += 1
            if retries > _MAX_CAS_RETRIES:
                logger.warning("sync of %s kept losing the race; stopping this round", job_id)
                break
            continue
        position = batch.position  # what this transaction committed
        result.new_metrics += committed.written
        result.lines_malformed += batch.malformed + len(committed.refused)
        result.lines_oversized += batch.oversized
        result.resets += int(batch.reset)
        result.offset = batch.position.offset
        result.file_size = batch.file_size
        result.at_eof = batch.at_eof
        problems = [*committed.refused, *batch.errors, *committed.notes]
        result.errors.extend(problems[: max(0, _MAX_ERRORS - len(result.errors))])
        batches += 1
        if batch.at_eof or (max_batches is not None and batches >= max_batches):
            break
    return result


@dataclass
class _Committed:
    """What one committed batch stored: announced to `on_commit`, added to the SyncResult."""

    written: int
    records: list[dict[str, Any]]  # the batch's records less the refused ones
    refused: list[str]  # "step N: not stored (why), skipped": counted as malformed
    notes: list[str]  # "step N: <value> replaced (why)": stored, but not as written


def _commit_batch(
    factory: sessionmaker[Session], job_id: str, position: ReadPosition, batch: ReadBatch
) -> _Committed | None:
    """Commit `batch`, read from `position`, in one transaction.

    None when the compare-and-swap lost (the offset is no longer `position`):
    then nothing was written. A record the database refuses (a data error that
    `core/storable.py` did not foresee) is isolated and skipped, never allowed
    to hold back the lines after it: see `core/line_isolation.py`.
    """
    try:
        return _commit(factory, job_id, position, batch, batch.records, [])
    except Exception as error:
        if not is_data_error(error):
            raise
        logger.warning("batch of %s refused (%s): isolating the record", job_id, describe(error))
    now = time.time()
    records = batch.records

    def fails(subset: Sequence[dict[str, Any]]) -> BaseException | None:
        return _trial(factory, job_id, list(subset), now)

    bad = find_unstorable(records, fails)
    refused = [
        f"step {records[index].get('step')}: not stored ({describe(error)}), skipped"
        for index, error in sorted(bad.items())
    ]
    kept = [record for index, record in enumerate(records) if index not in bad]
    # Nothing singled out (the batch passed as a trial): a plain retry, whose
    # error, if any, is then not about one record and must fail the sync.
    return _commit(factory, job_id, position, batch, kept, refused)


def _trial(
    factory: sessionmaker[Session], job_id: str, records: list[dict[str, Any]], now: float
) -> BaseException | None:
    """The data error writing `records` raises, or None; always rolled back."""
    session = factory()
    try:
        return probe_error(
            lambda: upsert_metrics(session, job_id=job_id, records=records, received_at=now)
        )
    finally:
        session.rollback()
        session.close()


def _commit(
    factory: sessionmaker[Session],
    job_id: str,
    position: ReadPosition,
    batch: ReadBatch,
    records: list[dict[str, Any]],
    refused: list[str],
) -> _Committed | None:
    now = time.time()
    notes: list[str] = []
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
                    lines_malformed=SyncState.lines_malformed + batch.malformed + len(refused),
                    lines_oversized=SyncState.lines_oversized + batch.oversized,
                    records_ingested=SyncState.records_ingested + len(records),
                    resets=SyncState.resets + int(batch.reset),
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            ),
        )
        if advanced.rowcount != 1:
            session.rollback()
            return None
        written = upsert_metrics(
            session, job_id=job_id, records=records, received_at=now, notes=notes
        )
        session.execute(
            update(Job)
            .where(Job.job_id == job_id)
            .values(
                last_synced_at=now,
                last_sync_error=_sync_error_after([*refused, *batch.errors, *notes]),
            )
            .execution_options(synchronize_session=False)
        )
        session.commit()
        return _Committed(written, records, refused, notes)
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# `jobs.last_sync_error` after a batch with data problems: kept until the next
# one (they are events, not conditions that later batches resolve), whereas a
# source error (SSH down, file unreadable) is cleared by the next good batch.
DATA_PROBLEMS_PREFIX = "lines skipped or changed: "


def _sync_error_after(problems: list[str]) -> Any:
    if problems:
        return (DATA_PROBLEMS_PREFIX + "; ".join(problems))[:2000]
    return case(
        (Job.last_sync_error.startswith(DATA_PROBLEMS_PREFIX), Job.last_sync_error), else_=None
    )


def _file_order(records: list[dict[str, Any]]) -> Callable[[dict[str, Any]], int]:
    """Sort key: where each step's newest record stands in the batch."""
    last_index = {record["step"]: index for index, record in enumerate(records)}
    return lambda record: last_index[record["step"]]
