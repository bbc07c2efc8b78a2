"""Keeps every job's rows in step with its files: discovery, sync, status.

One `SyncService` per server process. It caches one reader per job (an SSH
reader holds a connection worth reusing) and serialises syncs of the same job
inside the process with a lock; across processes the persister's
compare-and-swap on the offset keeps ingestion exactly-once anyway.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.core.jobs import discover_jobs, get_job, make_reader
from training_platform.core.metrics_persister import (
    SyncResult,
    sync_anomaly_from_status_file,
    sync_metrics_from_file,
)
from training_platform.core.metrics_reader import MetricsReader
from training_platform.core.models import Job
from training_platform.errors import JobNotFoundError, MetricsSourceError
from training_platform.settings import Settings

logger = logging.getLogger(__name__)

TERMINAL_STATUSES = frozenset({"completed", "failed", "stopped"})


@dataclass
class JobSyncOutcome:
    result: SyncResult
    status_changed: bool


class SyncService:
    def __init__(self, factory: sessionmaker[Session], settings: Settings) -> None:
        self._factory = factory
        self._settings = settings
        self._readers: dict[str, MetricsReader] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, job_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(job_id, threading.Lock())

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

    def discover(self) -> list[str]:
        """Register jobs whose files appeared in the metrics directory."""
        with self._factory.begin() as session:
            return discover_jobs(session, self._settings.metrics_dir)

    def sync_job(self, job_id: str) -> JobSyncOutcome:
        """Ingest new lines and the status file of one job.

        Raises `JobNotFoundError`, or `MetricsSourceError` when the files
        cannot be read (the reason is also stored on the job).
        """
        with self._lock(job_id):
            with self._factory() as session:
                try:
                    job = get_job(session, job_id)
                except JobNotFoundError:
                    # Its file may have appeared since the last discovery round.
                    if job_id not in self.discover():
                        raise
                    job = get_job(session, job_id)
            reader = self._reader(job)
            try:
                result = sync_metrics_from_file(self._factory, job_id, reader)
                with self._factory.begin() as session:
                    job = get_job(session, job_id)
                    status_changed = sync_anomaly_from_status_file(session, job, reader)
            except MetricsSourceError as exc:
                self._record_error(job_id, str(exc))
                raise
            return JobSyncOutcome(result, status_changed)

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
            try:
                outcomes[job_id] = self.sync_job(job_id)
            except MetricsSourceError as exc:
                logger.debug("sync of %s skipped: %s", job_id, exc)
            except Exception:
                logger.exception("sync of %s failed", job_id)
        return outcomes

    def close(self) -> None:
        with self._guard:
            readers, self._readers = list(self._readers.values()), {}
        for reader in readers:
            try:
                reader.close()
            except Exception:
                logger.exception("closing a reader failed")
