"""Jobs: discovered from the metrics directory or registered (local dir or SSH).

Query helpers only add/flush; the caller (route or sync service) owns the
transaction.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal

from sqlalchemy import ColumnElement, Select, Subquery, case, delete, func, or_, select, true
from sqlalchemy.orm import Session

from training_platform.callbacks.wire import validate_job_id
from training_platform.core.database import dialect_insert
from training_platform.core.metrics_persister import ensure_sync_state
from training_platform.core.metrics_reader import (
    LocalMetricsReader,
    MetricsReader,
    SSHMetricsReader,
    discover_job_ids,
)
from training_platform.core.models import Anomaly, DeletedJob, Job, SyncState, TrainingMetric
from training_platform.core.rollups import MetricRollup
from training_platform.core.ssh import SSHTarget, resolve_key_path
from training_platform.errors import InvalidSourceError, JobConflictError, JobNotFoundError
from training_platform.settings import Settings


@dataclass(frozen=True)
class SSHSource:
    host: str
    port: int
    username: str
    key_path: str
    remote_dir: str


Health = Literal["ok", "warning", "critical"]
# The status the live pipeline (core/live.py) gives a "running" job gone silent.
STALLED: Final = "stalled"


@dataclass(frozen=True)
class JobSummary:
    """A job with the figures the jobs list shows next to it."""

    job: Job
    metrics_count: int
    latest_step: int | None
    anomaly_count: int
    sync: SyncState | None
    critical_count: int = 0
    warning_count: int = 0

    @property
    def health(self) -> Health:
        return job_health(
            critical_count=self.critical_count,
            warning_count=self.warning_count,
            stalled=self.job.status == STALLED,
            trainer_flagged=bool(self.job.anomaly_detected),
        )


def job_health(
    *, critical_count: int, warning_count: int, stalled: bool, trainer_flagged: bool
) -> Health:
    """The job's verdict at a glance (docs/platform.md, "Health").

    `critical`: any critical anomaly stored for the run, from either source.
    `warning`: any warning anomaly, a stalled run, or a status file that says
    `anomaly_detected`. `ok` otherwise; `info` anomalies never count. Every
    anomaly of the run counts, not only recent ones: a run that blew up and
    recovered is still worth a look, and anomalies have no "resolved" state.
    """
    if critical_count:
        return "critical"
    if warning_count or stalled or trainer_flagged:
        return "warning"
    return "ok"


def get_job(session: Session, job_id: str) -> Job:
    job = session.get(Job, validate_job_id(job_id))
    if job is None:
        raise JobNotFoundError(f"job {job_id!r} not found")
    return job


def summarize_jobs(
    session: Session, job_id: str | None = None, *, health: Health | None = None
) -> list[JobSummary]:
    """Jobs (all, or one) with their metric count, latest step, anomalies and health.

    One query whatever the number of jobs: the per-job figures come from
    grouped subqueries, so the jobs list costs the same for 5 jobs or 500.
    `health` keeps only the jobs with that verdict.
    """
    summaries = _summaries(session, None if job_id is None else [job_id], ORDERS["created"])
    if health is not None:
        summaries = [summary for summary in summaries if summary.health == health]
    return summaries


JobOrder = Literal["created", "updated"]
# Newest first; the job id breaks ties, so pages never overlap or skip a job.
ORDERS: Final[dict[str, tuple[Any, ...]]] = {
    "created": (Job.created_at.desc(), Job.job_id),
    "updated": (func.coalesce(Job.updated_at, Job.created_at).desc(), Job.job_id),
}


def page_jobs(
    session: Session,
    *,
    limit: int,
    offset: int = 0,
    health: Health | None = None,
    order: JobOrder = "created",
) -> tuple[list[JobSummary], int]:
    """One page of the jobs list and the number of jobs in the whole list.

    Three statements whatever the number of jobs: the count, the page's ids
    (jobs table only, plus the anomaly counts when filtering by health), and
    the summaries of just that page: the per-job metric figures are grouped
    over the page's jobs, not over every row of every run.
    """
    ids = select(Job.job_id)
    if health is not None:
        anomalies = _anomaly_counts().subquery()
        ids = ids.outerjoin(anomalies, anomalies.c.job_id == Job.job_id).where(
            _health_sql(anomalies) == health
        )
    total = session.scalar(select(func.count()).select_from(ids.subquery())) or 0
    page = list(session.scalars(ids.order_by(*ORDERS[order]).limit(limit).offset(offset)))
    if not page:
        return [], total
    return _summaries(session, page, ORDERS[order]), total


def _anomaly_counts() -> Select[str, int, Any, Any]:
    return select(
        Anomaly.job_id,
        func.count().label("n"),
        func.sum(case((Anomaly.severity == "critical", 1), else_=0)).label("critical"),
        func.sum(case((Anomaly.severity == "warning", 1), else_=0)).label("warning"),
    ).group_by(Anomaly.job_id)


def _health_sql(anomalies: Subquery) -> ColumnElement[str]:
    """`job_health` as SQL, so a health filter can page in the database."""
    return case(
        (func.coalesce(anomalies.c.critical, 0) > 0, "critical"),
        (
            or_(
                func.coalesce(anomalies.c.warning, 0) > 0,
                Job.status == STALLED,
                Job.anomaly_detected == true(),
            ),
            "warning",
        ),
        else_="ok",
    )


def _summaries(
    session: Session, job_ids: list[str] | None, order: tuple[Any, ...]
) -> list[JobSummary]:
    """Summaries of `job_ids` (None: every job), in `order`, in one query."""
    metrics = select(
        TrainingMetric.job_id,
        func.count().label("n"),
        func.max(TrainingMetric.step).label("latest"),
    ).group_by(TrainingMetric.job_id)
    anomaly_counts = _anomaly_counts()
    if job_ids is not None:
        metrics = metrics.where(TrainingMetric.job_id.in_(job_ids))
        anomaly_counts = anomaly_counts.where(Anomaly.job_id.in_(job_ids))
    grouped, anomalies = metrics.subquery(), anomaly_counts.subquery()
    query = (
        select(
            Job,
            grouped.c.n,
            grouped.c.latest,
            anomalies.c.n,
            anomalies.c.critical,
            anomalies.c.warning,
            SyncState,
        )
        .outerjoin(grouped, grouped.c.job_id == Job.job_id)
        .outerjoin(anomalies, anomalies.c.job_id == Job.job_id)
        .outerjoin(SyncState, SyncState.job_id == Job.job_id)
        .order_by(*order)
    )
    if job_ids is not None:
        query = query.where(Job.job_id.in_(job_ids))
    return [
        JobSummary(job, n or 0, latest, n_anomalies or 0, sync, int(critical or 0), int(warn or 0))
        for job, n, latest, n_anomalies, critical, warn, sync in session.execute(query)
    ]


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
    now = time.time()
    for job_id in added:
        session.execute(
            dialect_insert(session)(Job.__table__)
            .values(
                job_id=job_id,
                source="local",
                discovered=True,
                metrics_dir=directory,
                status="pending",
                anomaly_detected=False,
                created_at=now,
            )
            .on_conflict_do_nothing(index_elements=["job_id"])
        )
        ensure_sync_state(session, job_id)
    return added


def register_job(
    session: Session,
    settings: Settings,
    *,
    job_id: str,
    metrics_dir: str | None = None,
    ssh: SSHSource | None = None,
) -> tuple[Job, bool]:
    """Register a job; returns (job, created). Same source again is a no-op.

    Exactly one of `metrics_dir` and `ssh` must be given. Raises
    `InvalidSourceError` for a missing directory or a key outside the key dir,
    `JobConflictError` when the id is taken by a different source.
    """
    validate_job_id(job_id)
    if (metrics_dir is None) == (ssh is None):
        raise InvalidSourceError("give exactly one of 'metrics_dir' and 'ssh'")
    candidate = Job(job_id=job_id, discovered=False, status="pending", anomaly_detected=False)
    if metrics_dir is not None:
        directory = Path(metrics_dir).expanduser()
        if not directory.is_dir():
            raise InvalidSourceError(f"metrics_dir {metrics_dir!r} is not a directory")
        candidate.source, candidate.metrics_dir = "local", str(directory.resolve())
    else:
        assert ssh is not None
        key = resolve_key_path(ssh.key_path, settings.ssh_key_dir)
        candidate.source = "ssh"
        candidate.ssh_host, candidate.ssh_port = ssh.host, ssh.port
        candidate.ssh_username, candidate.ssh_key_path = ssh.username, str(key)
        candidate.ssh_remote_dir = ssh.remote_dir

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


def delete_job(session: Session, job_id: str) -> None:
    """Delete a job's rows, rollups, anomalies and sync state, and leave a tombstone.

    The job's files are never touched. The tombstone keeps discovery from
    registering the job again while its file is still there (or still being
    written). Raises `JobNotFoundError`. Only adds/flushes: the caller commits,
    holding the job's sync lock so no sync of it is half-done meanwhile.

    The child tables are emptied explicitly, not left to ON DELETE CASCADE
    alone: SQLite enforces foreign keys only on connections that ask for it.
    """
    get_job(session, job_id)
    for table in (Anomaly, MetricRollup, TrainingMetric, SyncState):
        session.execute(
            delete(table).where(table.job_id == job_id).execution_options(synchronize_session=False)
        )
    session.execute(
        delete(Job).where(Job.job_id == job_id).execution_options(synchronize_session=False)
    )
    session.execute(
        dialect_insert(session)(DeletedJob.__table__)
        .values(job_id=job_id, deleted_at=time.time())
        .on_conflict_do_update(index_elements=["job_id"], set_={"deleted_at": time.time()})
    )
    session.expunge_all()


def _same_source(a: Job, b: Job) -> bool:
    fields = (
        "source", "metrics_dir", "ssh_host", "ssh_port", "ssh_username", "ssh_key_path",
        "ssh_remote_dir",
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
    """The reader for a job's files, local or over SSH."""
    limits = {"max_line_bytes": settings.max_line_bytes, "max_bytes": settings.sync_batch_bytes}
    follow = settings.follow_symlinks
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
