"""Which jobs a background round syncs: one rule for the server and `training-platform sync`.

- **SSH jobs** have no file notifications over SFTP, nor do runs read from a
  tracking database (MLflow): polled every `ssh_poll_interval` while
  running; a finished one costs a round trip per poll for nothing, so it is
  left alone.
- **Local jobs** are polled every `poll_interval`, and only those whose files
  changed since this process last read them (one `os.stat` each, the status
  file's inode from one directory listing, one listing of a rollout
  directory) or whose stalled verdict is about to flip. A finished job's
  files only change when a run restarts, which the file watcher sees: with a
  watcher running, finished jobs are left to it.

A round over unchanged jobs issues no database statement (docs/platform.md).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from training_platform.ingest.quiet_rounds import file_signature, list_directory
from training_platform.ingest.rollout_files import local_rollout_dir
from training_platform.ingest.sync_service import JobSyncOutcome, SyncService
from training_platform.settings import Settings
from training_platform.store.models import TERMINAL_STATUSES, Job

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class KnownJob:
    """A job as a round sees it: where its files are and its stored status."""

    job_id: str
    source: str
    status: str
    directory: str | None
    rollout_dir: str | None = None  # as registered (None: the default next to the files)


def known_jobs(factory: sessionmaker[Session]) -> list[KnownJob]:
    """Every registered job, in one statement."""
    with factory() as session:
        rows = session.execute(
            select(Job.job_id, Job.source, Job.status, Job.metrics_dir, Job.rollout_dir)
        )
        return [KnownJob(*row) for row in rows]


class PollRule:
    """The jobs due for a sync in a round (call from one round at a time)."""

    def __init__(self, service: SyncService, settings: Settings) -> None:
        self._service = service
        self._settings = settings
        self._ssh_polled: dict[str, float] = {}  # job id -> time.monotonic() of its last poll

    def due(
        self, jobs: Iterable[KnownJob], *, now: float, local_due: bool, watching: bool
    ) -> list[str]:
        """The ids of `jobs` to sync now (`now`: time.monotonic()).

        `local_due`: a `poll_interval` has passed since local jobs were last
        looked at; `watching`: a file watcher is running (see module doc).
        """
        due: list[str] = []
        by_directory: dict[str, list[tuple[KnownJob, str]]] = {}
        for job in jobs:
            status = self._service.known_status(job.job_id) or job.status
            if job.source != "local":  # SSH, a tracking database: no notifications
                if status in TERMINAL_STATUSES:
                    continue
                last = self._ssh_polled.get(job.job_id, -math.inf)
                if now - last >= self._settings.ssh_poll_interval:
                    self._ssh_polled[job.job_id] = now
                    due.append(job.job_id)
            elif job.directory and local_due:
                by_directory.setdefault(job.directory, []).append((job, status))
        for directory, group in by_directory.items():
            due += self._changed(directory, group, watching)
        return due

    def forget(self, job_id: str) -> None:
        self._ssh_polled.pop(job_id, None)

    def _changed(
        self, directory: str, jobs: list[tuple[KnownJob, str]], watching: bool
    ) -> list[str]:
        listing = list_directory(directory)
        stall = self._service.stall
        if self._service.host_files is not None:  # the hosts' files, from this listing
            self._service.host_files.note_listing([job.job_id for job, _ in jobs], listing)
        changed = []
        for job, status in jobs:
            if watching and status in TERMINAL_STATUSES:
                continue
            rollouts = local_rollout_dir(job.job_id, directory, job.rollout_dir, listing)
            names = self._service.file_names_of(job.job_id, listing)
            signature = file_signature(directory, names, listing, rollouts, job.job_id)
            flips = stall is not None and stall.verdict_flips(job.job_id, status)
            if flips or not self._service.is_unchanged(job.job_id, signature):
                changed.append(job.job_id)
        return changed


def poll_once(service: SyncService, rule: PollRule) -> dict[str, JobSyncOutcome]:
    """One round without a server (`training-platform sync`): discover, then sync
    every job the rule finds due. Never raises for one job's trouble: it is
    logged and stored on the job."""
    try:
        service.discover()
    except Exception:
        logger.exception("job discovery failed")
    due = rule.due(
        known_jobs(service.session_factory), now=time.monotonic(), local_due=True, watching=False
    )
    outcomes: dict[str, JobSyncOutcome] = {}
    for job_id in due:
        outcome = service.sync_in_background(job_id)
        if outcome is not None:
            outcomes[job_id] = outcome
    return outcomes
