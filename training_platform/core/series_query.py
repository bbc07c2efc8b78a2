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

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.core.downsample import (
    Bucket,
    Piece,
    bucket_width,
    buckets_to_json,
    coalesce,
    cover,
    records_to_json,
    series_values,
)
from training_platform.core.metrics_query import list_metrics
from training_platform.core.models import TrainingMetric
from training_platform.core.rollups import WIDTHS, raw_rows, read_buckets, rolled_up_through

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
) -> dict[str, Any]:
    """The history body for `?max_points=` (see `api/routers/monitoring.py`)."""
    lo, hi = _stored_bounds(session, job_id, start_step, end_step)
    body: dict[str, Any] = {"job_id": job_id, "max_points": max_points}
    if lo is None or hi is None:
        return {**body, **_empty(start_step, end_step)}
    body.update(start_step=lo, end_step=hi)
    rows = _count_up_to(session, job_id, lo, hi, RAW_BUCKETING_ROWS + 1)
    if rows <= max_points:
        records = list_metrics(
            session, job_id=job_id, start_step=lo, end_step=hi, nonfinite_as_strings=True
        )
        return {
            **body,
            "downsampled": False,
            "bucket_steps": 1,
            "count": len(records),
            **records_to_json(records, fields),
        }
    width = bucket_width(lo, hi, max_points)
    if rows <= RAW_BUCKETING_ROWS:
        pieces = _row_pieces(session, job_id, lo, hi)
    elif (rolled_up_through(session, job_id) or -1) < hi:
        # Rows beyond the buckets: rollups are not being maintained (see
        # refresh_rollups). Still correct from the rows, only slower.
        logger.warning("metric_rollups of %s lag behind its rows: reading rows", job_id)
        pieces = _row_pieces(session, job_id, lo, hi)
    else:
        pieces = _rollup_pieces(session, job_id, lo, hi, width)
    buckets = coalesce(pieces, lo, width)
    return {
        **body,
        "downsampled": True,
        "bucket_steps": width,
        "count": len(buckets),
        **buckets_to_json(buckets, fields),
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


def _count_up_to(session: Session, job_id: str, lo: int, hi: int, cap: int) -> int:
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
        yield Bucket.of_record(record["step"], series_values(record))


def _rollup_pieces(session: Session, job_id: str, lo: int, hi: int, width: int) -> Iterator[Piece]:
    """The range as stored buckets: the finest level at least a point wide, finer at the ends."""
    top = next((level for level, w in enumerate(WIDTHS) if w >= width), len(WIDTHS) - 1)
    for span in cover(lo, hi, WIDTHS, top):
        if span.level < 0:
            yield from _row_pieces(session, job_id, span.lo, span.hi)
        else:
            yield from read_buckets(session, job_id, span.level, span.first, span.last)
