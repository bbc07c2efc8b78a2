"""`/api/compare`: several runs on one chart, and the config keys they differ in."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Response

from training_platform.api.deps import SessionDep, SettingsDep, SyncServiceDep
from training_platform.api.params import StepQuery, check_step_range, parse_fields
from training_platform.api.routers.monitoring import MAX_POINTS
from training_platform.api.schemas import ErrorOut
from training_platform.callbacks.wire.schema import validate_job_id
from training_platform.errors import InvalidParameterError, JobNotFoundError
from training_platform.history.compare import (
    MAX_COMPARED,
    XAxis,
    compare_histories,
    config_differences,
)
from training_platform.history.compare_system import split_system_fields
from training_platform.history.field_names import resolve_fields
from training_platform.history.smoothing import Smoothing
from training_platform.history.system_query import ANSWER_JSON
from training_platform.store.jobs import label_jobs
from training_platform.store.run_meta import run_files_of, shown_name

router = APIRouter(prefix="/compare", tags=["compare"])

ANSWERS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "A job in `jobs` is unknown (named)"},
    422: {
        "model": ErrorOut,
        "description": "Bad parameters (0 or over 20 jobs, runs x max_points over the "
        "server's PLATFORM_COMPARE_MAX_POINTS, ...)",
    },
}
JobsQuery = Annotated[
    str,
    Query(
        min_length=1,
        max_length=20 * 130,
        description=f"Comma-separated job ids, 1 to {MAX_COMPARED}, distinct.",
    ),
]


def compared_jobs(jobs: JobsQuery, sync_service: SyncServiceDep) -> list[str]:
    """The `jobs=` ids, checked: 422 for a bad id, a repeat or a count outside 1..20;
    404 naming every unknown one. Like `known_job_id`, it holds no pooled
    connection of the request's while discovery runs."""
    ids = [part.strip() for part in jobs.split(",") if part.strip()]
    if not 1 <= len(ids) <= MAX_COMPARED:
        raise InvalidParameterError(f"jobs: 1 to {MAX_COMPARED} job ids, got {len(ids)}")
    if len(set(ids)) != len(ids):
        raise InvalidParameterError("jobs: each job at most once")
    for job_id in ids:
        validate_job_id(job_id)
    unknown = [job_id for job_id in ids if not sync_service.is_known(job_id)]
    if len(unknown) == 1:
        raise JobNotFoundError(f"job {unknown[0]!r} not found")
    if unknown:
        raise JobNotFoundError(f"jobs not found: {', '.join(map(repr, unknown))}")
    return ids


@router.get("", summary="Runs side by side", responses=ANSWERS)
def compare_route(
    session: SessionDep,
    settings: SettingsDep,
    sync_service: SyncServiceDep,
    jobs: JobsQuery,
    fields: Annotated[
        str | None,
        Query(
            max_length=8192,
            description="Series or groups, as for /metrics (flat names too, answered "
            "under them); default all. `system` or `system.<name>` "
            "(system.gpu_utilization, ...): the run-level system series.",
        ),
    ] = None,
    max_points: Annotated[int, Query(ge=2, le=MAX_POINTS)] = 1000,
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    x: Annotated[XAxis, Query(description="step, time (seconds since start) or tokens.")] = "step",
    smoothing: Annotated[
        float, Query(ge=0, lt=1, description="EMA weight w: s = w*s + (1-w)*v; 0: none.")
    ] = 0.0,
    window: Annotated[
        int | None, Query(ge=1, le=100_000, description="Mean of the last n values instead.")
    ] = None,
) -> Response:
    """Per job, the columnar answer of `/metrics?max_points=` (min/max kept), each
    point's x on the chosen axis and, with `smoothing` or `window`, a `smoothed`
    line per series computed from the exact values when affordable, and always
    from the run's first record, so a `start_step` range continues the whole
    run's line (docs/contract.md, compare)."""
    job_ids = compared_jobs(jobs, sync_service)
    check_step_range(start_step, end_step)
    asked = len(job_ids) * max_points
    if asked > settings.compare_max_points:
        raise InvalidParameterError(
            f"max_points: {len(job_ids)} runs x {max_points} points is {asked}, over the "
            f"{settings.compare_max_points} one comparison may ask for "
            "(PLATFORM_COMPARE_MAX_POINTS): ask for fewer points or fewer runs"
        )
    if smoothing and window is not None:
        raise InvalidParameterError("give smoothing or window, not both")
    chosen = None
    if window is not None:
        chosen = Smoothing("window", window=window)
    elif smoothing:
        chosen = Smoothing("ema", weight=smoothing)
    metric_fields, system = split_system_fields(parse_fields(fields))
    names = resolve_fields(metric_fields)
    entries = compare_histories(
        session, job_ids, fields=names.read, system=system, max_points=max_points,
        start_step=start_step, end_step=end_step, x=x, smoothing=chosen,
        exact_rows=settings.compare_exact_smoothing_rows,
        max_bytes=settings.history_max_response_bytes, max_series=settings.history_max_series,
    )  # fmt: skip
    summaries = label_jobs(session, job_ids)
    for entry in entries:
        names.rename_answer(entry)  # after the smoothing, which reads by our names
        summary = summaries.get(entry["job_id"])
        if summary is not None:
            entry["name"] = shown_name(summary.job, summary.run)
            entry["project"] = summary.run.project if summary.run is not None else None
            entry["status"] = summary.job.status
            entry["health"] = summary.health
    body = {"x": x, "smoothing": chosen.describe() if chosen else None, "jobs": entries}
    return Response(orjson.dumps(body, option=ANSWER_JSON), media_type="application/json")


@router.get("/config", summary="Config differences", responses=ANSWERS)
def compare_config_route(
    session: SessionDep, sync_service: SyncServiceDep, jobs: JobsQuery
) -> Response:
    """The config keys (flattened, dotted) whose values differ between the runs,
    with each run's value (null where a run lacks the key); `same` counts the
    keys equal everywhere. A run without a run file has an empty config."""
    job_ids = compared_jobs(jobs, sync_service)
    runs = run_files_of(session, job_ids)
    configs = {job_id: (runs[job_id].config if job_id in runs else None) for job_id in job_ids}
    return Response(orjson.dumps(config_differences(configs)), media_type="application/json")
