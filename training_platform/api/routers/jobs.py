"""`/api/jobs`: list, inspect and register training runs."""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from fastapi import APIRouter, Query, Request, Response, status
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from training_platform.api.deps import KnownJobId, SessionDep, SettingsDep, SyncServiceDep
from training_platform.api.schemas import (
    ErrorOut,
    IngesterOut,
    JobCreate,
    JobList,
    JobOut,
    JobPatch,
    RunOut,
    SSHSourceOut,
    SyncStateOut,
)
from training_platform.errors import HostKeyError, InvalidParameterError, InvalidSourceError
from training_platform.ingest.formats.mlflow_store import shown_url
from training_platform.ingest.registry import SSHSource, register_job, ssh_target
from training_platform.ingest.ssh import check_ssh_connection
from training_platform.ingest.sync_service import SyncService
from training_platform.live.hub import LiveHub
from training_platform.store.job_flags import anomaly_of
from training_platform.store.jobs import (
    Health,
    JobOrder,
    JobSummary,
    delete_job,
    get_job,
    page_jobs,
    summarize_jobs,
)
from training_platform.store.leases import Ingester, ingesters_of
from training_platform.store.models import Job, RunFile
from training_platform.store.run_meta import (
    USER_TAGS,
    clean_tags,
    replace_tags,
    shown_name,
    shown_tags,
)
from training_platform.store.storable import storable_text

JobStatus = Literal["pending", "running", "completed", "failed", "stopped", "stalled"]

router = APIRouter(prefix="/jobs", tags=["jobs"])
_SOURCES: dict[str, Literal["ssh", "tracking"]] = {"ssh": "ssh", "tracking": "tracking"}


def job_out(summary: JobSummary, ingester: Ingester | None = None) -> JobOut:
    job = summary.job
    ssh = None
    if job.source == "ssh":
        ssh = SSHSourceOut(
            host=job.ssh_host or "",
            port=job.ssh_port or 22,
            username=job.ssh_username or "",
            key_path=job.ssh_key_path or "",
            remote_dir=job.ssh_remote_dir or "",
            remote_rollout_dir=job.rollout_dir,
        )
    anomaly = anomaly_of(job)  # the trainer's flag or a critical incident
    return JobOut(
        job_id=job.job_id,
        source=_SOURCES.get(job.source, "local"),
        discovered=job.discovered,
        metrics_dir=job.metrics_dir,
        ssh=ssh,
        rollout_dir=job.rollout_dir,
        status=job.status,
        current_step=job.current_step,
        total_steps=job.total_steps,
        anomaly_detected=anomaly[0],
        anomaly_reason=anomaly[1],
        trainer_anomaly_detected=bool(job.anomaly_detected),
        has_anomaly=anomaly[0] or summary.anomaly_count > 0,
        anomaly_count=summary.anomaly_count,
        health=summary.health,
        metrics_count=summary.metrics_count,
        latest_step=summary.latest_step,
        started_at=job.started_at,
        updated_at=job.updated_at,
        created_at=job.created_at,
        last_synced_at=job.last_synced_at,
        last_sync_error=job.last_sync_error,
        sync=SyncStateOut.model_validate(summary.sync) if summary.sync else None,
        ingested_by=None if ingester is None else IngesterOut(**vars(ingester)),
        format=job.format,
        file=job.file,
        source_run=job.run,
        tracking_uri=None if job.tracking_uri is None else shown_url(job.tracking_uri),
        **run_fields(job, summary.run),
    )


def run_fields(job: Job, run: RunFile | None) -> dict[str, Any]:
    """The job's project, name, tags, notes, config and run file (docs/contract.md)."""
    about = (run.about or {}) if run is not None else {}
    return {
        "project": run.project if run is not None else None,
        "name": shown_name(job, run),
        "tags": shown_tags(job, run),
        "notes": job.notes,
        "config": run.config if run is not None else None,
        "run": None
        if run is None
        else RunOut(
            framework=about.get("framework"),
            git=about.get("git"),
            host=about.get("host"),
            command=about.get("command"),
            started_at=about.get("started_at"),
            config_dropped=about.get("config_dropped"),
            file_error=run.file_error,
            file_refusals=run.file_refusals or 0,
        ),
    }


DEFAULT_PAGE: Final = 100
MAX_PAGE: Final = 500
TOTAL_HEADER: Final = "X-Total-Count"


@router.get("", response_model=JobList, summary="List jobs")
def list_jobs_route(
    response: Response,
    session: SessionDep,
    sync_service: SyncServiceDep,
    health: Annotated[
        Health | None, Query(description="Only the jobs with this health verdict.")
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_PAGE, description="Jobs per page (at most 500).")
    ] = DEFAULT_PAGE,
    offset: Annotated[
        int, Query(ge=0, le=2**31, description="Jobs to skip: the page starts after them.")
    ] = 0,
    order: Annotated[
        JobOrder,
        Query(
            description="created: newest registration first; updated: most recent "
            "status-file update first (registration time for a job without one)."
        ),
    ] = "created",
    status: Annotated[
        list[JobStatus] | None, Query(description="Only jobs in one of these statuses.")
    ] = None,
    project: Annotated[
        str | None,
        Query(min_length=1, max_length=256, description="Only the jobs of this project."),
    ] = None,
    tag: Annotated[
        list[str] | None,
        Query(description="Only jobs with every one of these tags (1-64 characters each)."),
    ] = None,
    q: Annotated[
        str | None,
        Query(
            min_length=1,
            max_length=256,
            description="Case-insensitive substring of the job id or its name.",
        ),
    ] = None,
) -> JobList:
    """Known jobs, one page at a time: discovered in `PLATFORM_METRICS_DIR` or registered.

    The `X-Total-Count` header tells how many jobs the whole list holds (with
    `health`, how many have that verdict); ties in the order are broken by job
    id, so consecutive pages neither overlap nor skip a job. The metrics
    directory is scanned on each call, so a job whose files just appeared is
    listed even before the background poller has seen it.
    """
    sync_service.discover()
    if tag is not None and any(not 1 <= len(one) <= 64 for one in tag):
        raise InvalidParameterError("tag: each tag is 1 to 64 characters")
    summaries, total = page_jobs(
        session, limit=limit, offset=offset, health=health, order=order,
        statuses=status or (), project=project, tags=tag or (), query=q,
    )  # fmt: skip
    response.headers[TOTAL_HEADER] = str(total)
    holders = ingesters_of(session, [summary.job.job_id for summary in summaries])
    return JobList(jobs=[job_out(each, holders.get(each.job.job_id)) for each in summaries])


