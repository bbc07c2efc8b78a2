"""Which files of a job are read, and as which kinds (`ingest/file_kinds.py`).

- Its metrics: the platform's `{job_id}_metrics.jsonl`, verl's file logger's
  `{job_id}.jsonl` (or the file named), a Trackio run in its project's
  database, an MLflow run (its tracking database, server, or file store here or
  on an SSH host, one kind per metric file), or a TensorBoard run's
  event files or a W&B offline run's transaction log, one kind each, found by
  listing its directory (a local `scandir`, or one SFTP listing per sync of
  an SSH job);
- its other line files (generated samples, ...), and its hosts' system files
  (`ingest/host_files.py`).

Also the names of those files, whose signature tells a background round
whether a local job changed since it was last read (`ingest/quiet_rounds.py`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import partial

from sqlalchemy.orm import Session, sessionmaker

from training_platform.errors import MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.mlflow_runs import mlflow_kinds, mlflow_status
from training_platform.ingest.formats.tensorboard_files import event_file_kind, is_event_file
from training_platform.ingest.formats.trackio_db import trackio_kind
from training_platform.ingest.formats.trackio_system import trackio_system_kind
from training_platform.ingest.formats.verl_file import METRICS_KINDS, VERL_FILE_SUFFIX
from training_platform.ingest.formats.wandb_log import (
    RUN_FILE_PREFIX,
    exit_status,
    is_run_file,
    run_file_kind,
)
from training_platform.ingest.host_files import HostFiles
from training_platform.ingest.metrics_file import METRICS
from training_platform.ingest.readers import MetricsReader
from training_platform.ingest.run_file import RUN_SUFFIX, stored_ending
from training_platform.store.models import Job

TENSORBOARD = "tensorboard"
TRACKIO = "trackio"
MLFLOW = "mlflow"
WANDB = "wandb"
FORMATS = (*METRICS_KINDS, TENSORBOARD, TRACKIO, MLFLOW, WANDB)  # `jobs.format` (DESIGN.md §7)
# Formats whose files are found by listing the run directory, and which names are theirs.
LISTED: dict[str, Callable[[str], bool]] = {TENSORBOARD: is_event_file, WANDB: is_run_file}
MAX_SUBDIRECTORIES = 16  # of a run directory, listed for its hparams
MAX_EVENT_FILES = 256  # per run: more is a log directory of many runs, not one run


class JobKinds:
    """Per job, the kinds its metrics and other files are read as (one per process)."""

    def __init__(self, line_kinds: Sequence[LineFileKind], host_files: HostFiles | None) -> None:
        self.line_kinds = tuple(line_kinds)
        self.host_files = host_files
        kinds = (METRICS, *self.line_kinds)
        # Every file of a platform job whose change is worth a sync, status file aside.
        self.watched_suffixes = (*(kind.suffix for kind in kinds), RUN_SUFFIX)
        self._formats: dict[str, str] = {}  # job id -> its format, as of its last sync
        self._files: dict[str, str] = {}  # job id -> its metrics file, when named
        self._event_files: dict[str, tuple[str, ...]] = {}  # job id -> as last listed
        # job id -> the kinds of what its tool logs beside metrics (Trackio's system rows)
        self._tool_kinds: dict[str, tuple[LineFileKind, ...]] = {}
        # job id -> how its MLflow run's status is read (over its reader's connection)
        self._run_statuses: dict[str, Callable[[], str | None]] = {}
        self._guard = threading.Lock()

    def metrics_kinds(self, job: Job, reader: MetricsReader) -> tuple[LineFileKind, ...]:
        """The kinds holding the job's metrics, in the order they are read."""
        with self._guard:
            self._formats[job.job_id] = job.format
            if job.file is not None:
                self._files[job.job_id] = job.file
        if job.format == TRACKIO:  # registration requires all three
            assert job.metrics_dir is not None and job.file is not None and job.run is not None
            system = trackio_system_kind(job.metrics_dir, job.file, job.run)
            with self._guard:
                self._tool_kinds[job.job_id] = (system,)
            return (trackio_kind(job.metrics_dir, job.file, job.run),)
        if job.format == MLFLOW:
            assert job.run is not None  # registration requires it
            status = partial(mlflow_status, job.tracking_uri, job.run, reader)
            with self._guard:
                self._run_statuses[job.job_id] = status
            # A database, files here or on an SSH host (no tracking_uri), or a server.
            return mlflow_kinds(job.tracking_uri, job.run, reader)
        if job.format not in LISTED:
            kind = METRICS_KINDS.get(job.format, METRICS)
            return (kind if job.file is None else replace(kind, file=job.file),)
        try:
            names = sorted(_listed_files(job.format, reader))
        except MetricsSourceError:
            names = list(self._event_files.get(job.job_id, ()))  # the sync reports it
        names = names[:MAX_EVENT_FILES]
        with self._guard:
            self._event_files[job.job_id] = tuple(names)
        kind_of = event_file_kind if job.format == TENSORBOARD else run_file_kind
        return tuple(kind_of(name) for name in names)

    def tool_status(self, job: Job, factory: sessionmaker[Session]) -> str | None:
        """The run's status as the tool that logs it says (MLflow's run status, W&B's
        exit record as stored), None where only its files tell (the status file, or
        records coming and stopping). MLflow's: after `metrics_kinds` in the same sync,
        through the reader it was given."""
        if job.format == MLFLOW:
            with self._guard:
                status = self._run_statuses.get(job.job_id)
            return None if status is None else status()
        if job.format == WANDB:
            return exit_status(stored_ending(factory, job.job_id))
        return None

    def line_kinds_of(self, job_id: str, reader: MetricsReader) -> tuple[LineFileKind, ...]:
        """Its line files, its hosts' system files, and what its tool logs beside
        metrics (after `metrics_kinds` in the same sync)."""
        with self._guard:
            tool_kinds = self._tool_kinds.get(job_id, ())
        if self.host_files is None:
            return (*self.line_kinds, *tool_kinds)
        return (*self.line_kinds, *self.host_files.kinds(job_id, reader), *tool_kinds)

    def file_names(self, job_id: str, listing: Iterable[str] | None = None) -> tuple[str, ...]:
        """The names of every file of the job whose change is worth a sync (status file
        aside); a TensorBoard run's event files from `listing` (its directory's, just
        made) when given, else as its last sync listed them."""
        with self._guard:
            format = self._formats.get(job_id)
            listed = self._event_files.get(job_id, ())
            named = self._files.get(job_id)
        suffixes = list(self.watched_suffixes)
        if format == "verl_file":
            suffixes.append(VERL_FILE_SUFFIX)
        if self.host_files is not None:
            suffixes += self.host_files.suffixes(job_id)
        names = [job_id + suffix for suffix in suffixes]
        if named is not None:  # and a database's write-ahead log, where its rows land first
            names += [named, f"{named}-wal"] if format == TRACKIO else [named]
        if format in LISTED:
            found = listed if listing is None else sorted(filter(LISTED[format], listing))
            names += found[:MAX_EVENT_FILES]
        return tuple(names)

    def format_of(self, job_id: str) -> str | None:
        with self._guard:
            return self._formats.get(job_id)

    def forget(self, job_id: str) -> None:
        if self.host_files is not None:
            self.host_files.forget(job_id)
        with self._guard:
            self._formats.pop(job_id, None)
            self._event_files.pop(job_id, None)
            self._files.pop(job_id, None)
            self._tool_kinds.pop(job_id, None)
            self._run_statuses.pop(job_id, None)


def _listed_files(format: str, reader: MetricsReader) -> list[str]:
    """A W&B run directory's transaction logs; a TensorBoard run directory's event
    files, and those of its subdirectories (torch's and tensorboardX's `add_hparams`
    write the run's hparams into one)."""
    if format == WANDB:
        return [name for name in reader.list_names(RUN_FILE_PREFIX) if is_run_file(name)]
    names = [name for name in reader.list_names("events.out") if is_event_file(name)]
    for directory in reader.list_directories()[:MAX_SUBDIRECTORIES]:
        listed = reader.list_names("events.out", under=directory)
        names += [f"{directory}/{name}" for name in listed if is_event_file(name)]
    return names
