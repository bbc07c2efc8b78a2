"""The series answers, each a straight walk of the stages: plan -> read -> merge -> shape.

`downsampled_history` is the history route's `?max_points=` answer and each
compared run's (`history/compare.py`). Rows are always read in pages;
nothing holds a run in memory.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from training_platform.history.series.merge import coalesce
from training_platform.history.series.plan import Tier, plan_series
from training_platform.history.series.read import read_exact_rows, read_pieces
from training_platform.history.series.shape import bucket_answer, empty_answer, exact_answer


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
    """A job's history in `[start_step, end_step]` as at most `max_points` points per
    series (see `api/routers/monitoring.py`): the rows themselves when few enough,
    else min/max/mean buckets.

    At most `max_series` series, and only as many as keep the body's JSON
    within `max_bytes`: the others are named in `series_omitted` and
    `truncated` is true.
    """
    plan = plan_series(
        session, job_id=job_id, start_step=start_step, end_step=end_step, max_points=max_points
    )
    if plan is None:
        return empty_answer(job_id, max_points, start_step, end_step)
    if plan.tier is Tier.EXACT_ROWS:
        rows = read_exact_rows(session, plan)
        return exact_answer(plan, rows, fields, max_series=max_series, max_bytes=max_bytes)
    buckets = coalesce(read_pieces(session, plan, fields), plan.origin, plan.width)
    return bucket_answer(plan, buckets, fields, max_series=max_series, max_bytes=max_bytes)
