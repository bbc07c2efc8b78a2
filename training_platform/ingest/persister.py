"""Read -> parse -> upsert -> advance the offset, exactly once, for any kind of line file.

The kinds (`ingest/file_kinds.py`: the metrics file, and more to come) differ
only in how a line becomes rows; the exactly-once argument is the same for
all, in three rules:

1. Rows are upserted by primary key (for metrics (job_id, step)): replaying a
   line can only rewrite the same row with the same (or a newer) record,
   never add one.
2. The byte offset is committed in the same transaction as the rows read up to
   it (`sync_state`, one row per job and kind), so a crash at any point leaves
   either both or neither.
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
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from sqlalchemy import CursorResult, case, update
from sqlalchemy.orm import Session, sessionmaker

from training_platform.errors import LeaseLostError
from training_platform.ingest.file_kinds import LineFileKind, StoredRows
from training_platform.ingest.gc_pause import collector_paused
from training_platform.ingest.line_isolation import (
    describe,
    find_unstorable,
    is_data_error,
    probe_error,
)
from training_platform.ingest.readers import MetricsReader, ReadBatch, ReadPosition
from training_platform.ingest.run_file import store_run_about
from training_platform.ingest.system_lines import system_message_data
from training_platform.store.database import dialect_insert
from training_platform.store.leases import current_fence, fence_clause, fence_is_current
from training_platform.store.live_outbox import ANNOUNCED_KINDS, append_outbox, is_shared
from training_platform.store.metric_rows import record_nonfinite_as_strings
from training_platform.store.models import Job, SyncState

logger = logging.getLogger(__name__)

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

    def add(self, later: SyncResult) -> None:
        """Fold in what a later sync of the same job did: counts add up, the
        position is the later one's, the first `_MAX_ERRORS` problems are kept."""
        self.new_metrics += later.new_metrics
        self.lines_malformed += later.lines_malformed
        self.lines_oversized += later.lines_oversized
        self.resets += later.resets
        self.offset, self.file_size, self.at_eof = later.offset, later.file_size, later.at_eof
        self.errors.extend(later.errors[: max(0, _MAX_ERRORS - len(self.errors))])


@dataclass(frozen=True)
class CommittedBatch:
    """What one committed transaction stored, as handed to `on_commit`.

    `records`: one per key (for metrics: per step), the newest, in file order.
    `anomalies`: exactly the anomaly rows written with them (as stored: the
    live stream publishes these, never a rebuilt copy).
    """

    kind: str  # the `LineFileKind.family` of the file they came from
    records: list[dict[str, Any]]
    anomalies: list[dict[str, Any]]
    seq: int | None = None
    """Its live announcement's number (`store/live_outbox.py`), given in its own
    transaction on a database other processes may share; None elsewhere."""


def ensure_sync_state(session: Session, job_id: str, kind: str = "metrics") -> None:
    """Create the job's sync_state row of `kind` if missing (it is what the CAS updates)."""
    insert = dialect_insert(session)
    session.execute(
        insert(SyncState.__table__)
        .values(
            job_id=job_id,
            kind=kind,
            offset=0,
            discarding=False,
            lines_malformed=0,
            lines_oversized=0,
            records_ingested=0,
            resets=0,
        )
        .on_conflict_do_nothing(index_elements=["job_id", "kind"])
    )


def _load_position(factory: sessionmaker[Session], job_id: str, kind: str) -> ReadPosition:
    with factory() as session:
        state = session.get(SyncState, (job_id, kind))
        if state is None:
            ensure_sync_state(session, job_id, kind)
            session.commit()
            return ReadPosition()
        return ReadPosition(state.offset, state.fingerprint, state.discarding)


