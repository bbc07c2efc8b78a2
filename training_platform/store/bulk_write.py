"""Rows into `training_metrics` by the fastest path each database offers (see benchmarks/)."""

from __future__ import annotations

from collections.abc import Iterable
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


def bulk_upsert(session: Session, params: list[list[Any]], *, appending: bool) -> None:
    """Write rows with the fastest path each database offers.

    SQLAlchemy's per-row parameter processing costs more than the database
    does here, so rows go to the DBAPI cursor directly (see benchmarks/):
    SQLite takes a plain `executemany`. PostgreSQL takes COPY: straight into
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
        # Live syncs carry a few records: on PostgreSQL, COPY's staging table
        # would cost more round trips than a pipelined executemany of so few.
        if dialect.name != "postgresql" or len(params) <= _SMALL_BATCH:
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
