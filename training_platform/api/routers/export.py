"""`/api/monitoring/{job_id}/.../export`: every stored record, sample or anomaly as a file.

Streamed at full fidelity (no downsampling) in bounded memory: the rows are
read in step-ordered chunks and each chunk is written out before the next is
read (`history/export/`, shared with `training-platform export`). The
columns are decided first, so errors (an unknown field, pyarrow missing)
are answers with a status, never a file cut short. A client that goes away
stops the export: the response stops pulling chunks once the ASGI server
reports the disconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from training_platform.api.deps import KnownJobId
from training_platform.api.params import NOT_FOUND, StepQuery, check_step_range, parse_fields
from training_platform.api.routers.system import TimeQuery
from training_platform.api.schemas import ErrorOut
from training_platform.errors import InvalidParameterError
from training_platform.history.export.files import start_export
from training_platform.history.export.sources import Kind
from training_platform.history.export.system import start_system_export
from training_platform.history.export.writers import MEDIA_TYPES, Format

router = APIRouter(prefix="/monitoring/{job_id}", tags=["export"])

FormatQuery = Annotated[
    Format,
    Query(description="csv or parquet (flat: dotted column names) or jsonl (the API's records)."),
]
FieldsQuery = Annotated[
    str | None,
    Query(
        max_length=8192,
        description="Comma-separated columns (`loss.actor_loss`) or groups (`loss`, `extra`); "
        "default all. `step` (and `timestamp`) always come. Metrics: a fixed field's flat "
        "name (`kl_max`, `kl_divergence_max`) names its column so.",
    ),
]
RESPONSES: dict[int | str, dict[str, Any]] = {
    **NOT_FOUND,
    200: {
        "content": {
            "text/csv": {},
            "application/vnd.apache.parquet": {},
            "application/x-ndjson": {},
        },
        "description": "The file, streamed.",
    },
    501: {
        "model": ErrorOut,
        "description": "format=parquet on a server without pyarrow (code `extra_not_installed`)",
    },
}


def _export(
    request: Request,
    job_id: str,
    kind: Kind,
    fmt: Format,
    start_step: int | None,
    end_step: int | None,
    fields: str | None,
) -> StreamingResponse:
    check_step_range(start_step, end_step)
    export = start_export(
        request.app.state.session_factory,
        job_id=job_id,
        kind=kind,
        fmt=fmt,
        start_step=start_step,
        end_step=end_step,
        fields=parse_fields(fields) if kind == "metrics" else _names(fields),
    )
    return _streamed(export.body, fmt, export.filename)


def _streamed(body: Iterator[bytes], fmt: Format, filename: str) -> StreamingResponse:
    # Job ids are [A-Za-z0-9._-]: the file name needs no quoting beyond the quotes.
    return StreamingResponse(
        _until_disconnected(body),
        media_type=MEDIA_TYPES[fmt],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )


async def _until_disconnected(body: Iterator[bytes]) -> AsyncIterator[bytes]:
    """`body` a piece at a time off the event loop, closed as soon as the response
    stops: a client that hangs up (the ASGI server reports it; Starlette cancels
    the response) leaves no chunk read after it, and no generator suspended."""
    try:
        while (piece := await run_in_threadpool(next, body, None)) is not None:
            yield piece
    finally:
        close = getattr(body, "close", None)
        if close is not None:
            close()


def _names(fields: str | None) -> frozenset[str] | None:
    """The entries of `fields` for samples and anomalies (their columns are checked
    against what is stored)."""
    if fields is None:
        return None
    names = frozenset(name.strip() for name in fields.split(",") if name.strip())
    if not names:
        raise InvalidParameterError("fields must name at least one column or group")
    return names


@router.get("/metrics/export", summary="Export metrics", responses=RESPONSES)
def export_metrics(
    request: Request,
    job_id: KnownJobId,
    format: FormatQuery = "csv",
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    fields: FieldsQuery = None,
) -> StreamingResponse:
    """Every stored record in step order, as a file (`Content-Disposition: attachment`).

    CSV and Parquet: one row per step, a column per series, named
    `group.field` (`loss.actor_loss`, `timing.rollout`, `extra.actor/entropy`;
    the callback's `anomalies` as JSON text), typed in Parquet; NaN and
    infinities stay themselves in Parquet and are written `NaN`, `inf`,
    `-inf` in CSV. JSONL: one record per line as `GET .../metrics` answers it.
    A run still being written is exported up to the last step stored when
    the export began.
    """
    return _export(request, job_id, "metrics", format, start_step, end_step, fields)


@router.get("/samples/export", summary="Export samples", responses=RESPONSES)
def export_samples(
    request: Request,
    job_id: KnownJobId,
    format: FormatQuery = "csv",
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    fields: FieldsQuery = None,
) -> StreamingResponse:
    """Every stored sample in (step, index) order; `rewards.*` and `extra.*` flattened."""
    return _export(request, job_id, "samples", format, start_step, end_step, fields)


@router.get("/metrics/anomalies/export", summary="Export anomalies", responses=RESPONSES)
def export_anomalies(
    request: Request,
    job_id: KnownJobId,
    format: FormatQuery = "csv",
    start_step: StepQuery = None,
    end_step: StepQuery = None,
    fields: FieldsQuery = None,
) -> StreamingResponse:
    """Every stored anomaly row (one per step, type and source, as `raw=true` lists them)."""
    return _export(request, job_id, "anomalies", format, start_step, end_step, fields)


@router.get("/system/export", summary="Export system samples", responses=RESPONSES)
def export_system(
    request: Request,
    job_id: KnownJobId,
    format: FormatQuery = "csv",
    host: Annotated[
        str | None, Query(max_length=255, description="Only this host's samples.")
    ] = None,
    start: TimeQuery = None,
    end: TimeQuery = None,
    fields: Annotated[
        str | None,
        Query(
            max_length=8192,
            description="Comma-separated series (`gpus.0.utilization`) or prefixes (`gpus`, "
            "`cpu`); default all. `timestamp`, `host` and `step` always come.",
        ),
    ] = None,
) -> StreamingResponse:
    """Every stored system sample of the job (or of `host`) in time order, an hour of
    samples at a time: `timestamp`, `host`, `step`, then a column per series (empty
    where a sample lacks it), values with float32's 7 significant digits. JSONL: one
    sample per line as the live socket's `system` message carries it."""
    export = start_system_export(
        request.app.state.session_factory,
        job_id=job_id,
        fmt=format,
        host=host,
        start=start,
        end=end,
        fields=_names(fields),
    )
    return _streamed(export.body, format, export.filename)
