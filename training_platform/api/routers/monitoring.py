"""`/api/monitoring/{job_id}/...`: metric history, anomalies and manual sync."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from training_platform.api.deps import KnownJobId, SessionDep, SettingsDep, SyncServiceDep
from training_platform.api.params import NOT_FOUND, StepQuery, check_step_range, parse_fields
from training_platform.api.schemas import AnomalyList, AnomalyOut, ErrorOut, MetricsHistory, SyncOut
from training_platform.api.series_schema import MetricsSeries
from training_platform.callbacks.wire.schema import (
    FREE_GROUPS,
    GROUP_FIELDS,  # BIGINT: larger fails in the database
)
from training_platform.errors import InvalidParameterError
from training_platform.history.field_names import did_you_mean, resolve_fields
from training_platform.history.history_page import history_page, page_body
from training_platform.history.incidents import (
    anomaly_row,
    mark_episodes,
    mark_ongoing,
    merge_incidents,
)
from training_platform.history.metrics_query import anomaly_page
from training_platform.history.series.answer import downsampled_history
from training_platform.store.models import Job

router = APIRouter(prefix="/monitoring/{job_id}", tags=["monitoring"])

MAX_PAGE = 100_000
MAX_POINTS = 20_000
MAX_ANOMALIES = 10_000  # stored rows per page: ~2 MB of JSON at most
DEFAULT_ANOMALIES = 5_000


@router.get(
    "/metrics",
    response_model=MetricsHistory | MetricsSeries,
    summary="Metric history",
    responses=NOT_FOUND,
)
def metrics_history(
    job_id: KnownJobId,
    session: SessionDep,
    settings: SettingsDep,
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
            "groups (`loss`, `extra`) to return; default all. A fixed field may be named "
            "flat, by its column (`kl_max`) or the design documents' name "
            "(`kl_divergence_max`): it is answered under that name.",
        ),
    ] = None,
) -> Response:
    """Records between `start_step` and `end_step` (inclusive) in step order.

    Each record has the nested shape of a JSONL line (`loss`, `reward`, `kl`,
    `gradient`, `performance`, `timing`, `extra`, `anomalies`); non-finite
    numbers are the strings "NaN", "Infinity", "-Infinity". When more records
    remain, `next_start_step` says where the next page starts; `truncated` says
    the page ended before `limit` because of the byte cap
    (`PLATFORM_HISTORY_MAX_RESPONSE_BYTES`).

    With `max_points` the answer is columnar instead (MetricsSeries), sized for
    a chart whatever the run's length: a 1M-step run comes back as ~2,000
    precomputed buckets. Series that would take it past the byte cap (or past
    `PLATFORM_HISTORY_MAX_SERIES`) are left out and named in `series_omitted`.
    """
    check_step_range(start_step, end_step)
    if max_points is not None:
        names = resolve_fields(parse_fields(fields))
        body = downsampled_history(
            session,
            job_id=job_id,
            start_step=start_step,
            end_step=end_step,
            max_points=max_points,
            fields=names.read,
            max_bytes=settings.history_max_response_bytes,
            max_series=settings.history_max_series,
        )
        _check_other_groups_found(names.read, body)
        return Response(orjson.dumps(names.rename_answer(body)), media_type="application/json")
    if fields is not None:
        raise InvalidParameterError("fields applies only together with max_points")
    page = history_page(
        session,
        job_id=job_id,
        start_step=start_step,
        end_step=end_step,
        limit=limit,
        max_bytes=settings.history_max_response_bytes,
    )
    # Built by hand rather than through pydantic: a page can hold 100k records
    # and each is encoded once, as it is read.
    return Response(page_body(job_id, page), media_type="application/json")


def _check_other_groups_found(names: frozenset[str] | None, body: dict[str, Any]) -> None:
    """422 for a `fields=` entry outside the known groups that matched no series."""
    if names is None:
        return
    present = [*(body.get("series") or {}), *body.get("series_omitted", ())]
    for name in sorted(names):
        group = name.partition(".")[0]
        if group in GROUP_FIELDS or group in FREE_GROUPS:
            continue
        if not any(key == name or key.partition(".")[0] == name for key in present):
            raise InvalidParameterError(
                f"fields: unknown series or group {name!r}{did_you_mean(name)} (groups: "
                f"{', '.join([*GROUP_FIELDS, *FREE_GROUPS])}, or one the run logged; flat "
                "names: docs/contract.md, Metric names)"
            )


@router.get(
    "/metrics/anomalies",
    response_model=AnomalyList,
    summary="Anomalies",
    responses=NOT_FOUND,
)
def anomalies(
    job_id: KnownJobId,
    session: SessionDep,
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    source: Annotated[
        str | None,
        Query(pattern="^(callback|platform|samples|system)$", description="Only this source."),
    ] = None,
    raw: Annotated[
        bool,
        Query(
            description="One row per source as stored, instead of one incident per (step, type)."
        ),
    ] = False,
    limit: Annotated[
        int,
        Query(
            ge=1,
            le=MAX_ANOMALIES,
            description="Stored rows per page at most (pages by step; incidents <= rows).",
        ),
    ] = DEFAULT_ANOMALIES,
) -> AnomalyList:
    """Anomalies in step order: reported by the trainer's callback or found by the platform.

    By default one incident per (step, type): an event both the callback and
    the platform found is listed once, with `sources` naming both (highest
    severity, the callback's message). A detector alerts at an incident's
    onset and again only if it escalates; `end_step` is the last step its
    condition held, `ongoing` whether it may still be going on, and
    `episode` groups incidents that started together (docs/metrics-api.md).
    `raw=true` lists the stored per-source rows. `source` filters the rows
    before they are merged.

    A page holds at most `limit` stored rows, and only whole steps, so an
    incident is never split across pages: when more remain, `next_start_step`
    says where the next page starts. `truncated` is true only when one step
    alone had more than `limit` rows and the rest of that step was left out.
    """
    check_step_range(start_step, end_step)
    page = anomaly_page(
        session,
        job_id=job_id,
        start_step=start_step,
        end_step=end_step,
        source=source,
        limit=limit,
    )
    found = [anomaly_row(row) for row in page.rows]
    if raw:
        listed = found
    else:
        job = session.get(Job, job_id)
        latest = job.current_step if job is not None else None
        if found:
            stored = max(incident["end_step"] for incident in found)
            latest = stored if latest is None else max(latest, stored)
        running = job is not None and job.status == "running"
        listed = mark_episodes(
            mark_ongoing(merge_incidents(found), running=running, latest_step=latest)
        )
    return AnomalyList(
        job_id=job_id,
        anomalies=[AnomalyOut.model_validate(a) for a in listed],
        next_start_step=page.next_start_step,
        truncated=page.truncated,
    )


@router.post(
    "/metrics/sync",
    response_model=SyncOut,
    summary="Sync now",
    responses={
        **NOT_FOUND,
        409: {
            "model": ErrorOut,
            "description": "A file of the job is refused by policy (a symlink, a FIFO): "
            "permanent until the file or the setting changes; the detail says why",
        },
        502: {"model": ErrorOut, "description": "SSH host key unknown or changed"},
        503: {"model": ErrorOut, "description": "The job's files cannot be read right now"},
    },
)
async def sync_now(job_id: KnownJobId, request: Request, sync_service: SyncServiceDep) -> SyncOut:
    """Ingest the job's new lines, and its status file, now; answers within seconds.

    At most `PLATFORM_SYNC_REQUEST_BUDGET` seconds (default 2) of ingestion run
    inside the request: a bigger backlog answers `at_eof: false` with the
    `bytes_remaining`, and the background sync carries on from there. Safe to
    call while the background sync runs: records are never duplicated or
    lost, whichever sync gets them.
    """
    budget = request.app.state.settings.sync_request_budget
    outcome = await run_in_threadpool(sync_service.sync_job, job_id, budget=budget)
    result = outcome.result
    hub = getattr(request.app.state, "live_hub", None)
    if not result.at_eof and hub is not None:
        # Even with the poller off or its next round far away: the rest of
        # the backlog is ingested now, in the background.
        hub.request_sync(job_id)
    return SyncOut(
        job_id=job_id,
        new_metrics=result.new_metrics,
        lines_malformed=result.lines_malformed,
        lines_oversized=result.lines_oversized,
        resets=result.resets,
        offset=result.offset,
        file_size=result.file_size,
        at_eof=result.at_eof,
        bytes_remaining=max(0, result.file_size - result.offset),
        status_changed=outcome.status_changed,
        errors=result.errors,
    )
