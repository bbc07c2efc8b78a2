"""The write side of the stored buckets: kept current with each batch, or rebuilt.

`refresh_rollups` must run in the transaction that writes the rows (the
persister calls it right after its upsert), so rows and buckets commit
together. It recomputes every bucket the batch touched from the stored truth
-- rows for level 0, children for the levels above -- so a rewritten step (a
run resumed from a checkpoint) is handled like an append, and calling it
twice is harmless. Appends, the usual case, take their level-0 buckets from
the batch in memory and read back at most one partly filled bucket per level.
Then the sealed chunks of `rollup_columns` the written buckets fall in are
stored again. `rebuild_rollups` recomputes a job's buckets from all its rows
(the migration that introduced them, or a repair).

No stage of the read path imports this module (tests/test_layers.py): the
ingest path does.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

from sqlalchemy import delete
from sqlalchemy.orm import Session

from training_platform.callbacks.wire.schema import FREE_GROUPS
from training_platform.history.series.buckets import (
    Bucket,
    Stats,
    finite_time,
    series_columns,
    series_values,
    stats_of_columns,
)
from training_platform.history.series.stored.metric_rollups import (
    FANOUT,
    WIDTHS,
    rolled_up_through,
    stored_buckets,
    upsert_buckets,
)
from training_platform.history.series.stored.rollup_columns import (
    consecutive_runs,
    rebuild_chunks,
    refresh_chunks,
)
from training_platform.history.series.stored.rows import raw_rows
from training_platform.store.metric_rows import (
    COLUMN_SERIES,
    NONFINITE_POSITION,
    STEP_POSITION,
    TIMESTAMP_POSITION,
)
from training_platform.store.models import MetricRollup

_FLUSH_BUCKETS: Final = 500  # a rebuild writes its closed buckets this many at a time


def refresh_rollups(
    session: Session,
    *,
    job_id: str,
    records: Sequence[Mapping[str, Any]],
    rows: Sequence[Sequence[Any]] | None = None,
) -> None:
    """Bring the buckets touched by `records` up to date; call after the rows are written.

    `rows`, when given, are the `record_to_params` lists just written for
    `records`, in the same order: the persister has them, and they make new
    buckets much cheaper to build (`_bucket_of_rows`; docs/benchmarks.md,
    Ingestion). For a step
    given twice, the later record wins. Only adds/flushes: the caller owns the
    transaction (it is the one that wrote the rows, so both commit or neither).
    """
    if not records:
        return
    steps = [int(record["step"]) for record in records]
    positions: list[int] | None = None  # into records/rows, in step order; None: as they are
    if any(map(operator.ge, steps, steps[1:])):  # not appends: dedupe (later wins), sort
        latest = {step: position for position, step in enumerate(steps)}
        steps = sorted(latest)
        positions = [latest[step] for step in steps]
    through = rolled_up_through(session, job_id)
    done = -1 if through is None else through
    width = WIDTHS[0]
    fresh: dict[int, tuple[int, int]] = {}  # bucket -> its slice of `steps`
    stored: list[int] = []  # touched buckets that may also hold earlier rows
    start = 0
    while start < len(steps):  # one turn per bucket, not per record
        index = steps[start] // width
        stop = bisect.bisect_left(steps, (index + 1) * width, start)
        if index * width <= done:
            stored.append(index)
        else:
            fresh[index] = (start, stop)
        start = stop
    level_buckets: dict[int, Bucket] = {}
    for index, (start, stop) in fresh.items():
        if positions is None:
            chosen = records[start:stop]
            chosen_rows = rows[start:stop] if rows is not None else None
        else:
            members = positions[start:stop]
            chosen = [records[position] for position in members]
            chosen_rows = [rows[position] for position in members] if rows is not None else None
        if chosen_rows is None:
            level_buckets[index] = Bucket.of_records(zip(steps[start:stop], chosen, strict=True))
        else:
            level_buckets[index] = _bucket_of_rows(chosen_rows, chosen)
    for index, bucket in _buckets_from_rows(session, job_id, stored, width):
        level_buckets[index] = bucket
    changed = {0: level_buckets}
    for level in range(1, len(WIDTHS)):
        level_buckets = _parents(session, job_id, level, level_buckets, done)
        changed[level] = level_buckets
    upsert_buckets(session, job_id, changed)
    newest = max(done, steps[-1])  # `steps` is in step order
    refresh_chunks(
        session,
        job_id,
        {level: (buckets, newest // WIDTHS[level]) for level, buckets in changed.items()},
    )


def _bucket_of_rows(rows: Sequence[Sequence[Any]], records: Sequence[Mapping[str, Any]]) -> Bucket:
    """A level-0 bucket from its rows as written and their records (the same steps).

    The numeric columns come straight from the rows, transposed by one `zip`;
    only `timing` and `extra` are read from the records. The same stats as
    `Bucket.of_records`: a non-finite value (a NULL in its column plus a mark
    in `nonfinite`) or an `other` group sends the bucket down that path.
    """
    columns = list(zip(*rows, strict=True))
    steps = columns[STEP_POSITION]
    first = min(range(len(steps)), key=steps.__getitem__)
    first_timestamp = finite_time(columns[TIMESTAMP_POSITION][first])
    free = series_columns(records, FREE_GROUPS)
    if free is None or any(columns[NONFINITE_POSITION]):
        return Bucket.of_records(zip(steps, records, strict=True))
    stats: dict[str, Stats] = {}
    for key, position in COLUMN_SERIES:
        values = columns[position]
        if None in values:  # steps that did not log this series
            values = tuple(value for value in values if value is not None)
            if not values:
                continue
        # Normalised records hold only int/float here, all finite (no marks).
        stats[key] = [min(values), max(values), sum(values), len(values), 0]
    stats.update(stats_of_columns(free))
    return Bucket(min(steps), max(steps), len(steps), stats, first_timestamp)


def _buckets_from_rows(
    session: Session, job_id: str, indexes: list[int], width: int
) -> Iterator[tuple[int, Bucket]]:
    """Level-0 buckets recomputed from their stored rows (which include this batch's)."""
    for lo, hi in consecutive_runs(indexes):
        current: tuple[int, Bucket] | None = None
        for record in raw_rows(session, job_id, lo * width, (hi + 1) * width - 1):
            step = record["step"]
            index = step // width
            if current is None or current[0] != index:
                if current is not None:
                    yield current
                current = (index, Bucket(step, step))
            current[1].add(step, series_values(record), record.get("timestamp"))
        if current is not None:
            yield current


def _parents(
    session: Session, job_id: str, level: int, children: dict[int, Bucket], done: int
) -> dict[int, Bucket]:
    """Level `level` buckets over the changed `children` (level - 1), from all their children."""
    parents = sorted({index // FANOUT for index in children})
    child_width = WIDTHS[level - 1]
    # Children not recomputed in this call come from the table -- only those
    # that can exist, i.e. start at or before what was rolled up before.
    missing = [
        child
        for parent in parents
        for child in range(parent * FANOUT, parent * FANOUT + FANOUT)
        if child not in children and child * child_width <= done
    ]
    siblings = dict(stored_buckets(session, job_id, level - 1, missing))
    out: dict[int, Bucket] = {}
    for parent in parents:
        merged: Bucket | None = None
        for child in range(parent * FANOUT, parent * FANOUT + FANOUT):
            part = children.get(child) or siblings.get(child)
            if part is None:
                continue
            if merged is None:
                merged = Bucket(part.first_step, part.last_step)
            merged.merge(part)
        if merged is not None:
            out[parent] = merged
    return out


def rebuild_rollups(session: Session, *, job_id: str) -> int:
    """Recompute all of a job's buckets from its rows, reading them page by page.

    For rows stored before rollups existed (the migration calls it) or to
    repair. Only adds/flushes; returns the rows read.
    """
    session.execute(delete(MetricRollup).where(MetricRollup.job_id == job_id))
    # Stream: a bucket at each level is written once the next one starts, so
    # memory holds one open bucket per level, never the run.
    open_buckets: list[tuple[int, Bucket] | None] = [None] * len(WIDTHS)
    pending: dict[int, dict[int, Bucket]] = {level: {} for level in range(len(WIDTHS))}
    count = 0

    def close(level: int) -> None:
        entry = open_buckets[level]
        if entry is None:
            return
        open_buckets[level] = None
        index, bucket = entry
        pending[level][index] = bucket
        if level + 1 < len(WIDTHS):
            parent = open_buckets[level + 1]
            if parent is not None and parent[0] != index // FANOUT:
                close(level + 1)
                parent = None
            if parent is None:
                open_buckets[level + 1] = (index // FANOUT, Bucket(bucket.first_step, 0))
                parent = open_buckets[level + 1]
            assert parent is not None
            parent[1].merge(bucket)

    for record in raw_rows(session, job_id, 0, None):
        step = record["step"]
        index = step // WIDTHS[0]
        current = open_buckets[0]
        if current is not None and current[0] != index:
            close(0)
            current = None
        if current is None:
            current = open_buckets[0] = (index, Bucket(step, step))
        current[1].add(step, series_values(record), record.get("timestamp"))
        count += 1
        if sum(len(buckets) for buckets in pending.values()) >= _FLUSH_BUCKETS:
            upsert_buckets(session, job_id, pending)
            pending = {level: {} for level in range(len(WIDTHS))}
    for level in range(len(WIDTHS)):
        close(level)
    upsert_buckets(session, job_id, pending)
    rebuild_chunks(session, job_id)
    return count
