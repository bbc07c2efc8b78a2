"""MLflow metric rows into records: the SQLite batch read, and the grouping by step.

Kept apart from `mlflow_store.py` (SQLAlchemy, the run's params and status) so
that a worker process reading ahead (`read_ahead.py`) imports only this, the
standard library and the record builder: it starts in a fraction of a second.
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterable, Sequence
from itertools import groupby
from operator import itemgetter
from typing import Any, Final
from urllib.parse import quote

from training_platform.callbacks.wire.records import build_record

BatchRows = tuple[list[dict[str, Any]], int, int]
"""A batch read by rowid: its records, the last row's rowid, and how many rows."""

# SQLite's rows go through the driver's own cursor: a SQLAlchemy Row per row costs
# more than SQLite does (~0.2 s a million rows; docs/benchmarks.md, MLflow runs).
# The batch's last rowid first (index only, in C), then its rows streamed into
# records by rowid range: no rowid column per row, no list of a batch's rows.
# Rows MLflow commits between the two statements get rowids past the table's
# largest, so past `last`: the next batch's. A NaN (`is_nan`: MLflow's column
# holds 0) comes back as NULL, which MLflow's NOT NULL `value` never is.
_BATCH_END: Final = (
    "SELECT count(*), max(rowid) FROM (SELECT rowid FROM metrics"
    " WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?)"
)
# A full batch goes on to the end of its last row's step, looking at most
# `STEP_LOOKAHEAD` rows further: a step's rows (one `log_metrics` call, written
# together) then land in one batch, stored and counted once, rather than half in
# each. The rows before the first of another step, or all of them when the run
# ends within the look-ahead; a step longer than that is cut, as before.
STEP_LOOKAHEAD: Final = 4096
_STEP_REST: Final = (
    "WITH ahead(id, step) AS (SELECT rowid, step FROM metrics"
    " WHERE run_uuid = ? AND rowid > ? ORDER BY rowid LIMIT ?)"
    " SELECT count(*), max(id), (SELECT count(*) FROM ahead) FROM ahead"
    " WHERE id < coalesce((SELECT min(id) FROM ahead WHERE step != ?), 9223372036854775807)"
)
_BATCH_ROWS: Final = (
    'SELECT "key", CASE WHEN is_nan THEN NULL ELSE value END, timestamp, step FROM metrics'
    " WHERE run_uuid = ? AND rowid > ? AND rowid <= ? ORDER BY rowid"
)


def rows_after(cursor: sqlite3.Cursor, run_id: str, after: int, limit: int) -> BatchRows:
    """The records of the (at most `limit`) rows of `run_id` after rowid `after`."""
    count, last = batch_end(cursor, run_id, after, limit)
    return rows_until(cursor, run_id, after, last), last, count


def batch_end(cursor: sqlite3.Cursor, run_id: str, after: int, limit: int) -> tuple[int, int]:
    """How many rows the batch after rowid `after` has, and its last row's rowid
    (`after` when there are none): `limit` rows, or fewer at the run's end, or a few
    more to finish the last row's step (`STEP_LOOKAHEAD`)."""
    count, last = cursor.execute(_BATCH_END, (run_id, after, limit)).fetchone()
    if not count:
        return 0, after
    if count < limit:  # the run's rows so far, all of them
        return count, last
    step = cursor.execute("SELECT step FROM metrics WHERE rowid = ?", (last,)).fetchone()
    if step is None:  # (MLflow deleted the run meanwhile)
        return count, last
    rest, rest_last, looked = cursor.execute(
        _STEP_REST, (run_id, last, STEP_LOOKAHEAD, step[0])
    ).fetchone()
    if not rest or (rest == looked == STEP_LOOKAHEAD):  # none, or a step longer than that
        return count, last
    return count + rest, rest_last


def rows_until(cursor: sqlite3.Cursor, run_id: str, after: int, last: int) -> list[dict[str, Any]]:
    """The records of the rows of `run_id` after rowid `after`, up to `last`."""
    if last <= after:
        return []
    return records_of(cursor.execute(_BATCH_ROWS, (run_id, after, last)))


def read_rows_after(path: str, run_id: str, after: int, limit: int) -> BatchRows:
    """`rows_after` on a read-only connection of its own to the SQLite file `path`:
    what a worker process runs (`read_ahead.py`)."""
    connection = sqlite3.connect(f"file:{quote(path)}?mode=ro", uri=True)
    try:
        return rows_after(connection.cursor(), run_id, after, limit)
    finally:
        connection.close()


_KEY_VALUE: Final = itemgetter(0, 1)
_TIME: Final = itemgetter(2)
_STEP: Final = itemgetter(3)


def records_of(rows: Iterable[Sequence[Any]]) -> list[dict[str, Any]]:
    """One record per step of `rows` (key, value or None for NaN, timestamp in ms,
    step), in the order the steps first appear; a key's later row wins; the
    record's time is its newest row's.

    MLflow writes a `log_metrics` call's rows (one step) one after the other, so
    the rows are taken a run of one step at a time, each run turned into values
    and a time by calls that loop in C (`groupby`, `dict`, `max` over
    `itemgetter`s) rather than by Python per row (docs/benchmarks.md, MLflow
    runs). A value is a float already (MLflow's column is a double).
    """
    steps: dict[Any, dict[str, Any]] = {}
    newest: dict[Any, int] = {}
    for step, run in groupby(rows, _STEP):
        same_step = list(run)
        values = dict(map(_KEY_VALUE, same_step))
        latest = max(map(_TIME, same_step))
        earlier = steps.get(step)
        if earlier is None:
            steps[step] = values
            newest[step] = latest
        else:  # the step logged again after another one
            earlier.update(values)
            newest[step] = max(newest[step], latest)
    records = []
    for step, values in steps.items():
        if None in values.values():  # is_nan rows
            values = {key: math.nan if value is None else value for key, value in values.items()}
        records.append(build_record(step, values, timestamp=newest[step] / 1000))
    return records