@router.get(
    "/{job_id}",
    response_model=JobOut,
    summary="Get one job",
    responses={404: {"model": ErrorOut, "description": "Unknown job"}},
)
def get_job_route(job_id: KnownJobId, session: SessionDep) -> JobOut:
    """Status (from the trainer's status file), progress, anomaly flags and sync counters."""
    return job_out(summarize_jobs(session, job_id)[0], ingesters_of(session, [job_id]).get(job_id))


@router.patch(
    "/{job_id}",
    response_model=JobOut,
    summary="Name, tag or annotate a job",
    responses={404: {"model": ErrorOut, "description": "Unknown job"}},
)
def patch_job_route(job_id: KnownJobId, body: JobPatch, session: SessionDep) -> JobOut:
    """Set `name`, `tags` or `notes` (docs/contract.md, PATCH); a field left out is
    unchanged, null gives `name`/`tags` back to the run file and clears `notes`.
    Stored on the platform side: the run's own file is never edited."""
    job = get_job(session, job_id)
    given = body.model_fields_set
    if "name" in given:
        job.name = None if body.name is None else storable_text(body.name.strip(), 256) or None
    if "notes" in given:
        job.notes = None if body.notes is None else storable_text(body.notes)
    if "tags" in given:
        job.tags = None if body.tags is None else clean_tags(body.tags)
        replace_tags(session, job_id, USER_TAGS, job.tags or [])
    session.commit()
    return job_out(summarize_jobs(session, job_id)[0])


@router.post(
    "",
    response_model=JobOut,
    status_code=status.HTTP_201_CREATED,
    summary="Register a job",
    responses={
        200: {"model": JobOut, "description": "Already registered with the same source"},
        409: {"model": ErrorOut, "description": "The id is taken by a different source"},
        422: {
            "model": ErrorOut,
            "description": "Bad id, missing directory, a directory outside "
            "PLATFORM_ALLOWED_JOB_ROOTS, key outside the key directory, an SSH host that "
            "is not a host name or address, or one whose key is unknown or changed",
        },
    },
)
def register_job_route(
    body: JobCreate,
    request: Request,
    response: Response,
    session: SessionDep,
    settings: SettingsDep,
) -> JobOut:
    """Register a job whose files are in a local directory or on an SSH host.

    `rollout_dir` (or `ssh.remote_rollout_dir`) points at verl's rollout dumps,
    read as the job's samples.

    SSH hosts are checked once here: a host missing from `known_hosts` (or
    presenting a changed key) is refused. A host that is merely unreachable is
    registered; its sync errors show in `last_sync_error`.
    """
    ssh = None
    if body.ssh is not None:
        ssh = SSHSource(**body.ssh.model_dump())
    job, created = register_job(
        session,
        settings,
        job_id=body.job_id,
        metrics_dir=body.metrics_dir,
        ssh=ssh,
        rollout_dir=body.rollout_dir,
        format=body.format,
        file=body.file,
        project=body.project,
        run=body.run if body.format != "mlflow" else body.run_id,
        tracking_uri=body.tracking_uri,
    )
    if created and ssh is not None:
        try:
            check_ssh_connection(ssh_target(job, settings))
        except HostKeyError as exc:
            session.rollback()
            raise InvalidSourceError(str(exc)) from exc
        except Exception as exc:  # unreachable now; the poller will retry
            job.last_sync_error = str(exc)[:2000]
    session.commit()
    hub: LiveHub | None = getattr(request.app.state, "live_hub", None)
    if created and hub is not None:
        hub.jobs_changed()  # its background rounds keep the jobs list in memory
    if not created:
        response.status_code = status.HTTP_200_OK
    return job_out(summarize_jobs(session, job.job_id)[0])


@router.delete(
    "/{job_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    summary="Delete a job",
    responses={404: {"model": ErrorOut, "description": "Unknown job"}},
)
async def delete_job_route(
    job_id: KnownJobId, request: Request, session: SessionDep, sync_service: SyncServiceDep
) -> Response:
    """Forget a run: its rows, rollups, anomalies and sync state go; its files stay.

    A deleted job is not discovered again, even while its trainer still
    writes: register it (`POST /api/jobs`) to bring it back, re-ingested from
    the start of its file. Its live subscribers are disconnected.
    """
    await run_in_threadpool(_delete_under_lock, session, sync_service, job_id)
    hub: LiveHub | None = getattr(request.app.state, "live_hub", None)
    if hub is not None:
        hub.forget_job(job_id)  # on the event loop, where subscribers live
    return Response(status_code=status.HTTP_204_NO_CONTENT)


def _delete_under_lock(session: Session, sync_service: SyncService, job_id: str) -> None:
    # Under the job's sync lock: no sync of it is half-done while its rows go,
    # and the next one finds the job gone (JobNotFoundError), not a torn state.
    with sync_service.exclusive(job_id):
        delete_job(session, job_id)
        session.commit()
        sync_service.forget_job(job_id)
