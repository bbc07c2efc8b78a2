"""`/api/monitoring/{job_id}/...`: metric history, anomalies and manual sync."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Response

from training_platform.api.deps import KnownJobId, SessionDep, SyncServiceDep
from training_platform.api.schemas import AnomalyList, AnomalyOut, ErrorOut, MetricsHistory, SyncOut
from training_platform.api.series_schema import MetricsSeries
from training_platform.core.metrics_query import list_anomalies, list_metrics
from training_platform.core.series_query import downsampled_history
from training_platform.errors import InvalidParameterError

router = APIRouter(prefix="/monitoring/{job_id}", tags=["monitoring"])

MAX_PAGE = 100_000
MAX_POINTS = 20_000
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorOut, "description": "Unknown job"}
}

MAX_STEP = 2**63 - 1  # BIGINT: larger values would fail inside the database, not here
StepQuery = Annotated[
    int | None, Query(ge=0, le=MAX_STEP, description="Inclusive; steps are integers >= 0.")
]


def _check_range(start_step: int | None, end_step: int | None) -> None:
    if start_step is not None and end_step is not None and start_step > end_step:
        raise InvalidParameterError(f"start_step {start_step} is after end_step {end_step}")


@router.get(
    "/metrics",
    response_model=MetricsHistory | MetricsSeries,
    summary="Metric history",
    responses=_NOT_FOUND,
)
def metrics_history(
    job_id: KnownJobId,
    session: SessionDep,
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    limit: Annotated[
        int, Query(ge=1, le=MAX_PAGE, description="Records per page (pages by step).")
    ] = 10_000,
    max_points: Annotated[
        int | None,
        Query(
            ge=2,
            le=MAX_POINTS,
            description="Answer with at most this many points per series (MetricsSeries): "
            "min/max/mean buckets that keep every spike, or the exact values when the range "
            "holds no more rows than this.",
        ),
    ] = None,
    fields: Annotated[
        str | None,
        Query(
            max_length=8192,
            description="With max_points: comma-separated series (`loss.actor_loss`) or "
            "groups (`loss`, `extra`) to return; default all.",
        ),
    ] = None,
) -> Response:
    """Records between `start_step` and `end_step` (inclusive) in step order.

    Each record has the nested shape of a JSONL line (`loss`, `reward`, `kl`,
    `gradient`, `performance`, `timing`, `extra`, `anomalies`); non-finite
    numbers are the strings "NaN", "Infinity", "-Infinity". When more records
    remain, `next_start_step` says where the next page starts.

    With `max_points` the answer is columnar instead (MetricsSeries), sized for
    a chart whatever the run's length: a 1M-step run comes back as ~2,000
    precomputed buckets.
    """
    _check_range(start_step, end_step)
    if max_points is not None:
        body = downsampled_history(
            session,
            job_id=job_id,
            start_step=start_step,
            end_step=end_step,
            max_points=max_points,
            fields=_parse_fields(fields),
        )
        return Response(orjson.dumps(body), media_type="application/json")
    if fields is not None:
        raise InvalidParameterError("fields applies only together with max_points")
    records = list_metrics(
        session,
        job_id=job_id,
        start_step=start_step,
        end_step=end_step,
        limit=limit + 1,
        nonfinite_as_strings=True,
    )
    next_start = records.pop()["step"] if len(records) > limit else None
    body = {"job_id": job_id, "metrics": records, "count": len(records)}
    body["next_start_step"] = next_start
    # Built by hand rather than through pydantic: a page can hold 100k records
    # and they are already plain JSON-safe dicts.
    return Response(orjson.dumps(body), media_type="application/json")


def _parse_fields(fields: str | None) -> frozenset[str] | None:
    if fields is None:
        return None
    names = frozenset(name.strip() for name in fields.split(",") if name.strip())
    if not names:
        raise InvalidParameterError("fields must name at least one series or group")
    return names


@router.get(
    "/metrics/anomalies",
    response_model=AnomalyList,
    summary="Anomalies",
    responses=_NOT_FOUND,
)
def anomalies(
    job_id: KnownJobId,
    session: SessionDep,
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    source: Annotated[
        str | None, Query(pattern="^(callback|platform)$", description="Only this source.")
    ] = None,
) -> AnomalyList:
    """Anomalies in step order: reported by the trainer's callback or found by the platform."""
    _check_range(start_step, end_step)
    rows = list_anomalies(
        session, job_id=job_id, start_step=start_step, end_step=end_step, source=source
    )
    return AnomalyList(job_id=job_id, anomalies=[AnomalyOut.model_validate(r) for r in rows])


@router.post(
    "/metrics/sync",
    response_model=SyncOut,
    summary="Sync now",
    responses={
        **_NOT_FOUND,
        502: {"model": ErrorOut, "description": "SSH host key unknown or changed"},
        503: {"model": ErrorOut, "description": "The job's files cannot be read right now"},
    },
)
def sync_now(job_id: KnownJobId, sync_service: SyncServiceDep) -> SyncOut:
    """Ingest every complete new line of the job's file, and its status file, now.

    Safe to call while the background sync runs: records are never duplicated
    or lost, whichever sync gets them.
    """
    outcome = sync_service.sync_job(job_id)
    result = outcome.result
    return SyncOut(
        job_id=job_id,
        new_metrics=result.new_metrics,
        lines_malformed=result.lines_malformed,
        lines_oversized=result.lines_oversized,
        resets=result.resets,
        offset=result.offset,
        file_size=result.file_size,
        at_eof=result.at_eof,
        status_changed=outcome.status_changed,
        errors=result.errors,
    )
