"""Keeps every job's rows in step with its files: discovery, sync, status.

One `SyncService` per server process. It caches one reader per job (an SSH
reader holds a connection worth reusing) and serialises syncs of the same job
inside the process with a lock; across processes the persister's
compare-and-swap on the offset keeps ingestion exactly-once anyway.

A `SyncListener` (the live pipeline) hears about every committed batch and
status change, whoever triggered the sync (background or `POST .../sync`),
always under the job's lock: so for one job its calls never overlap and come
in commit order.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from sqlalchemy.orm.exc import StaleDataError

from training_platform.callbacks.wire import validate_job_id
from training_platform.core.jobs import discover_jobs, make_reader
from training_platform.core.line_scanner import ReadPosition
from training_platform.core.metrics_persister import (
    SyncResult,
    sync_anomaly_from_status_file,
    sync_metrics_from_file,
)
from training_platform.core.metrics_reader import MetricsReader
from training_platform.core.models import Job, SyncState
from training_platform.core.quiet_rounds import (
    FailureLog,
    FileSignature,
    file_signature,
    status_inode,
)
from training_platform.errors import JobNotFoundError, MetricsSourceError
from training_platform.settings import Settings

logger = logging.getLogger(__name__)

TERMINAL_STATUSES = frozenset({"completed", "failed", "stopped"})


@dataclass
class JobSyncOutcome:
    result: SyncResult
    status_changed: bool


class SyncListener(Protocol):
    """Hooks called by `SyncService.sync_job` while it holds the job's lock."""

    def records_committed(self, job_id: str, records: list[dict[str, Any]]) -> None:
        """A batch was committed: one record per step, the newest, in file order."""

    def review_status(self, session: Session, job: Job) -> None:
        """The status file was copied onto `job`; adjust it (e.g. stalled) before commit."""

    def status_changed(self, job: Job) -> None:
        """The job's status fields changed and were committed."""


# What `sync_anomaly_from_status_file` copies from the status file onto the job.
STATUS_FIELDS = (
    "status",
    "current_step",
    "total_steps",
    "anomaly_detected",
    "anomaly_reason",
    "started_at",
    "updated_at",
)


def _status_fields(job: Job) -> tuple[Any, ...]:
    return tuple(getattr(job, name) for name in STATUS_FIELDS)


