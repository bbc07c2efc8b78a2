"""Rows into `training_metrics` by the fastest path each database offers (see benchmarks/)."""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from operator import itemgetter
from types import NoneType
from typing import Any, TypeVar

from sqlalchemy.orm import Session

from training_platform.store.database import upsert_sql
from training_platform.store.metric_rows import ROW_KEYS

T = TypeVar("T")

UPSERT_CHUNK = 5_000  # rows per executemany: bounds statement memory on both drivers


def chunks(rows: list[T], size: int) -> Iterable[list[T]]:
    for start in range(0, len(rows), size):
        yield rows[start : start + size]


_STAGE_TABLE = "tp_metrics_stage"
_SMALL_BATCH = 64


def _upsert_sql(paramstyle: str, source: str | None = None) -> str:
    """INSERT ... ON CONFLICT (job_id, step) DO UPDATE, from parameters or a staging table."""
    return upsert_sql("training_metrics", ROW_KEYS, ("job_id", "step"), paramstyle, source)


@lru_cache(maxsize=256)  # layouts seen: a handful per run
def _layout(kinds: tuple[type, ...]) -> tuple[str, itemgetter[Any]]:
    """The upsert of the columns a row of these value types sets, and the getter of
    those values from a full row. Its NULLs are left out: a column left out takes its
    default, which is NULL for every nullable column of `training_metrics`, and a
    conflict still sets every column (so a rewritten step loses its old values)."""
    present = tuple(index for index, kind in enumerate(kinds) if kind is not NoneType)
    sql = upsert_sql(
        "training_metrics",
        tuple(ROW_KEYS[index] for index in present),
        ("job_id", "step"),
        "qmark",
        updated=ROW_KEYS,
    )
    return sql, itemgetter(*present)


def _sqlite_upsert(cursor: Any, params: list[list[Any]]) -> None:
    """`executemany` per layout of NULLs, each row without them.

    Python's sqlite3 binds None through its adapter lookup, several times the cost
    of a number or a string: with a row's 28 columns mostly NULL (another tool's
    run fills `extra` and a few columns), binding them cost more than SQLite's
    insert itself (docs/benchmarks.md, Ingestion). Rows keep their order within a
    layout; a batch holds each step once (`upsert_metrics`), so the order across
    layouts does not matter."""
    by_layout: dict[tuple[type, ...], list[list[Any]]] = {}
    for row in params:
        by_layout.setdefault(tuple(map(type, row)), []).append(row)
    for kinds, rows in by_layout.items():
        sql, values = _layout(kinds)
        for chunk in chunks(rows, UPSERT_CHUNK):
            cursor.executemany(sql, map(values, chunk))


def bulk_upsert(session: Session, params: list[list[Any]], *, appending: bool) -> None:
    """Write rows with the fastest path each database offers.

    SQLAlchemy's per-row parameter processing costs more than the database
    does here, so rows go to the DBAPI cursor directly (see benchmarks/):
    SQLite takes a plain `executemany` per layout of NULLs. PostgreSQL takes COPY: straight into
    the table when `appending` (every step is past the job's last stored one,
    so no row can conflict: the CAS that opened this transaction keeps other
    syncs of the job out until it commits), otherwise into a per-connection
    temporary table, then one INSERT ... SELECT ... ON CONFLICT. Either beats
    even pipelined executemany (docs/benchmarks.md, Ingestion).
    """
    connection = session.connection()
    dialect = connection.dialect
    cursor = connection.connection.driver_connection.cursor()  # type: ignore[union-attr]
    columns = ", ".join(f'"{key}"' for key in ROW_KEYS)
    try:
        if dialect.name == "sqlite":
            _sqlite_upsert(cursor, params)
            return
        # Live syncs carry a few records: on PostgreSQL, COPY's staging table
        # would cost more round trips than a pipelined executemany of so few.
        if len(params) <= _SMALL_BATCH:
            for chunk in chunks(params, UPSERT_CHUNK):
                cursor.executemany(_upsert_sql(dialect.paramstyle), chunk)
            return
        if appending:
            with cursor.copy(f"COPY training_metrics ({columns}) FROM STDIN") as copy:
                for row in params:
                    copy.write_row(row)
            return
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {_STAGE_TABLE} "
            "(LIKE training_metrics INCLUDING DEFAULTS) ON COMMIT DELETE ROWS"
        )
        with cursor.copy(f"COPY {_STAGE_TABLE} ({columns}) FROM STDIN") as copy:
            for row in params:
                copy.write_row(row)
        cursor.execute(_upsert_sql(dialect.paramstyle, _STAGE_TABLE))
        cursor.execute(f"TRUNCATE {_STAGE_TABLE}")
    finally:
        cursor.close()
