"""The `rollup_columns` table: sealed chunks of rollup buckets stored per series,
written from `metric_rollups` and read back by queries (`read_buckets`).

Why: a comparison chart reads two series of a run's ~25 from ~2,000
buckets, and `metric_rollups` keeps every series of a bucket in one blob, so
it read ~13x the bytes it used, in a row per bucket (docs/benchmarks.md,
Compare). Here each level's buckets are grouped into chunks of `CHUNK`
consecutive bucket indexes. A sealed chunk (one below its level's newest
chunk, which is still filling) is stored as one row per series, five float64
per bucket slot in `codec.py`'s order (an empty slot: NaN, NaN, NaN, 0,
0), plus one row (`series` "") with the slots themselves: the chunk's series
names as a JSON list, a NUL byte, then per slot its first step, last step and
row count (int64; count 0: no bucket there) and its first timestamp
(float64; NaN: none), all little-endian.

A derived copy, never the truth: the write side (`refresh.py`) keeps it,
`refresh_rollups` calling `refresh_chunks` with the buckets it wrote, which
drops the chunks they fall in and rebuilds the sealed ones from
`metric_rollups` in the same transaction; `rebuild_rollups` calls
`rebuild_chunks`. `read_buckets` takes the sealed
chunks wholly inside its range and reads the rest (ragged ends, the newest
chunk, chunks never built) from `metric_rollups`, so an answer is the same
either way (tests/history/test_rollup_columns.py).
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import orjson
from sqlalchemy.orm import Session

from training_platform.history.series.stored.codec import PackedRun, decode_keys, unpack_floats
from training_platform.history.series.stored.metric_rollups import read_stored_buckets

CHUNK: Final = 64  # buckets per chunk: a series' row is 2,560 bytes, within a page
BUCKETS_ROW: Final = ""  # the `series` of a chunk's row of slots and names
_STATS: Final = 5  # float64 per series and bucket
_CHUNK_PAGE: Final = 128  # chunks per query
_IN_CHUNK: Final = 500  # keys per IN (...) list
_EMPTY_SLOT: Final = (math.nan, math.nan, math.nan, 0.0, 0.0)


def read_buckets(
    session: Session,
    job_id: str,
    level: int,
    first: int,
    last: int,
    fields: frozenset[str] | None = None,
) -> Iterator[PackedRun]:
    """Level-`level` buckets `first`..`last` in step order, as `PackedRun`s.

    The sealed chunks inside the range come from `rollup_columns` with only
    the series `fields` asks for (series keys or groups, as `shape.wanted` reads
    them; None: all); the rest from `metric_rollups` with all their series.
    Consumers filter by `fields` themselves, so both give the same answer.
    """
    first_chunk = -(-first // CHUNK)
    last_chunk = (last + 1) // CHUNK - 1
    position = first
    headers: dict[tuple[str, ...], list[str]] = {}
    for start in range(first_chunk, last_chunk + 1, _CHUNK_PAGE):
        stop = min(start + _CHUNK_PAGE - 1, last_chunk)
        for chunk, run in _read_chunks(session, job_id, level, start, stop, fields, headers):
            if position < chunk * CHUNK:
                yield from read_stored_buckets(session, job_id, level, position, chunk * CHUNK - 1)
            yield run
            position = (chunk + 1) * CHUNK
    if position <= last:
        yield from read_stored_buckets(session, job_id, level, position, last)


def _read_chunks(
    session: Session,
    job_id: str,
    level: int,
    first_chunk: int,
    last_chunk: int,
    fields: frozenset[str] | None,
    headers: dict[tuple[str, ...], list[str]],
) -> Iterator[tuple[int, PackedRun]]:
    """The sealed chunks among `first_chunk`..`last_chunk`, in order, as runs."""
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    sql = (
        "SELECT chunk, series, payload FROM rollup_columns"
        f" WHERE job_id = {mark} AND level = {mark} AND chunk >= {mark} AND chunk <= {mark}"
    )
    parameters: list[Any] = [job_id, level, first_chunk, last_chunk]
    if fields is not None:
        # The slots' row, the named series, and the series of each named group
        # (a prefix compared as it is: no collation's ordering involved).
        names = sorted(fields)
        tests = [f"series IN ({', '.join([mark] * (len(names) + 1))})"]
        parameters += [BUCKETS_ROW, *names]
        for group in names:
            tests.append(f"substr(series, 1, {len(group) + 1}) = {mark}")
            parameters.append(f"{group}.")
        sql += f" AND ({' OR '.join(tests)})"
    sql += " ORDER BY chunk, series"
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, parameters)
        rows = cursor.fetchall()
    finally:
        cursor.close()
    current: int | None = None
    slots: bytes = b""
    series: dict[str, bytes] = {}
    for chunk, name, payload in rows:
        if chunk != current:
            if current is not None and slots:
                yield current, _chunk_run(current, slots, series, headers)
            current, slots, series = chunk, b"", {}
        if name == BUCKETS_ROW:
            slots = bytes(payload)
        else:
            series[name] = bytes(payload)
    if current is not None and slots:
        yield current, _chunk_run(current, slots, series, headers)


def _chunk_run(
    chunk: int, slots: bytes, series: Mapping[str, bytes], headers: dict[tuple[str, ...], list[str]]
) -> PackedRun:
    """A chunk's stored rows as a run of its buckets (interleaved, as stored buckets are)."""
    split = slots.index(b"\0")
    names = decode_keys(slots[:split])
    bounds = array("q")
    bounds.frombytes(slots[split + 1 : split + 1 + 3 * 8 * CHUNK])
    stamps = unpack_floats(slots[split + 1 + 3 * 8 * CHUNK :])
    if sys.byteorder != "little":
        bounds.byteswap()
    counts = bounds[2 * CHUNK :]
    present = [slot for slot in range(CHUNK) if counts[slot]]
    key_tuple = tuple(name for name in names if name in series)
    keys = headers.get(key_tuple) or headers.setdefault(key_tuple, list(key_tuple))
    stride = _STATS * len(keys)
    flat = array("d", bytes(8 * stride * len(present)))
    for j, key in enumerate(keys):
        values = unpack_floats(series[key])
        for part in range(_STATS):
            column = values[part::_STATS]
            if len(present) < CHUNK:
                column = array("d", [column[slot] for slot in present])
            flat[_STATS * j + part :: stride] = column
    if sys.byteorder != "little":
        flat.byteswap()
    return PackedRun(
        [chunk * CHUNK + slot for slot in present],
        [bounds[slot] for slot in present],
        [bounds[CHUNK + slot] for slot in present],
        [counts[slot] for slot in present],
        [None if math.isnan(stamps[slot]) else stamps[slot] for slot in present],
        keys,
        flat.tobytes(),
    )


