"""The `metric_rollups` table: its levels, how far they reach, its buckets read and written.

Why a table: a downsampled history must see every step's value (a spike at
one step out of a million must show), and scanning a 1M-step run is far too
slow even in pure SQL (a single `GROUP BY step / w` with MIN/MAX over the 14
numeric columns: see docs/benchmarks.md, History). So buckets of
`WIDTHS[level]` steps (32, 128, 512, ... 524,288: each level 4x the one
below, aligned to multiples of its width) hold each series' min, max, sum and
counts (`buckets.py`, stored as `codec.py` packs them), and a query reads
~2,000 of them. The write side (`refresh.py`) keeps them current.

Storage: about 1/24 of the rows of `training_metrics` (1M steps: ~42k rows;
their size against the rows': docs/benchmarks.md, History).

Queries read through `rollup_columns.read_buckets`, which takes the sealed
chunks of few series from `rollup_columns` and the rest from here. A 1M-step
run's answer is ~2,000 stored buckets; any Python work per bucket cost more
than the database's own read (docs/benchmarks.md, Compare), so rows come
through the driver's cursor and travel in runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter, methodcaller
from typing import Any, Final

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from training_platform.history.series.buckets import Bucket
from training_platform.history.series.stored.codec import (
    PackedRun,
    decode_keys,
    decode_stats,
    encode_stats,
    split_stats,
)
from training_platform.store.database import upsert_sql
from training_platform.store.models import ROLLUP_LEVELS, MetricRollup

FANOUT: Final = 4
WIDTHS: Final = tuple(32 * FANOUT**level for level in range(ROLLUP_LEVELS))
_IN_CHUNK: Final = 500  # keys per IN (...) list: well under every driver's parameter limit
_PAGE: Final = 5_000  # buckets per query
_STATS: Final = itemgetter(4)  # a row's stats blob (see the SELECT)
# A stored bucket as the write side reads it (`stored_buckets`).
_BUCKET_COLUMNS: Final = (
    MetricRollup.bucket,
    MetricRollup.first_step,
    MetricRollup.last_step,
    MetricRollup.row_count,
    MetricRollup.stats,
    MetricRollup.first_timestamp,
)


def rolled_up_through(session: Session, job_id: str) -> int | None:
    """The last step the job's level-0 buckets cover (None: no buckets yet)."""
    top = session.scalar(
        select(func.max(MetricRollup.bucket)).where(
            MetricRollup.job_id == job_id, MetricRollup.level == 0
        )
    )
    if top is None:
        return None
    return session.scalar(
        select(MetricRollup.last_step).where(
            MetricRollup.job_id == job_id, MetricRollup.level == 0, MetricRollup.bucket == top
        )
    )


def read_stored_buckets(
    session: Session, job_id: str, level: int, first: int, last: int
) -> Iterator[PackedRun]:
    """Stored level-`level` buckets `first`..`last` in step order (for queries), still
    packed, as runs of consecutive buckets with the same series (`PackedRun`).

    Runs with the same series header share one `keys` list (decoded once), so
    `buckets_to_json` can slice them as one array. Read through the driver's
    cursor, and no object per bucket: a 1M-step run's answer is ~2,000 rows,
    and per-row work cost more than the database's own read
    (docs/benchmarks.md, Compare).
    """
    headers: dict[bytes, list[str]] = {}
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    sql = (
        "SELECT bucket, first_step, last_step, row_count, stats, first_timestamp"
        " FROM metric_rollups"
        f" WHERE job_id = {mark} AND level = {mark} AND bucket > {mark} AND bucket <= {mark}"
        f" ORDER BY bucket LIMIT {_PAGE}"
    )
    after = first - 1
    while True:
        cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
        try:
            cursor.execute(sql, (job_id, level, after, last))
            rows = cursor.fetchall()
        finally:
            cursor.close()
        yield from _packed_runs(rows, headers)
        if len(rows) < _PAGE:
            return
        after = rows[-1][0]


