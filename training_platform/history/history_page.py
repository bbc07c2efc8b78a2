"""One page of metric history as JSON, bounded in rows *and* bytes whatever the run holds.

A record is at most a metrics line's worth of JSON (`PLATFORM_MAX_LINE_BYTES`,
1 MiB by default), so a page of 100,000 records could otherwise be 100 GB.
Rows are read in chunks and encoded one by one; the page ends at `limit`
records or before the record that would take it past `max_bytes`, and a
record larger than a whole page on its own is sent as its step and timestamp
with `"truncated": true` (as the live stream does). Memory stays about one
chunk of rows plus the page itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

import orjson
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from training_platform.store.metric_rows import row_to_record
from training_platform.store.models import TrainingMetric

CHUNK_ROWS: Final = 1_000
_COLUMNS: Final = tuple(TrainingMetric.__table__.columns)
# Room for the body around the records: job_id (128 characters), count, next step, flag.
ENVELOPE_BYTES: Final = 1_024


@dataclass
class HistoryPage:
    records: list[bytes] = field(default_factory=list)  # each record's JSON
    size: int = 0  # bytes of `records`, with the commas between them
    next_start_step: int | None = None  # where the next page starts; None: no more rows
    truncated: bool = False  # ended early by `max_bytes`, not by `limit`


def history_page(
    session: Session,
    *,
    job_id: str,
    start_step: int | None,
    end_step: int | None,
    limit: int,
    max_bytes: int,
) -> HistoryPage:
    """Records in [start_step, end_step] in step order, encoded in the API's convention."""
    page = HistoryPage()
    budget = max_bytes - ENVELOPE_BYTES
    after = None if start_step is None else start_step - 1
    while True:
        # Plain rows, not ORM objects: several times cheaper, and no identity map to grow.
        query = select(*_COLUMNS).where(TrainingMetric.job_id == job_id)
        if after is not None:
            query = query.where(TrainingMetric.step > after)
        if end_step is not None:
            query = query.where(TrainingMetric.step <= end_step)
        wanted = min(CHUNK_ROWS, limit + 1 - len(page.records))
        rows = session.execute(query.order_by(TrainingMetric.step).limit(wanted)).all()
        for row in rows:
            if len(page.records) == limit:
                page.next_start_step = row.step
                return page
            encoded = _encoded(row, budget)
            if page.size + len(encoded) + 1 > budget:
                page.next_start_step, page.truncated = row.step, True
                return page
            page.records.append(encoded)
            page.size += len(encoded) + 1
        if len(rows) < wanted:
            return page
        after = rows[-1].step


def _encoded(row: Row[Any], budget: int) -> bytes:
    encoded = orjson.dumps(row_to_record(row, nonfinite_as_strings=True))
    if len(encoded) < budget:
        return encoded
    stub: dict[str, Any] = {"step": row.step, "timestamp": row.timestamp, "truncated": True}
    return orjson.dumps(stub)


def page_body(job_id: str, page: HistoryPage) -> bytes:
    """The page as the response body (built by hand: the records are already JSON)."""
    return b"".join(
        (
            b'{"job_id":',
            orjson.dumps(job_id),
            b',"metrics":[',
            b",".join(page.records),
            b'],"count":',
            str(len(page.records)).encode(),
            b',"next_start_step":',
            orjson.dumps(page.next_start_step),
            b',"truncated":',
            b"true" if page.truncated else b"false",
            b"}",
        )
    )