def sync_file(
    factory: sessionmaker[Session],
    job_id: str,
    reader: MetricsReader,
    kind: LineFileKind,
    *,
    max_batches: int | None = None,
    on_commit: Callable[[CommittedBatch], None] | None = None,
    position: ReadPosition | None = None,
) -> SyncResult:
    """Ingest every complete new line of the job's `kind` file.

    Loops batch by batch (each bounded by the reader's `max_bytes`, each its own
    transaction) until the reader reports end of file or `max_batches` is hit.
    `on_commit`, if given, receives each batch's `CommittedBatch` right after
    its transaction commits: only stored records and anomalies are ever
    announced. Raises `MetricsSourceError` when the file
    cannot be read.

    `position`, if given, is the file's committed position as just read from
    `sync_state` by the caller (saves a round trip); the CAS still checks it.
    After a commit the next batch starts from the position just committed;
    only a lost CAS reads the position again.
    """
    result = SyncResult(job_id=job_id)
    batches = 0
    retries = 0
    while True:
        if position is None:
            position = _load_position(factory, job_id, kind.name)
        with collector_paused():  # a batch is many small objects and no cycles
            batch = reader.read_incremental(kind, position)
            committed = _commit_batch(factory, job_id, kind, position, batch)
            if committed is not None and on_commit is not None and committed.records:
                records = newest_in_file_order(committed.records, kind)
                on_commit(CommittedBatch(kind.family, records, committed.anomalies, committed.seq))
        if committed is None:
            _check_lease(factory, job_id)
            # Another sync moved the offset since we read it: drop our batch
            # and read again from where the winner left off.
            position = None
            retries += 1
            if retries > _MAX_CAS_RETRIES:
                logger.warning("sync of %s kept losing the race; stopping this round", job_id)
                break
            continue
        position = batch.position  # what this transaction committed
        result.add(
            SyncResult(
                job_id=job_id,
                new_metrics=committed.written,
                lines_malformed=batch.malformed + len(committed.refused),
                lines_oversized=batch.oversized,
                resets=int(batch.reset),
                offset=batch.position.offset,
                file_size=batch.file_size,
                at_eof=batch.at_eof,
                errors=[*committed.refused, *batch.errors, *committed.notes],
            )
        )
        batches += 1
        if batch.at_eof or (max_batches is not None and batches >= max_batches):
            break
    return result


def _check_lease(factory: sessionmaker[Session], job_id: str) -> None:
    """After a lost compare-and-swap of a fenced sync: raise `LeaseLostError` when it
    was the lease, not a racing sync, that failed it (retrying cannot help then)."""
    fence = current_fence()
    if fence is None:
        return
    with factory() as session:
        if not fence_is_current(session, job_id, fence):
            raise LeaseLostError(f"{fence.holder} no longer holds the lease of {job_id!r}")


@dataclass
class _Committed:
    """What one committed batch stored: announced to `on_commit`, added to the SyncResult."""

    written: int
    records: list[dict[str, Any]]  # the batch's records less the refused ones
    anomalies: list[dict[str, Any]]  # the callback anomaly rows written with them
    refused: list[str]  # "step N: not stored (why), skipped": counted as malformed
    notes: list[str]  # "step N: <value> replaced (why)": stored, but not as written
    seq: int | None = None  # its live announcement's number (shared databases)


def _commit_batch(
    factory: sessionmaker[Session],
    job_id: str,
    kind: LineFileKind,
    position: ReadPosition,
    batch: ReadBatch,
) -> _Committed | None:
    """Commit `batch`, read from `position`, in one transaction.

    None when the compare-and-swap lost (the offset is no longer `position`):
    then nothing was written. A record the database refuses (a data error that
    `store/storable.py` did not foresee) is isolated and skipped, never allowed
    to hold back the lines after it: see `ingest/line_isolation.py`.
    """
    try:
        return _commit(factory, job_id, kind, position, batch, batch.records, [])
    except Exception as error:
        if not is_data_error(error):
            raise
        logger.warning("batch of %s refused (%s): isolating the record", job_id, describe(error))
    now = time.time()
    records = batch.records

    def fails(subset: Sequence[dict[str, Any]]) -> BaseException | None:
        return _trial(factory, job_id, kind, list(subset), now)

    bad = find_unstorable(records, fails)
    refused = [
        f"step {records[index].get('step')}: not stored ({describe(error)}), skipped"
        for index, error in sorted(bad.items())
    ]
    kept = [record for index, record in enumerate(records) if index not in bad]
    # Nothing singled out (the batch passed as a trial): a plain retry, whose
    # error, if any, is then not about one record and must fail the sync.
    return _commit(factory, job_id, kind, position, batch, kept, refused)


