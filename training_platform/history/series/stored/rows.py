"""A job's stored records (`training_metrics`) in step order, read a page at a time.

The rows a history reads when the range is small or the buckets lag behind
(`read.py`), the exact smoothing of a comparison reads, and the write side
rolls up (`refresh.py`). Nothing here holds a run in memory.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

from sqlalchemy import select
from sqlalchemy.orm import Session

from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import TrainingMetric

_PAGE: Final = 5_000  # rows per query


def raw_rows(session: Session, job_id: str, lo: int, hi: int | None) -> Iterator[dict[str, Any]]:
    """Records with steps in [lo, hi] (None: to the last) in step order (floats, not
    the API's strings), `_PAGE` rows per query."""
    after = lo - 1
    while True:
        query = select(TrainingMetric).where(
            TrainingMetric.job_id == job_id, TrainingMetric.step > after
        )
        if hi is not None:
            query = query.where(TrainingMetric.step <= hi)
        rows = session.scalars(query.order_by(TrainingMetric.step).limit(_PAGE)).all()
        for row in rows:
            yield row_to_record(row)
        if len(rows) < _PAGE:
            return
        after = rows[-1].step
        session.expunge_all()  # keep the identity map from growing with the run
