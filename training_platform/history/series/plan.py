"""Stage 1 of a series answer: find what is stored for the range, and how to answer it.

Three tiers, picked per request so each stays cheap:

1. at most `max_points` rows in the range: the rows themselves (exact;
   non-finite values as "NaN"/"Infinity"/"-Infinity");
2. at most `RAW_BUCKETING_ROWS` rows: buckets computed from the rows;
3. more: the stored rollup buckets (`stored/`), with the range's ragged ends
   filled from finer levels and raw rows, so exactly the asked steps count.

The plan also fixes the answer's grid (its buckets are `[origin + k*width,
...)`) and, for stored buckets, the level read: the next stages follow it.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from enum import Enum
from typing import Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.history.series.stored.metric_rollups import WIDTHS, rolled_up_through
from training_platform.store.models import TrainingMetric

logger = logging.getLogger(__name__)

RAW_BUCKETING_ROWS: Final = 5_000
_FIRST_ROWS: Final = 100  # rows looked at for a run's first timestamp


class Tier(Enum):
    EXACT_ROWS = "exact rows"
    ROW_BUCKETS = "buckets from rows"
    STORED_BUCKETS = "stored buckets"


@dataclass(frozen=True)
class SeriesPlan:
    """How the stored steps `lo`..`hi` of a job are answered in at most `max_points` points."""

    job_id: str
    max_points: int
    lo: int  # the first and last stored steps within the asked range
    hi: int
    tier: Tier
    width: int  # steps per point of the answer (1: exact rows)
    origin: int  # the grid's first step: points are buckets [origin + k*width, ...)
    level: int = -1  # the rollup level read for the range's middle (stored buckets only)


def plan_series(
    session: Session,
    *,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    max_points: int,
) -> SeriesPlan | None:
    """The plan for `[start_step, end_step]` (None: open); None when no step is stored there."""
    lo, hi = stored_bounds(session, job_id, start_step, end_step)
    if lo is None or hi is None:
        return None
    # Counted up to the larger of the two limits: a count stopped at
    # RAW_BUCKETING_ROWS + 1 is no answer to "more than max_points?" when
    # max_points is larger (issue 12: a 300k-step run came back whole).
    rows = count_up_to(session, job_id, lo, hi, max(RAW_BUCKETING_ROWS, max_points) + 1)
    if rows <= max_points:
        return SeriesPlan(job_id, max_points, lo, hi, Tier.EXACT_ROWS, 1, lo)
    width = bucket_width(lo, hi, max_points)
    if rows <= RAW_BUCKETING_ROWS:
        return SeriesPlan(job_id, max_points, lo, hi, Tier.ROW_BUCKETS, width, lo)
    if (rolled_up_through(session, job_id) or -1) < hi:
        # Rows beyond the buckets: rollups are not being maintained (see
        # refresh_rollups). Still correct from the rows, only slower.
        logger.warning("metric_rollups of %s lag behind its rows: reading rows", job_id)
        return SeriesPlan(job_id, max_points, lo, hi, Tier.ROW_BUCKETS, width, lo)
    level, width, origin = stored_grid(lo, hi, width, max_points)
    return SeriesPlan(job_id, max_points, lo, hi, Tier.STORED_BUCKETS, width, origin, level)


def stored_bounds(
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


def bucket_width(start_step: int, end_step: int, max_points: int) -> int:
    """The smallest whole number of steps per bucket giving at most `max_points` buckets."""
    span = end_step - start_step + 1
    return max(1, -(-span // max_points))


def stored_grid(lo: int, hi: int, width: int, max_points: int) -> tuple[int, int, int]:
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


def first_step(session: Session, job_id: str) -> int | None:
    """The run's first stored step (where a comparison's smoothing starts)."""
    return session.scalar(
        select(func.min(TrainingMetric.step)).where(TrainingMetric.job_id == job_id)
    )


def first_timestamp(session: Session, job_id: str) -> float | None:
    """The run's first record time (the first of its first rows that has one): a
    comparison's time axis counts from it."""
    rows = session.scalars(
        select(TrainingMetric.timestamp)
        .where(TrainingMetric.job_id == job_id)
        .order_by(TrainingMetric.step)
        .limit(_FIRST_ROWS)
    )
    return next((t for t in rows if t is not None and math.isfinite(t)), None)
