"""Keeps every job's rows in step with its files: discovery, sync, status.

One `SyncService` per server process. It caches one reader per job (an SSH
reader holds a connection worth reusing) and serialises syncs of the same job
inside the process with a lock; across processes the persister's
compare-and-swap on the offset keeps ingestion exactly-once anyway. With
several processes on one database, a process syncs only the jobs whose
ingest lease it holds (`ingest/lease_keeper.py`), each under its fence.

A `SyncListener` (the live pipeline) hears about every committed batch and
status change, whoever triggered the sync (background or `POST .../sync`),
always under the job's lock: so for one job its calls never overlap and come
in commit order. It only listens: what is stored (a stalled verdict included,
see `ingest/stall.py`) is decided here, before the commit.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy.orm import Session, sessionmaker

from training_platform.errors import JobNotFoundError, LeaseLostError, MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.host_files import HostFiles
from training_platform.ingest.ingest_stats import IngestStats
from training_platform.ingest.job_kinds import JobKinds
from training_platform.ingest.job_position import load_job
from training_platform.ingest.lease_keeper import LeaseKeeper
from training_platform.ingest.line_scanner import ReadPosition
from training_platform.ingest.metrics_file import METRICS
from training_platform.ingest.persister import CommittedBatch, SyncResult, sync_file
from training_platform.ingest.quiet_rounds import (
    FailureLog,
    FileSignature,
    file_signature,
)
from training_platform.ingest.reader_cache import ReaderCache
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.registry import discover_jobs, rollout_source
from training_platform.ingest.rollout_files import local_rollout_dir
from training_platform.ingest.rollouts import FILE_BATCHES, RolloutResult, sync_rollouts
from training_platform.ingest.run_file import sync_run_file
from training_platform.ingest.stall import StallWatch
from training_platform.ingest.status_file import sync_status
from training_platform.ingest.sync_progress import SyncProgress
from training_platform.settings import Settings
from training_platform.store.leases import Fence, writing_under
from training_platform.store.models import TERMINAL_STATUSES, Job

logger = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class JobSyncOutcome:
    result: SyncResult
    status_changed: bool


class SyncListener(Protocol):
    """Hooks called by `SyncService.sync_job` while it holds the job's lock."""

    def batch_committed(self, job_id: str, batch: CommittedBatch) -> None:
        """A batch was committed: its records (one per step, the newest, in file
        order) and exactly the anomaly rows it wrote."""

    def status_changed(self, job: Job) -> None:
        """The job's status fields changed and were committed."""