# -- writing ------------------------------------------------------------------


def refresh_chunks(
    session: Session, job_id: str, touched: Mapping[int, tuple[Iterable[int], int]]
) -> None:
    """After buckets were written: per level, (the bucket indexes written, the
    level's newest bucket index). Drops the chunks those buckets fall in and
    stores again the sealed ones (below the newest bucket's chunk). Appends
    within a level's newest chunk, the usual case, cost nothing here.
    """
    for level, (indexes, newest) in touched.items():
        open_chunk = newest // CHUNK  # still filling: never stored, so never stale
        chunks = sorted({index // CHUNK for index in indexes if index // CHUNK < open_chunk})
        if not chunks:
            continue
        _delete_chunks(session, job_id, level, chunks)
        for first, last in consecutive_runs(chunks):  # one read per stretch, not per chunk
            _store_chunks(session, job_id, level, first * CHUNK, last * CHUNK + CHUNK - 1)


def rebuild_chunks(session: Session, job_id: str) -> None:
    """Store every sealed chunk of the job again from its `metric_rollups` (a
    migration, or a repair after `rebuild_rollups`)."""
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(f"DELETE FROM rollup_columns WHERE job_id = {mark}", (job_id,))
        cursor.execute(
            f"SELECT level, max(bucket) FROM metric_rollups WHERE job_id = {mark} GROUP BY level",
            (job_id,),
        )
        newest = cursor.fetchall()
    finally:
        cursor.close()
    for level, top in newest:
        # Up to the last bucket of the last sealed chunk (none when below 0).
        _store_chunks(session, job_id, level, 0, (top // CHUNK) * CHUNK - 1)


def _store_chunks(session: Session, job_id: str, level: int, first: int, last: int) -> None:
    """Store the chunks of buckets `first`..`last` (whole chunks) from `metric_rollups`."""
    pending: list[PackedRun] = []
    chunk: int | None = None
    rows: list[tuple[Any, ...]] = []
    if first > last:
        return
    for run in read_stored_buckets(session, job_id, level, first, last):
        for part in _by_chunk(run):
            part_chunk = part.buckets[0] // CHUNK
            if chunk is not None and part_chunk != chunk:
                rows += chunk_rows(job_id, level, chunk, pending)
                pending = []
            chunk = part_chunk
            pending.append(part)
        if len(rows) >= _IN_CHUNK:  # bounded memory for a whole run's rebuild
            _insert(session, rows)
            rows = []
    if chunk is not None:
        rows += chunk_rows(job_id, level, chunk, pending)
    _insert(session, rows)


def consecutive_runs(numbers: list[int]) -> Iterator[tuple[int, int]]:
    """Sorted integers as (first, last) of their runs of consecutive values:
    [1, 2, 3, 7] -> (1, 3), (7, 7)."""
    start = 0
    for position in range(1, len(numbers) + 1):
        if position == len(numbers) or numbers[position] != numbers[position - 1] + 1:
            yield numbers[start], numbers[position - 1]
            start = position


def chunk_rows(
    job_id: str, level: int, chunk: int, runs: Iterable[PackedRun]
) -> list[tuple[Any, ...]]:
    """The `rollup_columns` rows of a chunk whose buckets are `runs` (none: no rows)."""
    runs = list(runs)
    if not runs:
        return []
    names = sorted({name for run in runs for name in run.keys})
    bounds = array("q", bytes(8 * 3 * CHUNK))
    stamps = array("d", [math.nan]) * CHUNK
    columns = {name: array("d", _EMPTY_SLOT) * CHUNK for name in names}
    for run in runs:
        flat = unpack_floats(run.payload)
        stride = _STATS * len(run.keys)
        for i, bucket in enumerate(run.buckets):
            slot = bucket - chunk * CHUNK
            bounds[slot] = run.first_steps[i]
            bounds[CHUNK + slot] = run.last_steps[i]
            bounds[2 * CHUNK + slot] = run.rows[i]
            stamp = run.first_timestamps[i]
            stamps[slot] = math.nan if stamp is None else stamp
            base = i * stride
            for j, name in enumerate(run.keys):
                start = base + _STATS * j
                columns[name][_STATS * slot : _STATS * slot + _STATS] = flat[start : start + _STATS]
    if sys.byteorder != "little":
        swapped: list[array[Any]] = [bounds, stamps, *columns.values()]
        for values in swapped:
            values.byteswap()
    slots = orjson.dumps(names) + b"\0" + bounds.tobytes() + stamps.tobytes()
    return [
        (job_id, level, chunk, BUCKETS_ROW, slots),
        *((job_id, level, chunk, name, values.tobytes()) for name, values in columns.items()),
    ]


def _by_chunk(run: PackedRun) -> Iterator[PackedRun]:
    """`run` cut where its buckets cross from one chunk into the next."""
    size = 8 * _STATS * len(run.keys)
    start = 0
    while start < len(run.buckets):
        chunk = run.buckets[start] // CHUNK
        stop = start
        while stop < len(run.buckets) and run.buckets[stop] // CHUNK == chunk:
            stop += 1
        yield PackedRun(
            run.buckets[start:stop],
            run.first_steps[start:stop],
            run.last_steps[start:stop],
            run.rows[start:stop],
            run.first_timestamps[start:stop],
            run.keys,
            run.payload[start * size : stop * size],
        )
        start = stop


def _delete_chunks(session: Session, job_id: str, level: int, chunks: list[int]) -> None:
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        for start in range(0, len(chunks), _IN_CHUNK):
            part = chunks[start : start + _IN_CHUNK]
            cursor.execute(
                f"DELETE FROM rollup_columns WHERE job_id = {mark} AND level = {mark}"
                f" AND chunk IN ({', '.join([mark] * len(part))})",
                (job_id, level, *part),
            )
    finally:
        cursor.close()


def _insert(session: Session, rows: list[tuple[Any, ...]]) -> None:
    if not rows:
        return
    connection = session.connection()
    mark = "?" if connection.dialect.paramstyle == "qmark" else "%s"
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.executemany(
            "INSERT INTO rollup_columns (job_id, level, chunk, series, payload)"
            f" VALUES ({mark}, {mark}, {mark}, {mark}, {mark})",
            rows,
        )
    finally:
        cursor.close()
