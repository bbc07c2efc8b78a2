"""A job's history as at most `max_points` buckets per series (the dashboard's reads).

Three tiers, picked per request so each stays cheap:

1. at most `max_points` rows in the range: the rows themselves (exact;
   non-finite values as "NaN"/"Infinity"/"-Infinity");
2. at most `RAW_BUCKETING_ROWS` rows: buckets computed from the rows;
3. more: buckets merged from the precomputed `metric_rollups`, with the
   range's ragged ends filled from finer levels and raw rows, so exactly the
   asked steps count.

Rows are always read in pages; nothing here holds a run in memory.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, Final

import orjson
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.history.downsample import (
    Bucket,
    Piece,
    bucket_width,
    coalesce,
    column_of,
    cover,
    finite_time,
    point_count,
    series_values,
)
from training_platform.history.rollup_columns import read_buckets
from training_platform.history.rollups import WIDTHS, raw_rows, rolled_up_through
from training_platform.history.series_json import buckets_to_json, values_to_json
from training_platform.store.models import TrainingMetric

logger = logging.getLogger(__name__)

RAW_BUCKETING_ROWS: Final = 5_000


def downsampled_history(
    session: Session,
    *,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    max_points: int,
    fields: frozenset[str] | None = None,
    max_bytes: int | None = None,
    max_series: int | None = None,
) -> dict[str, Any]:
    """The history body for `?max_points=` (see `api/routers/monitoring.py`).

    At most `max_series` series, and only as many as keep the body's JSON
    within `max_bytes`: the others are named in `series_omitted` and
    `truncated` is true.
    """
    lo, hi = _stored_bounds(session, job_id, start_step, end_step)
    body: dict[str, Any] = {"job_id": job_id, "max_points": max_points}
    if lo is None or hi is None:
        nothing_omitted = {"truncated": False, "series_omitted": [], "series_omitted_count": 0}
        return {**body, **_empty(start_step, end_step), **nothing_omitted}
    body.update(start_step=lo, end_step=hi)
    omitted: list[str] = []
    # Counted up to the larger of the two limits: a count stopped at
    # RAW_BUCKETING_ROWS + 1 is no answer to "more than max_points?" when
    # max_points is larger (issue 12: a 300k-step run came back whole).
    rows = count_up_to(session, job_id, lo, hi, max(RAW_BUCKETING_ROWS, max_points) + 1)
    if rows <= max_points:
        steps, timestamps, flat = _exact_values(session, job_id, lo, hi)
        exact = {
            **body,
            "downsampled": False,
            "bucket_steps": 1,
            "count": len(steps),
            **values_to_json(steps, flat, fields, max_series=max_series, omitted=omitted),
            "timestamps": timestamps,
        }
        return bounded(exact, omitted, max_bytes)
    width = bucket_width(lo, hi, max_points)
    origin = lo
    if rows <= RAW_BUCKETING_ROWS:
        pieces = _row_pieces(session, job_id, lo, hi)
    elif (rolled_up_through(session, job_id) or -1) < hi:
        # Rows beyond the buckets: rollups are not being maintained (see
        # refresh_rollups). Still correct from the rows, only slower.
        logger.warning("metric_rollups of %s lag behind its rows: reading rows", job_id)
        pieces = _row_pieces(session, job_id, lo, hi)
    else:
        level, width, origin = _stored_grid(lo, hi, width, max_points)
        pieces = _rollup_pieces(session, job_id, lo, hi, level, fields)
    buckets = coalesce(pieces, origin, width)
    columns = buckets_to_json(buckets, fields, max_series=max_series, omitted=omitted)
    summary = {
        **body,
        "downsampled": True,
        "bucket_steps": width,
        "count": point_count(buckets),
        **columns,
        # Each bucket knows the time of its first record (metric_rollups.first_timestamp).
        "timestamps": column_of(buckets, "first_timestamp"),
    }
    return bounded(summary, omitted, max_bytes)


def _exact_values(
    session: Session, job_id: str, lo: int, hi: int
) -> tuple[list[int], list[float | None], list[dict[str, float | int]]]:
    """Steps, timestamps and numbers of the rows in [lo, hi], read in pages.

    Only the numbers are kept, never whole records (their JSON columns may be
    large), so memory follows the answer, not the rows.
    """
    steps: list[int] = []
    timestamps: list[float | None] = []
    flat: list[dict[str, float | int]] = []
    for record in raw_rows(session, job_id, lo, hi):
        steps.append(record["step"])
        timestamps.append(finite_time(record.get("timestamp")))
        flat.append(series_values(record))
    return steps, timestamps, flat


OMITTED_NAMES_BYTES: Final = 16 * 1024  # `series_omitted` lists names up to this much JSON


def bounded(body: dict[str, Any], omitted: list[str], max_bytes: int | None) -> dict[str, Any]:
    """`body` with only the series whose JSON fits in `max_bytes` (in name order, greedy).

    Everything but the series (steps, last_steps, timestamps: at most
    MAX_POINTS each) is always kept; the setting's minimum leaves room for it.
    """
    series: dict[str, Any] = body["series"]
    if max_bytes is not None:
        room = max_bytes - len(orjson.dumps({**body, "series": {}})) - OMITTED_NAMES_BYTES - 64
        kept: dict[str, Any] = {}
        for key, columns in series.items():
            size = len(orjson.dumps({key: columns}))
            if size <= room:
                kept[key] = columns
                room -= size
            else:
                omitted.append(key)
        series = kept
    omitted.sort()
    listed: list[str] = []
    size = 0
    for name in omitted:  # names are bounded too: a run may invent very long keys
        size += len(orjson.dumps(name)) + 1
        if size > OMITTED_NAMES_BYTES:
            break
        listed.append(name)
    return {
        **body,
        "series": series,
        "truncated": bool(omitted),
        "series_omitted": listed,
        "series_omitted_count": len(omitted),
    }


def _empty(start_step: int | None, end_step: int | None) -> dict[str, Any]:
    return {
        "start_step": start_step,
        "end_step": end_step,
        "downsampled": False,
        "bucket_steps": 1,
        "count": 0,
        "steps": [],
        "series": {},
        "timestamps": [],
    }


def _stored_bounds(
    session: Session, job_id: str, start_step: int | None, end_step: int | None
) -> tuple[int | None, int | None]:
    """First and last stored steps within the asked range.

    Two queries, not one: SQLite answers a lone min() or max() from the
    (job_id, step) index in a few page reads, but both in one query scan it.
    """
    where = [TrainingMetric.job_id == job_id]
    if start_step is not None:
        where.append(TrainingMetric.step >= start_step)
    if end_step is not None:
        where.append(TrainingMetric.step <= end_step)
    first = session.scalar(select(func.min(TrainingMetric.step)).where(*where))
    last = session.scalar(select(func.max(TrainingMetric.step)).where(*where))
    return first, last


def count_up_to(session: Session, job_id: str, lo: int, hi: int, cap: int) -> int:
    """Rows in [lo, hi], counted only up to `cap` (reads at most `cap` index entries).

    The ORDER BY matters: without it PostgreSQL may pick a bitmap scan, which
    visits every index entry of the job before the LIMIT applies.
    """
    inner = (
        select(TrainingMetric.step)
        .where(TrainingMetric.job_id == job_id, TrainingMetric.step.between(lo, hi))
        .order_by(TrainingMetric.step)
        .limit(cap)
        .subquery()
    )
    return session.scalar(select(func.count()).select_from(inner)) or 0


def _row_pieces(session: Session, job_id: str, lo: int, hi: int) -> Iterator[Piece]:
    for record in raw_rows(session, job_id, lo, hi):
        yield Bucket.of_record(record["step"], series_values(record), record.get("timestamp"))


def _stored_grid(lo: int, hi: int, width: int, max_points: int) -> tuple[int, int, int]:
    """The rollup level to read, and the answer's bucket width and grid origin.

    Stored buckets are never split, so when the finest level that serves the
    range is wider than asked (32 steps for a width of 3), its width is the
    answer's and its grid too (the origin aligned to it): every point is one
    stored bucket or the ragged end of the range, and `bucket_steps` says how
    far apart the points are. A width beyond the top level merges its buckets
    on the range's own grid, as rows are.
    """
    for level, stored in enumerate(WIDTHS):
        if stored < width:
            continue
        origin = lo - lo % stored
        if -(-(hi + 1 - origin) // stored) <= max_points:  # aligning may add one point
            return level, stored, origin
    return len(WIDTHS) - 1, width, lo


def _rollup_pieces(
    session: Session, job_id: str, lo: int, hi: int, top: int, fields: frozenset[str] | None
) -> Iterator[Piece]:
    """The range as stored buckets of level `top`, finer at the ends (the sealed
    chunks inside it with only the series `fields` asks for)."""
    for span in cover(lo, hi, WIDTHS, top):
        if span.level < 0:
            yield from _row_pieces(session, job_id, span.lo, span.hi)
        else:
            yield from read_buckets(session, job_id, span.level, span.first, span.last, fields)
