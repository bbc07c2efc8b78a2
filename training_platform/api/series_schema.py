"""The columnar history answer (`GET .../metrics?max_points=`), for the OpenAPI page.

Kept apart from `schemas.py` because the route writes this body with orjson
directly (a response can carry 20k points x dozens of series); the model only
documents it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class SeriesOut(BaseModel):
    """One series, aligned with `steps`: `values` when exact, else the four bucket arrays."""

    values: list[Any] | None = Field(
        default=None,
        description='Exact answer: the value at each step; "NaN"/"Infinity"/"-Infinity" '
        "for non-finite numbers, null where the step has no such value.",
    )
    min: list[float | None] | None = Field(default=None, description="Smallest finite value.")
    max: list[float | None] | None = Field(default=None, description="Largest finite value.")
    mean: list[float | None] | None = Field(default=None, description="Mean of finite values.")
    nonfinite: list[int] | None = Field(
        default=None, description="How many values in the bucket were NaN or infinite."
    )


class MetricsSeries(BaseModel):
    """At most `max_points` points per series, each a bucket of steps (or one step)."""

    job_id: str
    max_points: int
    start_step: int | None = Field(description="First stored step in the asked range.")
    end_step: int | None = Field(description="Last stored step in the asked range.")
    downsampled: bool = Field(
        description="False: every stored step in the range, exactly (series carry `values`). "
        "True: buckets (series carry `min`, `max`, `mean`, `nonfinite`)."
    )
    bucket_steps: int = Field(description="Steps per bucket (1 when exact).")
    count: int = Field(description="Points per series.")
    steps: list[int] = Field(description="Each point's first step.")
    last_steps: list[int] | None = Field(
        default=None, description="Each bucket's last step (downsampled answers only)."
    )
    timestamps: list[float | None] = Field(
        description="Each point's wall-clock time (Unix seconds): the `timestamp` of the "
        "record at its first step; null where that step has no row or no finite timestamp."
    )
    series: dict[str, SeriesOut] = Field(
        description="Keyed `group.field`: `loss.actor_loss`, `timing.rollout`, "
        "`extra.actor/entropy`, ..."
    )
    truncated: bool = Field(
        default=False,
        description="Some series were left out to stay within the byte cap "
        "(PLATFORM_HISTORY_MAX_RESPONSE_BYTES) or PLATFORM_HISTORY_MAX_SERIES.",
    )
    series_omitted: list[str] = Field(
        default_factory=list,
        description="Names of the series left out (ask for them with fields=); the list "
        "itself is capped, series_omitted_count has the full count.",
    )
    series_omitted_count: int = Field(default=0, description="How many series were left out.")
