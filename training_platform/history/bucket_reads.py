"""Stored rollup buckets (`metric_rollups`) read as runs (`bucket_codec.PackedRun`).

Queries read through `rollup_columns.read_buckets`, which takes the sealed
chunks of few series from `rollup_columns` and the rest from here.

A 1M-step run's answer is ~2,000 stored buckets; any Python work per bucket
cost more than the database's own read (docs/benchmarks.md, Compare), so
rows come through the driver's cursor and travel in runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from operator import itemgetter, methodcaller
from typing import Any, Final

from sqlalchemy.orm import Session

from training_platform.history.bucket_codec import PackedRun, decode_keys, split_stats

_PAGE: Final = 5_000  # buckets per query
_STATS: Final = itemgetter(4)  # a row's stats blob (see the SELECT)


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
