"""Which jobs exist: discovered from the metrics directory or registered (local dir or SSH),
and the reader that reads a job's files.

Helpers only add/flush; the caller (route or sync service) owns the transaction.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from sqlalchemy import CursorResult, delete, select
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import validate_job_id
from training_platform.errors import InvalidSourceError, JobConflictError
from training_platform.ingest.formats.mlflow_files import check_run_id, is_file_store, store_root
from training_platform.ingest.formats.mlflow_store import check_tracking_uri
from training_platform.ingest.formats.run_discovery import find_tool_runs
from training_platform.ingest.formats.trackio_db import database_name
from training_platform.ingest.host_names import check_ssh_host
from training_platform.ingest.job_kinds import FORMATS, MLFLOW, TRACKIO
from training_platform.ingest.no_files_reader import NoFilesReader
from training_platform.ingest.persister import ensure_sync_state
from training_platform.ingest.readers import LocalMetricsReader, MetricsReader, discover_job_ids
from training_platform.ingest.rollout_files import RolloutSource, SSHRolloutSource, local_source
from training_platform.ingest.run_file import store_run_about
from training_platform.ingest.ssh import SSHTarget, resolve_key_path
from training_platform.ingest.ssh_reader import SSHMetricsReader
from training_platform.settings import Settings
from training_platform.store.database import dialect_insert
from training_platform.store.models import DeletedJob, Job

_FILE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,254}")


@dataclass(frozen=True)
class SSHSource:
    host: str
    port: int
    username: str
    key_path: str
    remote_dir: str
    remote_rollout_dir: str | None = None  # verl's rollout dumps on that host


def discover_jobs(session: Session, metrics_dir: Path) -> list[str]:
    """Register every `{job_id}_metrics.jsonl` in `metrics_dir` not known yet.

    Returns the ids added. A job registered under the same id elsewhere keeps
    its registration (first come, first served; never silently re-pointed). A
    job deleted through the API stays deleted even while its file still grows
    (its tombstone in `deleted_jobs`), until it is registered again.
    """
    if not metrics_dir.is_dir():
        return []
    directory = str(metrics_dir.resolve())
    known = set(session.scalars(select(Job.job_id)))
    known.update(session.scalars(select(DeletedJob.job_id)))
    added = [job_id for job_id in discover_job_ids(metrics_dir) if job_id not in known]
    now = time.time()  # one discovery, one time: the jobs list orders by it, then by id
    for job_id in added:
        _add_discovered(session, job_id, directory, "platform", now)
    for run in find_tool_runs(metrics_dir.resolve()):
        if run.job_id in known or run.job_id in added:
            continue
        if _add_discovered(session, run.job_id, str(run.directory), run.format, now):
            store_run_about(session, run.job_id, project=run.project, name=run.name)
            added.append(run.job_id)
    return added


def _add_discovered(session: Session, job_id: str, directory: str, format: str, now: float) -> bool:
    """Insert a discovered job unless a concurrent discovery did; True when added."""
    inserted = session.execute(
        dialect_insert(session)(Job.__table__)
        .values(
            job_id=job_id,
            source="local",
            discovered=True,
            metrics_dir=directory,
            status="pending",
            anomaly_detected=False,
            created_at=now,
            format=format,
        )
        .on_conflict_do_nothing(index_elements=["job_id"])
    )
    ensure_sync_state(session, job_id)
    return bool(cast(CursorResult[Any], inserted).rowcount)


def register_job(
    session: Session,
    settings: Settings,
    *,
    job_id: str,
    metrics_dir: str | None = None,
    ssh: SSHSource | None = None,
    rollout_dir: str | None = None,
    format: str = "platform",
    file: str | None = None,
    project: str | None = None,
    run: str | None = None,
    tracking_uri: str | None = None,
) -> tuple[Job, bool]:
    """Register a job; returns (job, created). Same source again is a no-op.

    An MLflow run (format "mlflow") is `run` (its run id) and `tracking_uri` (a
    tracking database, a file store or a tracking server), with no directory
    (`_register_tracked`), or `ssh` (a file store on an SSH host, `remote_dir` its
    root: `_register_remote_store`).

    `file`: verl's file logger's file when it is not `{job_id}.jsonl` (a name
    in the directory). `project` and `run`: a Trackio run (format "trackio",
    `metrics_dir` Trackio's directory). `format`: whose files (`jobs.format`):
    "platform" (the callback's), "verl_file" (verl's file logger), "tensorboard"
    (the event files of the run directory) or "trackio"; ingest/formats/.

    Exactly one of `metrics_dir` and `ssh` must be given; `rollout_dir` (verl's
    rollout dumps, `ingest/rollouts.py`) only with `metrics_dir`: an SSH job
    names its own in `ssh.remote_rollout_dir`. The rollout directory may not
    exist yet (verl makes it at its first dump). Raises `InvalidSourceError`
    for a directory outside `settings.allowed_job_roots`, a missing metrics
    directory, a rollout path that is not a directory, an SSH host that is
    neither a host name nor an address or a key outside the key dir,
    `JobConflictError` when the id is taken by a different source.
    """
    validate_job_id(job_id)
    if format == MLFLOW or tracking_uri is not None:
        if (metrics_dir, rollout_dir, file, project) != (None,) * 4 or format != MLFLOW:
            raise InvalidSourceError(
                "an MLflow run is 'run_id' and either 'tracking_uri' or 'ssh' (a file store "
                "on an SSH host), with format mlflow"
            )
        if ssh is not None:
            return _register_remote_store(session, settings, job_id, ssh, tracking_uri, run)
        return _register_tracked(session, settings, job_id, tracking_uri, run)
    if (metrics_dir is None) == (ssh is None):
        raise InvalidSourceError("give exactly one of 'metrics_dir' and 'ssh'")
    if rollout_dir is not None and ssh is not None:
        raise InvalidSourceError("an SSH job's rollout directory is 'ssh.remote_rollout_dir'")
    if format not in FORMATS:
        raise InvalidSourceError(f"unknown format {format!r}: one of {', '.join(FORMATS)}")
    if format == TRACKIO:
        if ssh is not None:
            raise InvalidSourceError("a Trackio database is read on the server's machine only")
        file, run = _trackio_source(project, run, file)
    elif project is not None or run is not None:
        raise InvalidSourceError("'project' and 'run' name a Trackio run (format trackio)")
    elif file is not None and (format != "verl_file" or not _FILE_NAME.fullmatch(file)):
        raise InvalidSourceError(
            "'file' names verl's file logger's file in the directory (a name, no path)"
            if format == "verl_file"
            else f"'file' is for format verl_file; {format!r} files are named by the tool"
        )
    candidate = Job(
        job_id=job_id,
        discovered=False,
        status="pending",
        anomaly_detected=False,
        format=format,
        file=file,
        run=run,
    )
    if metrics_dir is not None:
        directory = allowed_directory(metrics_dir, "metrics_dir", settings)
        if not directory.is_dir():
            raise InvalidSourceError(f"metrics_dir {metrics_dir!r} is not a directory")
        candidate.source, candidate.metrics_dir = "local", str(directory)
        if rollout_dir is not None:
            rollouts = allowed_directory(rollout_dir, "rollout_dir", settings)
            if rollouts.exists() and not rollouts.is_dir():
                raise InvalidSourceError(f"rollout_dir {rollout_dir!r} is not a directory")
            candidate.rollout_dir = str(rollouts)
    else:
        assert ssh is not None
        _set_ssh_source(candidate, ssh, settings)

    job, created = _add_registered(session, candidate)
    if created and format == TRACKIO:  # shown as Trackio shows it, until a user renames it
        store_run_about(session, job_id, project=project, name=run)
    return job, created


def _register_tracked(
    session: Session, settings: Settings, job_id: str, tracking_uri: str | None, run: str | None
) -> tuple[Job, bool]:
    """An MLflow run: read from its tracking database, file store or tracking server,
    polled, no directory of its own (source "tracking"). A file store must be a
    directory the settings let jobs live in; it is kept as its resolved file: URI."""
    if not tracking_uri or not run:
        raise InvalidSourceError(
            "format mlflow needs 'tracking_uri' and 'run_id' ('ssh' and 'run_id' for a "
            "file store on an SSH host)"
        )
    uri = check_tracking_uri(tracking_uri)
    if is_file_store(uri):
        root = allowed_directory(store_root(uri), "tracking_uri", settings)
        if not root.is_dir():
            raise InvalidSourceError(f"tracking_uri {tracking_uri!r}: no such directory")
        uri, run = root.as_uri(), check_run_id(run)
    candidate = Job(
        job_id=job_id, discovered=False, status="pending", anomaly_detected=False,
        format=MLFLOW, source="tracking", tracking_uri=uri, run=run,
    )  # fmt: skip
    return _add_registered(session, candidate)


def _register_remote_store(
    session: Session,
    settings: Settings,
    job_id: str,
    ssh: SSHSource,
    tracking_uri: str | None,
    run: str | None,
) -> tuple[Job, bool]:
    """An MLflow run in a file store on an SSH host: `ssh.remote_dir` is the store
    (`mlruns`), read over SFTP (`mlflow_sftp.py`), polled as every SSH job. Whether the
    run is there is said on the job at its first sync (the host may be down now)."""
    if tracking_uri is not None or ssh.remote_rollout_dir is not None:
        raise InvalidSourceError(
            "an MLflow file store on an SSH host is 'ssh' (its 'remote_dir' the store, "
            "mlruns) and 'run_id', without 'tracking_uri' or 'ssh.remote_rollout_dir'"
        )
    if not run:
        raise InvalidSourceError("format mlflow needs 'run_id'")
    candidate = Job(
        job_id=job_id, discovered=False, status="pending", anomaly_detected=False,
        format=MLFLOW, run=check_run_id(run),
    )  # fmt: skip
    _set_ssh_source(candidate, ssh, settings)
    return _add_registered(session, candidate)


def _set_ssh_source(candidate: Job, ssh: SSHSource, settings: Settings) -> None:
    """`candidate`'s source: `ssh`, its host and key checked (`InvalidSourceError`)."""
    try:
        host = check_ssh_host(ssh.host)
    except ValueError as exc:
        raise InvalidSourceError(f"ssh.host: {exc}") from None
    key = resolve_key_path(ssh.key_path, settings.ssh_key_dir)
    candidate.source = "ssh"
    candidate.ssh_host, candidate.ssh_port = host, ssh.port
    candidate.ssh_username, candidate.ssh_key_path = ssh.username, str(key)
    candidate.ssh_remote_dir = ssh.remote_dir
    candidate.rollout_dir = ssh.remote_rollout_dir


def _add_registered(session: Session, candidate: Job) -> tuple[Job, bool]:
    """`candidate` added, or the job already registered from the same source."""
    job_id = candidate.job_id
    existing = session.get(Job, job_id)
    if existing is not None:
        if _same_source(existing, candidate):
            return existing, False
        raise JobConflictError(f"job {job_id!r} already exists with a different source")
    candidate.created_at = time.time()
    # Registering is the explicit "bring it back" for a deleted job.
    session.execute(delete(DeletedJob).where(DeletedJob.job_id == job_id))
    session.add(candidate)
    session.flush()
    ensure_sync_state(session, job_id)
    return candidate, True


def _trackio_source(project: str | None, run: str | None, file: str | None) -> tuple[str, str]:
    """(database file, run) of a Trackio job: its project's database and its run name."""
    if file is not None:
        raise InvalidSourceError("a Trackio run is named by 'project' and 'run', not 'file'")
    if not project or not run:
        raise InvalidSourceError("format trackio needs 'project' and 'run' (Trackio's names)")
    if not _FILE_NAME.fullmatch(database_name(project)):
        raise InvalidSourceError(f"project {project!r} is not a Trackio project name")
    return database_name(project), run


def allowed_directory(text: str, field: str, settings: Settings) -> Path:
    """`text` resolved (symlinks and ".." included), if the settings let jobs live there.

    With `settings.allowed_job_roots` empty any directory is allowed (the
    default); else it must lie under one of them or under the metrics
    directory. Checked before the path is looked at any further, so a refusal
    never tells what exists outside the roots, nor where a symlink leads.
    """
    try:
        resolved = Path(text).expanduser().resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, before Python 3.13
        raise InvalidSourceError(f"{field} {text!r} cannot be resolved (a symlink loop?)") from None
    roots = settings.allowed_job_roots
    if not roots:
        return resolved
    allowed = (*roots, settings.metrics_dir.expanduser().resolve())
    if not any(resolved.is_relative_to(root) for root in allowed):
        raise InvalidSourceError(
            f"{field} {text!r} is outside the directories PLATFORM_ALLOWED_JOB_ROOTS allows "
            "(symlinks resolved)"
        )
    return resolved


def _same_source(a: Job, b: Job) -> bool:
    fields = (
        "source", "metrics_dir", "ssh_host", "ssh_port", "ssh_username", "ssh_key_path",
        "ssh_remote_dir", "rollout_dir", "format", "file", "run", "tracking_uri",
    )  # fmt: skip
    return all(getattr(a, name) == getattr(b, name) for name in fields)


def ssh_target(job: Job, settings: Settings) -> SSHTarget:
    assert job.ssh_host and job.ssh_username and job.ssh_key_path
    extra = (settings.ssh_known_hosts,) if settings.ssh_known_hosts else ()
    return SSHTarget(
        host=job.ssh_host,
        port=job.ssh_port or 22,
        username=job.ssh_username,
        key_path=Path(job.ssh_key_path),
        known_hosts_files=extra,
        timeout=settings.ssh_timeout,
    )


def make_reader(job: Job, settings: Settings) -> MetricsReader:
    """The reader for a job's files, local or over SSH (none for a tracking database)."""
    limits = {"max_line_bytes": settings.max_line_bytes, "max_bytes": settings.sync_batch_bytes}
    follow = settings.follow_symlinks
    if job.source == "tracking":
        return NoFilesReader(job.job_id, **limits)
    if job.source == "ssh":
        assert job.ssh_remote_dir is not None
        return SSHMetricsReader(
            job.job_id,
            job.ssh_remote_dir,
            ssh_target(job, settings),
            follow_symlinks=follow,
            **limits,
        )
    assert job.metrics_dir is not None
    return LocalMetricsReader(job.job_id, job.metrics_dir, follow_symlinks=follow, **limits)


def rollout_source(job: Job, reader: MetricsReader, settings: Settings) -> RolloutSource | None:
    """Where the job's rollout dumps are read (`ingest/rollouts.py`), or None.

    A local job: its registered rollout directory, else `{job_id}_rollouts/`
    next to its metrics file. An SSH job: its `remote_rollout_dir` only, read
    over `reader`'s connection.
    """
    follow = settings.follow_symlinks
    if isinstance(reader, SSHMetricsReader):
        if job.rollout_dir is None:
            return None
        return SSHRolloutSource(reader.connection, job.rollout_dir, follow_symlinks=follow)
    return local_source(job.job_id, job.metrics_dir, job.rollout_dir, follow_symlinks=follow)