class SyncService:
    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        *,
        listener: SyncListener | None = None,
    ) -> None:
        self._factory = factory
        self._settings = settings
        self.listener = listener
        self._readers: dict[str, MetricsReader] = {}
        self._locks: dict[str, threading.Lock] = {}
        # job id -> (offset, file size) after the last batch committed by this process.
        self._progress: dict[str, tuple[int, int]] = {}
        # Jobs whose syncs in flight should stop at their next batch (see `exclusive`).
        self._interrupted: set[str] = set()
        # job id -> its local files as they were when this process last read
        # them to the end, and the status the job had then (see `is_unchanged`).
        self._seen: dict[str, FileSignature] = {}
        self._statuses: dict[str, str] = {}
        self._failures = FailureLog(logger)  # each job's error, logged once per change
        self._guard = threading.Lock()

    def _lock(self, job_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

    def job_lock(self, job_id: str) -> threading.Lock:
        """The lock every sync of `job_id` holds: whoever holds it sees no sync
        half-done, and every committed batch already announced to the listener."""
        return self._lock(job_id)

    def _reader(self, job: Job) -> MetricsReader:
        with self._guard:
            reader = self._readers.get(job.job_id)
            if reader is None:
                reader = self._readers[job.job_id] = make_reader(job, self._settings)
            return reader

    def forget_reader(self, job_id: str) -> None:
        with self._guard:
            reader = self._readers.pop(job_id, None)
        if reader is not None:
            reader.close()

    @contextlib.contextmanager
    def exclusive(self, job_id: str) -> Iterator[None]:
        """Hold the job's lock, asking a sync in flight to stop at its next batch.

        For deleting a job: a catch-up of a long backlog would otherwise keep
        the lock (and the DELETE request) for as long as it takes.
        """
        with self._guard:
            self._interrupted.add(job_id)
        try:
            with self._lock(job_id):
                yield
        finally:
            with self._guard:
                self._interrupted.discard(job_id)

    def forget_job(self, job_id: str) -> None:
        """The job was deleted: close its reader (call under the job's lock)."""
        self.forget_reader(job_id)
        self._progress.pop(job_id, None)
        with self._guard:
            self._seen.pop(job_id, None)
            self._statuses.pop(job_id, None)
        self._failures.forget(job_id)

    def is_unchanged(self, job_id: str, signature: FileSignature) -> bool:
        """Whether this process already read the job's files as they are now.

        A background round skips such a job without a database statement.
        """
        with self._guard:
            return self._seen.get(job_id) == signature

    def known_status(self, job_id: str) -> str | None:
        """The job's status after this process's last sync of it (None: none yet)."""
        with self._guard:
            return self._statuses.get(job_id)

    def discover(self) -> list[str]:
        """Register jobs whose files appeared in the metrics directory."""
        with self._factory.begin() as session:
            return discover_jobs(session, self._settings.metrics_dir)

    def sync_job(self, job_id: str, *, budget: float | None = None) -> JobSyncOutcome:
        """Ingest new lines and the status file of one job.

        With `budget` (seconds) it stops starting new batches once the budget
        is spent, even short of the end of the file (`result.at_eof` False):
        the caller answers promptly and leaves the rest to another sync. Each
        batch is still its own exactly-once transaction. Raises
        `JobNotFoundError`, or `MetricsSourceError` when the files cannot be
        read (the reason is also stored on the job).
        """
        lock = self._lock(job_id)
        deadline = None if budget is None else time.monotonic() + budget
        # A budgeted caller does not queue behind a long sync of the same job
        # (a background catch-up holds the lock for as long as it runs): it
        # answers with that sync's progress instead.
        if not lock.acquire(timeout=-1 if budget is None else budget):
            return JobSyncOutcome(self._progress_of(job_id), status_changed=False)
        try:
            return self._sync_job_locked(job_id, deadline)
        finally:
            lock.release()

    def _sync_job_locked(self, job_id: str, deadline: float | None) -> JobSyncOutcome:
        """`sync_job` once the job's lock is held."""
        try:
            job, position = self._load(job_id)
        except JobNotFoundError:
            # Its file may have appeared since the last discovery round;
            # looked up again (not "was it added by this call?") because
            # a concurrent discovery may have added it first.
            self.discover()
            job, position = self._load(job_id)
        reader = self._reader(job)
        # Looked at before reading: an append during the sync makes the files
        # differ from this, so the next round reads them again.
        signature = None
        if job.source == "local" and job.metrics_dir:
            signature = file_signature(
                job.metrics_dir, job_id, status_inode(job.metrics_dir, job_id)
            )
        try:
            result = self._sync_metrics(job_id, reader, position, deadline=deadline)
            if not result.at_eof:
                # Lines are still waiting: a final status read now would be
                # announced before them (a run "finished" ahead of its last
                # steps). The sync that reaches the end reads it.
                return JobSyncOutcome(result, status_changed=False)
            job, status_changed = self._sync_status(job, reader)
            if status_changed and job.status in TERMINAL_STATUSES:
                # A trainer writes its last lines before its final status; a
                # line appended between our two reads would otherwise be
                # announced after the run's end. One more read catches it.
                _add(result, self._sync_metrics(job_id, reader))
        except MetricsSourceError as exc:
            self._record_error(job_id, str(exc))
            raise
        with self._guard:
            self._statuses[job_id] = job.status
            if signature is not None:
                self._seen[job_id] = signature
        if status_changed and self.listener is not None:
            self._tell(self.listener.status_changed, job)
        return JobSyncOutcome(result, status_changed)

    def _load(self, job_id: str) -> tuple[Job, ReadPosition | None]:
        """The job and its committed read position, in one statement.

        Read in autocommit (no BEGIN/ROLLBACK round trips): the position is only
        a starting point, the persister's compare-and-swap checks it. None when
        the job has no sync_state row yet (the persister creates it).
        """
        with self._factory() as session:
            session.connection(execution_options={"isolation_level": "AUTOCOMMIT"})
            row = session.execute(
                select(Job, SyncState.offset, SyncState.fingerprint, SyncState.discarding)
                .outerjoin(SyncState, SyncState.job_id == Job.job_id)
                .where(Job.job_id == validate_job_id(job_id))
            ).first()
        if row is None:
            raise JobNotFoundError(f"job {job_id!r} not found")
        job, offset, fingerprint, discarding = row
        if offset is None:
            return job, None
        return job, ReadPosition(offset, fingerprint, discarding)

    def _sync_metrics(
        self,
        job_id: str,
        reader: MetricsReader,
        position: ReadPosition | None = None,
        *,
        deadline: float | None = None,
    ) -> SyncResult:
        """New lines up to the end of the file, or until `deadline` (time.monotonic()).

        One batch (one transaction) at a time, so the clock is looked at and
        the progress noted between commits; at least one batch always runs, so
        every call makes progress.
        """
        result = self._sync_batches(job_id, reader, position)
        self._progress[job_id] = (result.offset, result.file_size)
        while not result.at_eof and (deadline is None or time.monotonic() < deadline):
            if job_id in self._interrupted:
                break
            _add(result, self._sync_batches(job_id, reader))
            self._progress[job_id] = (result.offset, result.file_size)
        return result

    def _progress_of(self, job_id: str) -> SyncResult:
        """What a sync in flight has reached: offset and file size at its last commit."""
        progress = self._progress.get(job_id)
        if progress is None:  # it has not committed a batch yet: the stored offset
            with self._factory() as session:
                state = session.get(SyncState, job_id)
                offset = state.offset if state is not None else 0
            progress = (offset, offset)
        offset, file_size = progress
        return SyncResult(job_id=job_id, offset=offset, file_size=file_size, at_eof=False)

    def _sync_batches(
        self, job_id: str, reader: MetricsReader, position: ReadPosition | None = None
    ) -> SyncResult:
        """One committed batch (the persister retries a lost compare-and-swap itself)."""
        listener = self.listener
        if listener is None:
            return sync_metrics_from_file(
                self._factory, job_id, reader, position=position, max_batches=1
            )
        return sync_metrics_from_file(
            self._factory,
            job_id,
            reader,
            on_commit=lambda records: self._tell(listener.records_committed, job_id, records),
            position=position,
            max_batches=1,
        )

    def _sync_status(self, job: Job, reader: MetricsReader) -> tuple[Job, bool]:
        """Copy the status file onto `job` (as read by `_load`, detached).

        Costs no database round trip when nothing changed: the job is attached
        without a SELECT and only a change is flushed (UPDATE of the changed
        columns, as before).
        """
        with self._factory() as session:
            job = session.merge(job, load=False)
            before = _status_fields(job)
            sync_anomaly_from_status_file(session, job, reader)
            if self.listener is not None:
                self._tell(self.listener.review_status, session, job)
            # Compared as a whole, not as "did the file change anything": the
            # listener may put back what the file undid (a stalled run whose
            # file still says running).
            changed = _status_fields(job) != before
            try:
                session.commit()
            except StaleDataError as exc:  # the job was deleted meanwhile
                raise JobNotFoundError(f"job {job.job_id!r} not found") from exc
            return job, changed

    @staticmethod
    def _tell(hook: Any, *args: Any) -> None:
        # The rows are committed whatever a listener does: its failure is
        # logged, never allowed to fail (and so repeat) the sync.
        try:
            hook(*args)
        except Exception:
            logger.exception("sync listener %s failed", getattr(hook, "__name__", hook))

    def _record_error(self, job_id: str, message: str) -> None:
        with self._factory.begin() as session:
            job = session.get(Job, job_id)
            if job is not None:
                job.last_sync_error = message[:2000]
                job.last_synced_at = time.time()

    def poll_once(self) -> dict[str, JobSyncOutcome]:
        """One background round: discover, then sync every job still worth polling.

        Never raises for one job's trouble: it is logged and stored on the job.
        """
        try:
            self.discover()
        except Exception:
            logger.exception("job discovery in %s failed", self._settings.metrics_dir)
        with self._factory() as session:
            jobs = list(session.execute(select(Job.job_id, Job.source, Job.status)))
        outcomes: dict[str, JobSyncOutcome] = {}
        for job_id, source, status in jobs:
            # A finished SSH run costs a round trip per poll for nothing; local
            # files are cheap to stat and may be rewritten by a restarted run.
            if source == "ssh" and status in TERMINAL_STATUSES:
                continue
            outcome = self.sync_in_background(job_id)
            if outcome is not None:
                outcomes[job_id] = outcome
        return outcomes

    def sync_in_background(self, job_id: str) -> JobSyncOutcome | None:
        """`sync_job` for a background round: never raises, logs a failure once.

        A job whose files cannot be read fails the same way every round: its
        error is logged when it first appears and when it changes (with the
        traceback for an unexpected one), and once when syncs work again.
        """
        try:
            outcome = self.sync_job(job_id)
        except JobNotFoundError as exc:  # deleted meanwhile: nothing to report
            logger.debug("background sync of %s skipped: %s", job_id, exc)
            return None
        except Exception as exc:
            self._failures.failed(job_id, exc)
            return None
        self._failures.succeeded(job_id)
        return outcome

    def close(self) -> None:
        with self._guard:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            try:
                reader.close()
            except Exception:
                logger.exception("closing a reader failed")


def _add(total: SyncResult, more: SyncResult) -> None:
    total.new_metrics += more.new_metrics
    total.lines_malformed += more.lines_malformed
    total.lines_oversized += more.lines_oversized
    total.resets += more.resets
    total.offset, total.file_size, total.at_eof = more.offset, more.file_size, more.at_eof
    total.errors.extend(more.errors[: max(0, 20 - len(total.errors))])