def _packed_runs(rows: list[Any], headers: dict[bytes, list[str]]) -> Iterator[PackedRun]:
    """`read_stored_buckets`' rows as runs of buckets with one series header."""
    if not rows:
        return
    blobs = list(map(bytes, map(_STATS, rows)))  # bytes, not the memoryview of some drivers
    header, _ = split_stats(blobs[0])
    prefix = header + b"\0"
    # Nearly always one run: a run logs the same series each step. Checked and
    # cut by C-level map, not a Python loop: per-row Python work was a third of
    # a comparison's time (docs/benchmarks.md, Compare).
    if all(map(methodcaller("startswith", prefix), blobs)):
        keys = headers.get(header) or headers.setdefault(header, decode_keys(header))
        yield _run(rows, keys, list(map(itemgetter(slice(len(prefix), None)), blobs)))
        return
    prefix, keys = b"\1", list[str]()  # the run's header with its NUL (never a JSON start)
    payloads: list[bytes] = []
    start = 0
    for position, blob in enumerate(blobs):
        if blob.startswith(prefix):
            payloads.append(blob[len(prefix) :])
            continue
        if payloads:
            yield _run(rows[start:position], keys, payloads)
        header, payload = split_stats(blob)
        prefix = header + b"\0"
        keys = headers.get(header) or headers.setdefault(header, decode_keys(header))
        payloads, start = [payload], position
    if payloads:
        yield _run(rows[start:], keys, payloads)


def _run(rows: list[Any], keys: list[str], payloads: list[bytes]) -> PackedRun:
    buckets, firsts, lasts, counts, _, timestamps = zip(*rows, strict=True)
    return PackedRun(
        list(buckets),
        list(firsts),
        list(lasts),
        list(counts),
        list(timestamps),
        keys,
        b"".join(payloads),
    )


# -- the write side's reads and writes (`refresh.py`) -------------------------


def stored_buckets(
    session: Session, job_id: str, level: int, indexes: list[int]
) -> Iterator[tuple[int, Bucket]]:
    """The stored level-`level` buckets among `indexes` (absent ones are skipped).

    One level per query, `bucket IN (...)`: an index lookup per key on both
    databases. (A row-value `(level, bucket) IN (...)` made SQLite scan all of
    the job's buckets, so an append cost more the longer the run.)
    """
    for start in range(0, len(indexes), _IN_CHUNK):
        rows = session.execute(
            select(*_BUCKET_COLUMNS).where(
                MetricRollup.job_id == job_id,
                MetricRollup.level == level,
                MetricRollup.bucket.in_(indexes[start : start + _IN_CHUNK]),
            )
        )
        for index, first, last, count, stats, first_timestamp in rows:
            yield index, Bucket(first, last, count, decode_stats(stats), first_timestamp)


_COLUMNS: Final = (
    "job_id", "level", "bucket", "first_step", "last_step", "row_count", "stats",
    "first_timestamp",
)  # fmt: skip


def upsert_buckets(session: Session, job_id: str, changed: dict[int, dict[int, Bucket]]) -> None:
    """Store the buckets of `changed` (level -> bucket index -> bucket), replacing any."""
    rows = [
        (
            job_id,
            level,
            index,
            bucket.first_step,
            bucket.last_step,
            bucket.rows,
            encode_stats(bucket.stats),
            bucket.first_timestamp,
        )
        for level, buckets in changed.items()
        for index, bucket in buckets.items()
    ]
    if not rows:
        return
    # ~1,400 buckets per ingestion batch: straight to the driver, as the rows
    # themselves go (SQLAlchemy's per-row processing would cost more than the
    # writing itself: docs/benchmarks.md, Ingestion).
    connection = session.connection()
    sql = upsert_sql(
        "metric_rollups", _COLUMNS, ("job_id", "level", "bucket"), connection.dialect.paramstyle
    )
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        for start in range(0, len(rows), _IN_CHUNK):
            cursor.executemany(sql, rows[start : start + _IN_CHUNK])
    finally:
        cursor.close()