def _trial(
    factory: sessionmaker[Session],
    job_id: str,
    kind: LineFileKind,
    records: list[dict[str, Any]],
    now: float,
) -> BaseException | None:
    """The data error writing `records` raises, or None; always rolled back."""
    if not records:
        return None
    session = factory()
    try:
        return probe_error(lambda: kind.store(session, job_id, records, now, []))
    finally:
        session.rollback()
        session.close()


def _commit(
    factory: sessionmaker[Session],
    job_id: str,
    kind: LineFileKind,
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
                    SyncState.kind == kind.name,
                    SyncState.offset == position.offset,
                    SyncState.fingerprint.is_(None)
                    if position.fingerprint is None
                    else SyncState.fingerprint == position.fingerprint,
                    SyncState.discarding == position.discarding,
                    fence_clause(session, job_id),  # and this process still holds the lease
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
        # A batch may hold no records (only skipped lines): its offset still commits.
        read = len(records)
        stored = kind.store(session, job_id, records, now, notes) if records else StoredRows(0)
        if len(records) < read:
            # Another tool's kind took out steps read again unchanged (its source
            # re-read: `merged_steps.py`): ingested before, not counted again.
            session.execute(
                update(SyncState)
                .where(SyncState.job_id == job_id, SyncState.kind == kind.name)
                .values(records_ingested=SyncState.records_ingested - (read - len(records)))
                .execution_options(synchronize_session=False)
            )
        if batch.about is not None:  # another tool's hparams, params, run name...
            store_run_about(session, job_id, **batch.about)
        seq = None
        if records and kind.family in ANNOUNCED_KINDS and is_shared(session):
            # Numbered here, in the transaction that stores them: every server
            # process on the database delivers it (store/live_outbox.py).
            announced = newest_in_file_order(records, kind)
            payload = outbox_payload(kind.family, announced, stored.anomalies)
            seq = append_outbox(session, job_id, kind.family, payload)
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
        return _Committed(stored.written, records, stored.anomalies, refused, notes, seq)
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


def newest_in_file_order(records: list[dict[str, Any]], kind: LineFileKind) -> list[dict[str, Any]]:
    """One record per key (for metrics: per step), the newest, in file order."""
    latest = {kind.key(record): record for record in records}
    return sorted(latest.values(), key=_file_order(records, kind.key))


def outbox_payload(
    kind: str, records: list[dict[str, Any]], anomalies: list[dict[str, Any]]
) -> dict[str, Any]:
    """What a committed batch's live announcement holds: for metrics, its records
    (non-finite numbers as strings, as the API sends them) and the anomaly rows
    stored with them; for system samples, the samples; for samples, how many of
    its rows each step got."""
    if kind == "metrics":
        return {
            "records": [record_nonfinite_as_strings(record) for record in records],
            "anomalies": anomalies,
        }
    if kind == "system":
        return {"samples": [system_message_data(record) for record in records]}
    return {"steps": sorted(Counter(record["step"] for record in records).items())}


def _file_order(
    records: list[dict[str, Any]], key: Callable[[dict[str, Any]], Hashable]
) -> Callable[[dict[str, Any]], int]:
    """Sort key: where each key's newest record stands in the batch."""
    last_index = {key(record): index for index, record in enumerate(records)}
    return lambda record: last_index[key(record)]