class SyncService:
    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        *,
        listener: SyncListener | None = None,
        stall: StallWatch | None = None,
        line_kinds: Sequence[LineFileKind] = (),
        host_files: HostFiles | None = None,
        leases: LeaseKeeper | None = None,
    ) -> None:
        self._factory = factory
        self._settings = settings
        self.listener = listener
        # Which files of a job are read as which kinds: its metrics (whichever
        # tool wrote them), its other line files (ingest/file_kinds.py) and its
        # hosts' system files, found by listing (ingest/host_files.py).
        self.kinds = JobKinds(line_kinds, host_files)
        self.host_files = host_files
        self.watched_suffixes = self.kinds.watched_suffixes
        # Marks running jobs gone silent as stalled (None: never, e.g. `sync` once).
        self.stall = stall
        self._readers = ReaderCache(settings)
        self._locks: dict[str, threading.Lock] = {}
        self._progress = SyncProgress(factory)
        # With several processes on the database: the job's lease this one must
        # hold to sync it (ingest/lease_keeper.py); None: one process, no leases.
        self.leases = leases
        # Jobs whose syncs in flight should stop at their next batch (see `exclusive`).
        self._interrupted: set[str] = set()
        # job id -> its local files as they were when this process last read
        # them to the end, and the status the job had then (see `is_unchanged`).
        self._seen: dict[str, FileSignature] = {}
        self._statuses: dict[str, str] = {}
        self._failures = FailureLog(logger)  # each job's error, logged once per change
        self.stats = IngestStats()  # what this process ingested, for GET /metrics
        self._guard = threading.Lock()

    @property
    def session_factory(self) -> sessionmaker[Session]:
        return self._factory

    def _lock(self, job_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

    def job_lock(self, job_id: str) -> threading.Lock:
        """The lock every sync of `job_id` holds: whoever holds it sees no sync
        half-done, and every committed batch already announced to the listener."""
        return self._lock(job_id)

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
        """The job was deleted: close its reader, drop its state (under the job's lock)."""
        self._readers.forget(job_id)
        self.kinds.forget(job_id)
        if self.stall is not None:
            self.stall.forget(job_id)
        self._progress.forget(job_id)
        self.stats.forget(job_id)
        if self.leases is not None:  # its lease row went with it
            self.leases.forget(job_id)
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

    def is_known(self, job_id: str) -> bool:
        """Whether the job is known, or its files just appeared (then it is registered).

        The one answer to "404 or not" for routes, WebSockets and syncs. No
        connection is held while discovery takes its own.
        """

        def lookup() -> None:
            with self._factory() as session:
                if session.get(Job, job_id) is None:
                    raise JobNotFoundError(f"job {job_id!r} not found")

        try:
            self._after_discovery(lookup)
        except JobNotFoundError:
            return False
        return True

    def _after_discovery(self, lookup: Callable[[], T]) -> T:
        """`lookup()`, tried again after a discovery when the job is not known.

        Looked up again rather than trusting what this discovery added: a
        concurrent one (the background round) may have registered it first.
        """
        try:
            return lookup()
        except JobNotFoundError:
            self.discover()
            return lookup()

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
            return JobSyncOutcome(self._progress.of(job_id), status_changed=False)
        try:
            fence = None if self.leases is None else self._fence(job_id)
            if self.leases is not None and fence is None:  # another process ingests it
                return JobSyncOutcome(self._progress.of(job_id), status_changed=False)
            with writing_under(fence):
                return self._sync_job_locked(job_id, deadline)
        except LeaseLostError as exc:  # taken over mid-sync: the new holder goes on
            logger.info("%s; its sync stops here", exc)
            if self.leases is not None:
                self.leases.lost(job_id)
            return JobSyncOutcome(self._progress.of(job_id), status_changed=False)
        finally:
            lock.release()

    def _sync_job_locked(self, job_id: str, deadline: float | None) -> JobSyncOutcome:
        """`sync_job` once the job's lock is held."""
        job, position = self._after_discovery(lambda: load_job(self._factory, job_id))
        reader = self._readers.of(job)
        metrics_kinds = self.kinds.metrics_kinds(job, reader)  # whichever tool wrote them
        # Looked at before reading: an append during the sync makes the files
        # differ from this, so the next round reads them again.
        signature = None
        if job.source == "local" and job.metrics_dir:
            directory = local_rollout_dir(job_id, job.metrics_dir, job.rollout_dir)
            names = self.kinds.file_names(job_id)
            signature = file_signature(job.metrics_dir, names, None, directory, job_id)
        settled = True  # nothing left that the signature would not notice
        try:
            result = self._sync_metrics(job_id, reader, metrics_kinds, position, deadline)
            line_kinds = self.kinds.line_kinds_of(job_id, reader)
            for kind in line_kinds:
                if not result.at_eof:
                    break
                more = self._sync_file(job_id, reader, kind, deadline=deadline)
                result.at_eof = more.at_eof
            if result.at_eof:  # verl's rollout dumps: after the line files
                rollouts = self._sync_rollouts(job, reader, deadline)
                result.at_eof, settled = rollouts.done, rollouts.settled
            if not result.at_eof:
                # Lines are still waiting: a final status read now would be
                # announced before them (a run "finished" ahead of its last
                # steps). The sync that reaches the end reads it.
                return JobSyncOutcome(result, status_changed=False)
            started = result.new_metrics > 0
            tool = self.kinds.tool_status(job, self._factory)  # MLflow's, W&B's exit
            job, status_changed = sync_status(self._factory, job, reader, self.stall, started, tool)
            sync_run_file(self._factory, job_id, reader, force=status_changed)  # before it's told
            if status_changed and job.status in TERMINAL_STATUSES:
                # A trainer writes its last lines before its final status; a
                # line appended between our two reads would otherwise be
                # announced after the run's end. One more read catches it.
                result.add(self._sync_metrics(job_id, reader, metrics_kinds, None, None))
                for kind in line_kinds:
                    self._sync_file(job_id, reader, kind)
                settled = self._sync_rollouts(job, reader, None).settled and settled
        except MetricsSourceError as exc:
            self._record_error(job_id, str(exc))
            raise
        with self._guard:
            self._statuses[job_id] = job.status
            if signature is not None and settled:
                self._seen[job_id] = signature
        if status_changed and self.listener is not None:
            self._tell(self.listener.status_changed, job)
        return JobSyncOutcome(result, status_changed)

    def _fence(self, job_id: str) -> Fence | None:
        """The lease to sync under (None: another process's); JobNotFoundError when
        the job is unknown even after a discovery."""
        assert self.leases is not None
        return self.leases.fence_for(job_id, discover=lambda: self.is_known(job_id))

    def file_names_of(self, job_id: str, listing: dict[str, int] | None = None) -> tuple[str, ...]:
        """The names of every file of the job whose change is worth a sync."""
        return self.kinds.file_names(job_id, listing)

    def _sync_metrics(
        self,
        job_id: str,
        reader: MetricsReader,
        kinds: tuple[LineFileKind, ...],
        position: ReadPosition | None,
        deadline: float | None,
    ) -> SyncResult:
        """The job's metrics files in order (`position`: the platform's metrics file's)."""
        result = SyncResult(job_id=job_id)
        for kind in kinds:
            start = position if kind.name == METRICS.name else None
            result.add(self._sync_file(job_id, reader, kind, start, deadline=deadline))
            if not result.at_eof:
                break
        return result

    def _sync_file(
        self,
        job_id: str,
        reader: MetricsReader,
        kind: LineFileKind,
        position: ReadPosition | None = None,
        *,
        deadline: float | None = None,
    ) -> SyncResult:
        """New lines of the `kind` file up to its end, or until `deadline` (time.monotonic()).

        One batch (one transaction) at a time, so the clock is looked at and
        the progress noted between commits; at least one batch always runs, so
        every call makes progress. The metrics file's progress is what a
        budgeted caller is answered while this sync holds the lock.
        """
        result = self._sync_batch(job_id, reader, kind, position)
        self._progress.note(job_id, kind, result)
        while not result.at_eof and (deadline is None or time.monotonic() < deadline):
            if job_id in self._interrupted:
                break
            result.add(self._sync_batch(job_id, reader, kind))
            self._progress.note(job_id, kind, result)
        return result

    def _sync_rollouts(
        self, job: Job, reader: MetricsReader, deadline: float | None
    ) -> RolloutResult:
        """The job's rollout directory (`ingest/rollouts.py`), each committed step file
        announced as a ``samples`` batch, until `deadline` (time.monotonic())."""
        source = rollout_source(job, reader, self._settings)
        if source is None:
            return RolloutResult()
        job_id, settings = job.job_id, self._settings
        return sync_rollouts(
            self._factory, job_id, source,
            max_file_bytes=settings.sync_batch_bytes * FILE_BATCHES,
            max_line_bytes=settings.max_line_bytes,
            on_commit=lambda batch: self._committed(job_id, batch),
            stop=lambda: job_id in self._interrupted
            or (deadline is not None and time.monotonic() >= deadline),
        )  # fmt: skip

    def _sync_batch(
        self,
        job_id: str,
        reader: MetricsReader,
        kind: LineFileKind,
        position: ReadPosition | None = None,
    ) -> SyncResult:
        """One committed batch (the persister retries a lost compare-and-swap itself)."""
        result = sync_file(
            self._factory, job_id, reader, kind, position=position, max_batches=1,
            on_commit=lambda batch: self._committed(job_id, batch),
        )  # fmt: skip
        self.stats.batch(job_id, kind.name, result)
        return result

    def _committed(self, job_id: str, batch: CommittedBatch) -> None:
        if self.stall is not None and batch.kind == METRICS.name:
            self.stall.note_records(job_id, batch.records)  # the file grew now
        if self.listener is not None:
            self._tell(self.listener.batch_committed, job_id, batch)

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

    def sync_in_background(self, job_id: str) -> JobSyncOutcome | None:
        """`sync_job` for a background round: never raises, logs a failure once.

        A job whose files cannot be read fails the same way every round: its
        error is logged when it first appears and when it changes (with the
        traceback for an unexpected one), and once when syncs work again.
        """
        try:
            if self.leases is not None and self._fence(job_id) is None:
                return None  # another process's job: not even a statement
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
        self._readers.close()
