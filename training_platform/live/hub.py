"""The live pipeline's engine: notice new bytes, sync the job once, fan out.

One `LiveHub` per server process, created and stopped by the app's lifespan.

- **Noticing.** Local directories are watched with file-system notifications
  (`watchfiles`: inotify/FSEvents/kqueue); background rounds are the fallback
  where notifications do not work (NFS, some container mounts), the only
  way for SSH jobs, and where new jobs are discovered. Which jobs a round
  syncs is `ingest/polling.py`'s rule, the one `training-platform sync` uses.
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
from sqlalchemy.orm import Session, sessionmaker
from watchfiles import awatch

from training_platform.callbacks.wire.schema import JOB_ID_PATTERN, MAX_STEP
from training_platform.history.metrics_query import list_metrics
from training_platform.ingest.formats.run_discovery import find_tool_runs
from training_platform.ingest.formats.tensorboard_files import is_event_file
from training_platform.ingest.formats.verl_file import VERL_FILE_SUFFIX
from training_platform.ingest.formats.wandb_log import is_run_file
from training_platform.ingest.job_kinds import TENSORBOARD, TRACKIO, WANDB
from training_platform.ingest.polling import KnownJob, PollRule, known_jobs
from training_platform.ingest.readers import STATUS_SUFFIX, discover_job_ids
from training_platform.ingest.sync_service import SyncService
from training_platform.ingest.system_file import job_of_host_file
from training_platform.live.channels import JobChannel, Subscription, status_data
from training_platform.live.pipeline import LivePipeline
from training_platform.settings import Settings
from training_platform.store.models import Job

logger = logging.getLogger(__name__)
DATABASE_FILES: Final = (".db", ".db-wal")  # a Trackio project's, as it logs

# watchfiles hands over a group of changes once `STEP` ms pass without another
# one, or after `DEBOUNCE` ms of continuous writing. Its defaults (50 / 1600)
# are tuned for reloading code; a live chart wants the first line at once.
WATCH_STEP_MS: Final = 1
WATCH_DEBOUNCE_MS: Final = 50

# The jobs list is kept in memory between rounds and read again from the
# database when the metrics directory's listing changes, when a job is
# registered or deleted here, and at least this often (jobs registered through
# another server process).
JOB_LIST_MAX_AGE_S: Final = 30.0


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
        poll_rule: PollRule,
    ) -> None:
        self._factory = factory
        self.settings = settings
        self.service = service
        self.pipeline = pipeline
        self.poll_rule = poll_rule
        self._pumps: dict[str, _Pump] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._watcher: asyncio.Task[None] | None = None
        self._watch_stop: asyncio.Event | None = None
        self._watched: frozenset[str] = frozenset()
        self._local_jobs: dict[str, set[str]] = {}  # directory -> job ids
        self._local_polled = -math.inf  # time.monotonic() of the last local round
        self._jobs: list[KnownJob] = []
        self._jobs_read_at = -math.inf
        self._listing: frozenset[str] | None = None  # job ids in metrics_dir last round
        self._stopping = False

    # -- lifecycle (event loop) --------------------------------------------------

    async def start(self) -> None:
        """Start fanning out; with `poll_interval > 0` also the background sync."""
        self.pipeline.attach(asyncio.get_running_loop())
        if self.pipeline.cluster is not None:
            self.pipeline.cluster.start()  # hear the other processes' announcements
        if self.service.leases is not None:
            # A first round before any sync: this process is in server_instances
            # before it holds anything, and takes its share from the start. Rounds
            # go on without background polling too: a sync on request is fenced.
            await to_thread.run_sync(_quietly, self.service.leases.round)
            self._tasks.append(asyncio.create_task(self._keep_leases(), name="leases"))
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
        if self.service.leases is not None:  # after the last sync: hand the jobs over
            await to_thread.run_sync(_quietly, self.service.leases.stop)
        if self.pipeline.cluster is not None:
            await to_thread.run_sync(self.pipeline.cluster.close)
        if self.pipeline.webhook is not None:
            await to_thread.run_sync(self.pipeline.webhook.close)

    def polling(self) -> bool:
        """Whether the background sync's task is running (`GET /readyz` asks)."""
        return any(task.get_name() == "live-poll" and not task.done() for task in self._tasks)

    def forget_job(self, job_id: str) -> None:
        """A deleted job (event loop): drop its stall and detector state, disconnect
        its live subscribers. Its queued syncs find it gone and do nothing."""
        if self.pipeline.diagnostics is not None:
            self.pipeline.diagnostics.forget(job_id)
        if self.pipeline.sample_diagnostics is not None:
            self.pipeline.sample_diagnostics.forget(job_id)
        if self.pipeline.system_diagnostics is not None:
            self.pipeline.system_diagnostics.forget(job_id)
        self.pipeline.forget(job_id)
        self.pipeline.channel(job_id).drop_all("job deleted")
        self.poll_rule.forget(job_id)
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

    async def _keep_leases(self) -> None:
        """The lease keeper's rounds (`ingest/lease_keeper.py`); a job it claims is
        synced at once. A failed round (database unreachable) is tried again
        next time: until then this process's leases age, and others take over."""
        assert self.service.leases is not None
        keeper = self.service.leases
        failing = False
        while True:
            await asyncio.sleep(keeper.round_interval)
            try:
                for job_id in await to_thread.run_sync(keeper.round):
                    self.request_sync(job_id)
                if failing:
                    logger.info("lease round works again")
                failing = False
            except Exception as exc:
                if not failing:
                    logger.warning("lease round failed (%s); retrying every round", exc)
                failing = True

    async def poll_round(self) -> None:
        """Sync the jobs that are due (`PollRule`); an idle round costs no database statement."""
        now = time.monotonic()
        local_due = now - self._local_polled >= self.settings.poll_interval
        if local_due:
            self._local_polled = now
        watching = self._watcher is not None and not self._watcher.done()
        due = await to_thread.run_sync(self._due_jobs, now, local_due, watching)
        for job_id in due:
            self.request_sync(job_id)
        local: dict[str, set[str]] = {}
        for job in self._jobs:
            if job.source != "ssh" and job.directory:
                local.setdefault(job.directory, set()).add(job.job_id)
        self._local_jobs = local
        if self.settings.watch_files:
            self._ensure_watcher(frozenset([*local, self._metrics_dir()]))

    async def wait_for_syncs(self) -> None:
        """Until no sync is running or queued (tests, shutdown checks)."""
        while tasks := [pump.task for pump in self._pumps.values() if pump.task is not None]:
            await asyncio.wait(tasks)

    def _due_jobs(self, now: float, local_due: bool, watching: bool) -> list[str]:
        """The jobs list (cached, see JOB_LIST_MAX_AGE_S) through the rule (worker thread)."""
        if local_due:
            self._discover()
        if time.monotonic() - self._jobs_read_at >= JOB_LIST_MAX_AGE_S:
            self._jobs_read_at = time.monotonic()
            self._jobs = known_jobs(self._factory)
        return self.poll_rule.due(self._jobs, now=now, local_due=local_due, watching=watching)

    def _discover(self) -> None:
        """Register new files; the database is asked only when the listing changed."""
        root = Path(self.settings.metrics_dir)
        runs = (run.job_id for run in find_tool_runs(root))  # scandir only: no stat
        listing = frozenset((*discover_job_ids(root), *runs))
        if listing == self._listing:
            return
        try:
            self.service.discover()
        except Exception:
            logger.exception("job discovery in %s failed", self.settings.metrics_dir)
            return
        self._listing = listing
        self._jobs_read_at = -math.inf

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
        suffixes = (*self.service.watched_suffixes, STATUS_SUFFIX)
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
                    known = self._local_jobs.get(directory, ())
                    job_id = _job_of(name, suffixes)
                    if job_id is not None and (job_id in known or directory == metrics_dir):
                        self.request_sync(job_id)  # a new file in metrics_dir: sync discovers it
                        continue
                    verl_job = _verl_job_of(name)  # registered only, never discovered
                    if verl_job is not None and verl_job in known:
                        self.request_sync(verl_job)
                    elif is_event_file(name):  # a TensorBoard run's (new) event file
                        self._sync_format(known, TENSORBOARD)
                    elif name.endswith(DATABASE_FILES):  # a Trackio project's rows
                        self._sync_format(known, TRACKIO)
                    elif is_run_file(name):  # a W&B offline run's transaction log
                        self._sync_format(known, WANDB)
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

    def _sync_format(self, jobs: set[str] | tuple[()], format: str) -> None:
        """Sync the jobs of a directory read in `format` (or not synced yet) on a change of
        a file of that tool's: its files are not named after a job."""
        for job_id in jobs:
            if self.service.kinds.format_of(job_id) in (None, format):
                self.request_sync(job_id)

    # -- subscribers (event loop, except the *_locked readers: worker threads) ------

    def channel(self, job_id: str) -> JobChannel:
        return self.pipeline.channel(job_id)

    def before_subscribe(self, job_id: str) -> None:
        """Get the job's delivery ready for a new client (worker thread): with several
        processes on the database, it starts from the job's current number."""
        if self.pipeline.cluster is not None:
            self.pipeline.cluster.feed.track(job_id)

    def subscribe(self, job_id: str) -> Subscription:
        return self.channel(job_id).subscribe()

    def subscriber_count(self, job_id: str) -> int:
        return self.channel(job_id).subscriber_count

    def status_locked(self, job_id: str) -> tuple[dict[str, Any] | None, int]:
        """The job's status and the commit number it reflects (worker thread)."""
        if self.pipeline.cluster is not None:  # numbers are the database's
            return self.pipeline.cluster.status_snapshot(job_id)
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
        if self.pipeline.cluster is not None:  # one snapshot of the database instead
            return self.pipeline.cluster.history_snapshot(job_id, after_step, limit)
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


def _quietly(action: Callable[[], object]) -> None:
    try:
        action()
    except Exception:
        logger.exception("%s failed", getattr(action, "__qualname__", action))


def _job_of(name: str, suffixes: tuple[str, ...]) -> str | None:
    """The job whose file `name` is (one of `suffixes` after a valid job id, or one
    of its hosts' system files), else None."""
    for suffix in suffixes:
        if name.endswith(suffix):
            return _valid_job_id(name[: -len(suffix)])
    return job_of_host_file(name)


def _verl_job_of(name: str) -> str | None:
    """The job a verl file logger's `{job_id}.jsonl` would be (only a registered one is)."""
    if not name.endswith(VERL_FILE_SUFFIX):
        return None
    return _valid_job_id(name.removesuffix(VERL_FILE_SUFFIX))


def _valid_job_id(job_id: str) -> str | None:
    return job_id if JOB_ID_PATTERN.fullmatch(job_id) else None
