"""Jobs as the API shows them: summaries, health, pages; and deleting one.

Query helpers only add/flush; the caller (route or sync service) owns the
transaction.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sqlalchemy import ColumnElement, Select, Subquery, case, delete, func, or_, select, true
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import validate_job_id
from training_platform.errors import JobNotFoundError
from training_platform.store.database import dialect_insert
from training_platform.store.models import (
    ROLLUP_LEVELS,
    STALLED,
    Anomaly,
    DeletedJob,
    Job,
    JobTag,
    MetricRollup,
    RollupColumn,
    RunFile,
    Sample,
    SamplePrompt,
    SyncState,
    SystemBlock,
    SystemLayout,
    SystemRollup,
    TrainingMetric,
)
from training_platform.store.run_meta import run_filters

Health = Literal["ok", "warning", "critical"]


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
    run: RunFile | None = None  # what its run file said (docs/contract.md, run metadata)

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


def label_jobs(session: Session, job_ids: Sequence[str]) -> dict[str, JobSummary]:
    """The jobs with their run file and health, without the per-job metric figures
    (`metrics_count` 0, `latest_step` None): what a comparison labels its runs
    with. Counting a 1M-step run's rows costs more than the whole comparison."""
    anomalies = _anomaly_counts(list(job_ids)).subquery()
    query = (
        select(Job, RunFile, anomalies.c.n, anomalies.c.critical, anomalies.c.warning)
        .outerjoin(RunFile, RunFile.job_id == Job.job_id)
        .outerjoin(anomalies, anomalies.c.job_id == Job.job_id)
        .where(Job.job_id.in_(list(job_ids)))
    )
    return {
        job.job_id: JobSummary(
            job, 0, None, n or 0, None, int(critical or 0), int(warning or 0), run
        )
        for job, run, n, critical, warning in session.execute(query)
    }


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
    statuses: Sequence[str] = (),
    project: str | None = None,
    tags: Sequence[str] = (),
    query: str | None = None,
) -> tuple[list[JobSummary], int]:
    """One page of the jobs list and the number of jobs in the whole list.

    Three statements whatever the number of jobs: the count, the page's ids
    (jobs table only, plus the anomaly counts when filtering by health), and
    the summaries of just that page: the per-job metric figures are grouped
    over the page's jobs, not over every row of every run.
    """
    ids = select(Job.job_id).where(*run_filters(project=project, tags=tags, query=query))
    if statuses:
        ids = ids.where(Job.status.in_(list(statuses)))
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


def _anomaly_counts(job_ids: list[str] | None = None) -> Select[str, int, Any, Any]:
    """Per job: its incidents (one per step and type, whichever sources found
    it, as the API lists them) and how many are critical or warnings (an
    incident takes the highest severity any source gave it)."""
    rank = func.max(
        case((Anomaly.severity == "critical", 2), (Anomaly.severity == "warning", 1), else_=0)
    )
    incidents = select(Anomaly.job_id, rank.label("rank")).group_by(
        Anomaly.job_id, Anomaly.step, Anomaly.type
    )
    if job_ids is not None:
        incidents = incidents.where(Anomaly.job_id.in_(job_ids))
    per_incident = incidents.subquery()
    return select(
        per_incident.c.job_id,
        func.count().label("n"),
        func.sum(case((per_incident.c.rank == 2, 1), else_=0)).label("critical"),
        func.sum(case((per_incident.c.rank == 1, 1), else_=0)).label("warning"),
    ).group_by(per_incident.c.job_id)


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
    """Summaries of `job_ids` (None: every job), in `order`, in one query (two
    when some job's buckets lag behind its rows)."""
    latest = (
        select(func.max(TrainingMetric.step))
        .where(TrainingMetric.job_id == Job.job_id)
        .correlate(Job)
        .scalar_subquery()
    )
    rolled = _rolled_up_figures(job_ids).subquery()
    anomalies = _anomaly_counts(job_ids).subquery()
    query = (
        select(
            Job,
            rolled.c.n,
            rolled.c.latest,
            latest,
            anomalies.c.n,
            anomalies.c.critical,
            anomalies.c.warning,
            SyncState,
            RunFile,
        )
        .outerjoin(rolled, rolled.c.job_id == Job.job_id)
        .outerjoin(anomalies, anomalies.c.job_id == Job.job_id)
        # The metrics file's counters: what the jobs list shows as the job's sync.
        .outerjoin(SyncState, (SyncState.job_id == Job.job_id) & (SyncState.kind == "metrics"))
        .outerjoin(RunFile, RunFile.job_id == Job.job_id)
        .order_by(*order)
    )
    if job_ids is not None:
        query = query.where(Job.job_id.in_(job_ids))
    found = session.execute(query).all()
    # The buckets' count is the rows' whenever they cover the newest row, as
    # ingestion keeps them (same transaction); otherwise count the rows.
    lagging = [job.job_id for job, _, rolled_latest, last, *_ in found if rolled_latest != last]
    counted = _row_counts(session, lagging) if lagging else {}
    return [
        JobSummary(
            job,
            counted.get(job.job_id, n or 0),
            last,
            n_anomalies or 0,
            sync,
            int(critical or 0),
            int(warn or 0),
            run,
        )
        for job, n, _, last, n_anomalies, critical, warn, sync, run in found
    ]


def _rolled_up_figures(job_ids: list[str] | None) -> Select[str, int, int]:
    """Per job: its rows and newest step as its top-level buckets count them (a
    bucket per ~half a million steps), where counting the rows themselves cost
    ~300 ms per million and the jobs list polls (docs/benchmarks.md, History)."""
    query = (
        select(
            MetricRollup.job_id,
            func.sum(MetricRollup.row_count).label("n"),
            func.max(MetricRollup.last_step).label("latest"),
        )
        .where(MetricRollup.level == ROLLUP_LEVELS - 1)
        .group_by(MetricRollup.job_id)
    )
    if job_ids is not None:
        query = query.where(MetricRollup.job_id.in_(job_ids))
    return query


def _row_counts(session: Session, job_ids: list[str]) -> dict[str, int]:
    rows = session.execute(
        select(TrainingMetric.job_id, func.count())
        .where(TrainingMetric.job_id.in_(job_ids))
        .group_by(TrainingMetric.job_id)
    )
    return {job_id: int(n) for job_id, n in rows}


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
    layouts = select(SystemLayout.id).where(SystemLayout.job_id == job_id).scalar_subquery()
    for by_layout in (SystemRollup, SystemBlock):
        session.execute(
            delete(by_layout)
            .where(by_layout.layout_id.in_(layouts))
            .execution_options(synchronize_session=False)
        )
    tables = (Anomaly, MetricRollup, RollupColumn, TrainingMetric, Sample, SamplePrompt, SyncState)
    for table in (*tables, SystemLayout, RunFile, JobTag):
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
