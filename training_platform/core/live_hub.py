"""The live pipeline's engine: notice new bytes, sync the job once, fan out.

One `LiveHub` per server process, created and stopped by the app's lifespan.

- **Noticing.** Local directories are watched with file-system notifications
  (`watchfiles`: inotify/FSEvents/kqueue); every `poll_interval` each local
  job whose files changed since this process last read them (one stat) is
  synced anyway, which is the fallback where notifications do not work (NFS,
  some container mounts) and also where new jobs are discovered. A round over
  unchanged jobs issues no database statement (docs/platform.md).
  SSH jobs have no notifications over SFTP: they are polled every
  `ssh_poll_interval` while running.
- **Syncing.** Every trigger goes to the job's pump: at most one sync of a
  job runs at a time and any number of triggers during it coalesce into one
  more sync afterwards, so a burst of appends costs one read, not one per
  write. The sync itself is `SyncService.sync_job` in a worker thread; the
  manual `POST .../sync` calls the same method, and the service's per-job
  lock plus the persister's compare-and-swap keep the two exactly-once.
- **Fan-out** happens in the service's listener (`LivePipeline`) right after
  each commit; this module also serves subscribers the history and status
  snapshots they need for the hand-over, read under the job's lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from anyio import to_thread
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from watchfiles import awatch

from training_platform.callbacks.wire import JOB_ID_PATTERN
from training_platform.core.diagnostics import PlatformDiagnostics, anomaly_config
from training_platform.core.live import (
    STALLED,
    JobChannel,
    LivePipeline,
    Subscription,
    status_data,
)
from training_platform.core.metrics_query import list_metrics
from training_platform.core.metrics_reader import METRICS_SUFFIX, STATUS_SUFFIX, discover_job_ids
from training_platform.core.models import Job
from training_platform.core.quiet_rounds import file_signature, status_inodes
from training_platform.core.stall import StallWatch
from training_platform.core.sync_service import TERMINAL_STATUSES, SyncService
from training_platform.core.webhooks import WebhookNotifier
from training_platform.settings import Settings

logger = logging.getLogger(__name__)

# watchfiles hands over a group of changes once `STEP` ms pass without another
# one, or after `DEBOUNCE` ms of continuous writing. Its defaults (50 / 1600)
# are tuned for reloading code; a live chart wants the first line at once.
WATCH_STEP_MS: Final = 1
WATCH_DEBOUNCE_MS: Final = 50
MAX_STEP: Final = 2**63 - 1
# The jobs list is kept in memory between rounds and read again from the
# database when the metrics directory's listing changes, when a job is
# registered or deleted here, and at least this often (jobs registered through
# another server process).
JOB_LIST_MAX_AGE_S: Final = 30.0


@dataclass(frozen=True)
class _KnownJob:
    job_id: str
    source: str
    status: str
    directory: str | None


@dataclass
class _Pump:
    dirty: bool = False
    task: asyncio.Task[None] | None = None


class LiveHub:
    """Background sync of every job, and the subscriber side of the live stream."""

    def __init__(
        self,
        factory: sessionmaker[Session],
        settings: Settings,
        service: SyncService,
        pipeline: LivePipeline,
    ) -> None:
        self._factory = factory
        self.settings = settings
        self.service = service
        self.pipeline = pipeline
        self._pumps: dict[str, _Pump] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._watcher: asyncio.Task[None] | None = None
        self._watch_stop: asyncio.Event | None = None
        self._watched: frozenset[str] = frozenset()
        self._local_jobs: dict[str, set[str]] = {}  # directory -> job ids
        self._last_poll: dict[str, float] = {}
        self._jobs: list[_KnownJob] = []
        self._jobs_read_at = -math.inf
        self._listing: frozenset[str] | None = None  # job ids in metrics_dir last round
        self._stopping = False

    @classmethod
    def create(
        cls,
        factory: sessionmaker[Session],
        settings: Settings,
        *,
        clock: Callable[[], float] = time.time,
    ) -> LiveHub:
        """A hub with its sync service, detectors, stall watch and webhook, from settings."""
        diagnostics = None
        if settings.diagnostics_enabled:
            diagnostics = PlatformDiagnostics(
                factory,
                anomaly_config(settings),
                warmup_records=settings.diagnostics_warmup_records,
                clock=clock,
            )
        webhook = None
        if settings.webhook_url:
            webhook = WebhookNotifier(
                settings.webhook_url,
                secret=settings.webhook_secret,
                attempts=settings.webhook_attempts,
                timeout=settings.webhook_timeout,
                backoff=settings.webhook_backoff,
            )
        pipeline = LivePipeline(
            queue_size=settings.live_queue_size,
            max_message_bytes=settings.live_max_message_bytes,
            diagnostics=diagnostics,
            stall=StallWatch(
                factor=settings.stall_factor, min_seconds=settings.stall_min_seconds, clock=clock
            ),
            webhook=webhook,
            status_interval=settings.live_status_interval,
        )
        service = SyncService(factory, settings, listener=pipeline)
        return cls(factory, settings, service, pipeline)

    # -- lifecycle (event loop) --------------------------------------------------

    async def start(self) -> None:
        """Start fanning out; with `poll_interval > 0` also the background sync."""
        self.pipeline.attach(asyncio.get_running_loop())
        if self.settings.poll_interval > 0:
            self._tasks.append(asyncio.create_task(self._poll_forever(), name="live-poll"))

    async def stop(self, timeout: float = 30.0) -> None:
        """Stop triggering syncs; wait (up to `timeout`) for the ones in flight.

        A sync runs in a thread, which cancelling its task would not stop: it
        would go on using a reader and an engine that are about to be closed.
        """
        self._stopping = True
        self._stop_watcher()
        background = [*self._tasks, *([self._watcher] if self._watcher else [])]
        for task in background:
            task.cancel()
        pumps = [p.task for p in self._pumps.values() if p.task is not None]
        if pumps:
            _, late = await asyncio.wait(pumps, timeout=timeout)
            for task in late:
                logger.warning("shutting down with %s still running", task.get_name())
                task.cancel()
        for task in [*background, *pumps]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self.pipeline.attach(None)
        if self.pipeline.webhook is not None:
            await to_thread.run_sync(self.pipeline.webhook.close)

    def forget_job(self, job_id: str) -> None:
        """A deleted job (event loop): drop its stall and detector state, disconnect
        its live subscribers. Its queued syncs find it gone and do nothing."""
        self.pipeline.stall.forget(job_id)
        if self.pipeline.diagnostics is not None:
            self.pipeline.diagnostics.forget(job_id)
        self.pipeline.channel(job_id).drop_all("job deleted")
        self._last_poll.pop(job_id, None)
        self.jobs_changed()

    def jobs_changed(self) -> None:
        """A job was registered or deleted: the next round reads the jobs list again."""
        self._jobs_read_at = -math.inf

    # -- triggering --------------------------------------------------------------

    def request_sync(self, job_id: str) -> None:
        """Sync `job_id` soon: now if idle, else once more after the sync in flight."""
        pump = self._pumps.get(job_id)
        if pump is None:
            pump = self._pumps[job_id] = _Pump()
        pump.dirty = True
        if pump.task is None and not self._stopping:
            pump.task = asyncio.create_task(self._pump(job_id, pump), name=f"sync-{job_id}")

    async def _pump(self, job_id: str, pump: _Pump) -> None:
        try:
            while pump.dirty and not self._stopping:
                pump.dirty = False
                await to_thread.run_sync(self.service.sync_in_background, job_id)
        finally:
            pump.task = None

    async def _poll_forever(self) -> None:
        tick = min(self.settings.poll_interval, self.settings.ssh_poll_interval)
        while True:
            try:
                await self.poll_round()
            except Exception:
                logger.exception("background poll round failed")
            await asyncio.sleep(tick)

    async def poll_round(self) -> None:
        """Sync the jobs that are due; an idle round costs no database statement.

        SSH jobs: every `ssh_poll_interval` while running. Local jobs: every
        `poll_interval`, only those whose files changed since this process
        last read them (one `os.stat` each, the status file's inode from one
        directory listing) or whose stall verdict is about to flip; a finished
        job is left to the watcher while there is one.
        """
        now = time.monotonic()
        local_due = now - self._last_poll.get("", -math.inf) >= self.settings.poll_interval
        if local_due:
            self._last_poll[""] = now
        watching = self._watcher is not None and not self._watcher.done()
        jobs, due = await to_thread.run_sync(self._due_jobs, local_due, watching)
        local: dict[str, set[str]] = {}
        for job in jobs:
            if job.source == "ssh":
                # A finished SSH run costs a round trip per poll for nothing.
                if self._status(job) in TERMINAL_STATUSES:
                    continue
                if (
                    now - self._last_poll.get(job.job_id, -math.inf)
                    < self.settings.ssh_poll_interval
                ):
                    continue
                self._last_poll[job.job_id] = now
                self.request_sync(job.job_id)
            elif job.directory:
                local.setdefault(job.directory, set()).add(job.job_id)
        for job_id in due:
            self.request_sync(job_id)
        self._local_jobs = local
        if self.settings.watch_files:
            self._ensure_watcher(frozenset([*local, self._metrics_dir()]))

    async def wait_for_syncs(self) -> None:
        """Until no sync is running or queued (tests, shutdown checks)."""
        while tasks := [pump.task for pump in self._pumps.values() if pump.task is not None]:
            await asyncio.wait(tasks)

    def _status(self, job: _KnownJob) -> str:
        return self.service.known_status(job.job_id) or job.status

    def _due_jobs(self, local_due: bool, watching: bool) -> tuple[list[_KnownJob], list[str]]:
        """The known jobs, and the local ones due for a sync (worker thread)."""
        if local_due:
            self._discover()
        if time.monotonic() - self._jobs_read_at >= JOB_LIST_MAX_AGE_S:
            self._jobs_read_at = time.monotonic()
            with self._factory() as session:
                rows = session.execute(select(Job.job_id, Job.source, Job.status, Job.metrics_dir))
                self._jobs = [_KnownJob(*row) for row in rows]
        if not local_due:
            return self._jobs, []
        by_directory: dict[str, list[_KnownJob]] = {}
        for job in self._jobs:
            if job.source != "ssh" and job.directory:
                by_directory.setdefault(job.directory, []).append(job)
        due: list[str] = []
        for directory, jobs in by_directory.items():
            due += self._changed_jobs(directory, jobs, watching)
        return self._jobs, due

    def _discover(self) -> None:
        """Register new files; the database is asked only when the listing changed."""
        listing = frozenset(discover_job_ids(self.settings.metrics_dir))
        if listing == self._listing:
            return
        try:
            self.service.discover()
        except Exception:
            logger.exception("job discovery in %s failed", self.settings.metrics_dir)
            return
        self._listing = listing
        self._jobs_read_at = -math.inf

    def _changed_jobs(self, directory: str, jobs: list[_KnownJob], watching: bool) -> list[str]:
        inodes = status_inodes(directory)
        stall = self.pipeline.stall
        changed = []
        for job in jobs:
            status = self._status(job)
            # Polling is the fallback for running jobs (notifications can be
            # lost); a finished job's file only changes if a run restarts,
            # which the watcher sees, so it is polled only without one.
            if watching and status in TERMINAL_STATUSES:
                continue
            inode = inodes.get(job.job_id + STATUS_SUFFIX)
            signature = file_signature(directory, job.job_id, inode)
            # Silence is news too: a running job turns stalled with no change
            # to its files, a sync marks it (and one more when it recovers).
            flips = (status == "running" and stall.is_stalled(job.job_id)) or (
                status == STALLED and not stall.is_stalled(job.job_id)
            )
            if flips or not self.service.is_unchanged(job.job_id, signature):
                changed.append(job.job_id)
        return changed

    def _metrics_dir(self) -> str:
        return str(Path(self.settings.metrics_dir).resolve())

    # -- file-system notifications -------------------------------------------------

    def _ensure_watcher(self, directories: frozenset[str]) -> None:
        existing = frozenset(d for d in directories if os.path.isdir(d))
        running = self._watcher is not None and not self._watcher.done()
        if (existing == self._watched and running) or not existing or self._stopping:
            return
        self._stop_watcher()
        self._watched = existing
        self._watch_stop = asyncio.Event()
        self._watcher = asyncio.create_task(
            self._watch(existing, self._watch_stop), name="live-watch"
        )

    def _stop_watcher(self) -> None:
        if self._watch_stop is not None:
            self._watch_stop.set()  # awatch's thread checks it between waits

    async def _watch(self, directories: frozenset[str], stop: asyncio.Event) -> None:
        metrics_dir = self._metrics_dir()
        try:
            async for changes in awatch(
                *sorted(directories),
                watch_filter=None,
                step=WATCH_STEP_MS,
                debounce=WATCH_DEBOUNCE_MS,
                stop_event=stop,
                recursive=False,
                ignore_permission_denied=True,
            ):
                for _change, path in changes:
                    directory, name = os.path.split(path)
                    job_id = _job_of(name)
                    if job_id is None:
                        continue
                    if job_id in self._local_jobs.get(directory, ()) or directory == metrics_dir:
                        self.request_sync(job_id)  # a new file in metrics_dir: sync discovers it
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            # Polling goes on: slower, never blind.
            logger.warning(
                "file notifications for %s unavailable (%s); polling every %s s",
                ", ".join(sorted(directories)),
                exc,
                self.settings.poll_interval,
            )

    # -- subscribers (event loop, except the *_locked readers: worker threads) ------

    def channel(self, job_id: str) -> JobChannel:
        return self.pipeline.channel(job_id)

    def subscribe(self, job_id: str) -> Subscription:
        return self.channel(job_id).subscribe()

    def subscriber_count(self, job_id: str) -> int:
        return self.channel(job_id).subscriber_count

    def job_exists(self, job_id: str) -> bool:
        """Known, or its file just appeared in the metrics directory (worker thread)."""
        with self._factory() as session:
            if session.get(Job, job_id) is not None:
                return True
            # Look again after discovering, rather than trusting what this
            # discovery added: a concurrent one (the poller) may have added it.
            self.service.discover()
            return session.get(Job, job_id) is not None

    def status_locked(self, job_id: str) -> tuple[dict[str, Any] | None, int]:
        """The job's status and the commit number it reflects (worker thread)."""
        channel = self.channel(job_id)
        with self.service.job_lock(job_id), self._factory() as session:
            job = session.get(Job, job_id)
            return (status_data(job) if job is not None else None), channel.seq

    def history_locked(
        self, job_id: str, after_step: int, limit: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Up to `limit` stored records after `after_step`, API-safe, and the commit
        number they reflect (worker thread). Under the job's lock, so every commit
        up to that number is in the page and none after it."""
        channel = self.channel(job_id)
        with self.service.job_lock(job_id), self._factory() as session:
            if after_step >= MAX_STEP:  # nothing can come after the largest BIGINT
                return [], channel.seq
            records = list_metrics(
                session,
                job_id=job_id,
                start_step=after_step + 1,
                limit=limit,
                nonfinite_as_strings=True,
            )
            return records, channel.seq


def _job_of(name: str) -> str | None:
    for suffix in (METRICS_SUFFIX, STATUS_SUFFIX):
        if name.endswith(suffix):
            job_id = name[: -len(suffix)]
            return job_id if JOB_ID_PATTERN.fullmatch(job_id) else None
    return None
