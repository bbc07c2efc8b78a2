"""`GET /api/monitoring/{job_id}/system`: the hosts' GPU, CPU, memory, disk and network."""

from __future__ import annotations

from typing import Annotated

import orjson
from fastapi import APIRouter, Query, Response

from training_platform.api.deps import KnownJobId, SessionDep
from training_platform.api.params import NOT_FOUND
from training_platform.history.system_query import ANSWER_JSON, system_history

router = APIRouter(prefix="/monitoring/{job_id}", tags=["monitoring"])

MAX_POINTS = 20_000
# Seconds since 1970 up to the year 3000: anything else is not a time of a run.
TimeQuery = Annotated[
    float | None,
    Query(ge=0, le=32_503_680_000, description="Unix seconds, inclusive."),
]


@router.get("/system", summary="System metrics", responses=NOT_FOUND)
def system_metrics(
    job_id: KnownJobId,
    session: SessionDep,
    host: Annotated[
        str | None,
        Query(max_length=255, description="Only this host (the `host` of its samples)."),
    ] = None,
    start: TimeQuery = None,
    end: TimeQuery = None,
    max_points: Annotated[
        int,
        Query(
            ge=2,
            le=MAX_POINTS,
            description="At most this many points per series: the samples exactly when the "
            "range holds no more, else buckets with each series' min and max.",
        ),
    ] = 1000,
    series: Annotated[
        str | None,
        Query(
            max_length=8192,
            description="Comma-separated series (`gpus.0.utilization`) or prefixes "
            "(`gpus`, `gpus.0`, `cpu`); default all.",
        ),
    ] = None,
) -> Response:
    """System samples of every host of the job (or of `host`), per host columnar.

    Each host's answer has `timestamps` and `steps` (the newest training step
    the sampler knew of at that sample) as its x axes, and per series either
    `values` (every sample in the range) or `min` and `max` per bucket of
    consecutive samples (`downsampled`). Series are named by their path:
    `cpu.percent`, `memory.used_gib`, `disk.used_percent`,
    `network.recv_mib_s`, `gpus.0.utilization`, `gpus.0.memory_used_gib`,
    `gpus.0.power_w`, `gpus.0.temperature_c`, `gpus.0.throttle_thermal` (0/1),
    ... `all_hosts` lists every host the job has samples of.
    """
    names = None
    if series is not None:
        names = [name.strip() for name in series.split(",") if name.strip()]
    body = system_history(
        session,
        job_id=job_id,
        host=host,
        start=start,
        end=end,
        max_points=max_points,
        series=names,
    )
    return Response(orjson.dumps(body, option=ANSWER_JSON), media_type="application/json")
