"""One run of an MLflow tracking database (`sqlite:///...`, `postgresql://...`) as a
job's metrics: its `metrics` rows, its params (the config), its tags and name, and
its status.

The database is MLflow's: read with SQLAlchemy through MLflow's own table
layout (`metrics`: key, value, timestamp in ms, step, is_nan, run_uuid), never
written, on an engine of its own per tracking URI (a SQLite file is opened
read only). The cursor kept in `sync_state.offset`:

- **SQLite**: the row's `rowid`, which only grows as MLflow inserts, so each
  row is read once, exactly;
- **PostgreSQL** has no insertion order to page by, so the cursor is a
  timestamp (ms). While catching up, the rows after it, cut only between two
  timestamps (a `log_metrics` call's keys share one); once caught up, each
  read looks `LOOKBACK_MS` back as well, so a row committed late (MLflow's
  async logging) is still read. A row read twice changes nothing: records
  are merged into the stored steps and a step that did not change is
  neither written nor announced again (`merged_steps.py`).

A row's value is NaN when `is_nan` says so; keys map with the trainers' key
table (`train/loss`, `actor/pg_loss`, ...), the rest under `extra`. Params
are strings in MLflow: numbers, booleans and JSON values are read as such.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from functools import partial
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Engine,
    Float,
    MetaData,
    String,
    Table,
    case,
    create_engine,
    null,
    select,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, SQLAlchemyError
from sqlalchemy.pool import NullPool

from training_platform.errors import InvalidSourceError, MetricsSourceError
from training_platform.ingest.file_kinds import LineFileKind
from training_platform.ingest.formats.merged_steps import merged_metrics_kind
from training_platform.ingest.formats.mlflow_rows import (
    BatchRows,
    batch_end,
    read_rows_after,
    records_of,
    rows_until,
)
from training_platform.ingest.line_scanner import ReadBatch, ReadPosition
from training_platform.ingest.read_ahead import ReadAhead

ROW_BYTES: Final = 64  # a batch's rows: about max_bytes / ROW_BYTES
LOOKBACK_MS: Final = 30_000
SYSTEM_TAGS: Final = "mlflow."
# MLflow's run status -> the job's.
STATUSES: Final = {
    "RUNNING": "running",
    "SCHEDULED": "pending",
    "FINISHED": "completed",
    "FAILED": "failed",
    "KILLED": "stopped",
}

_meta = MetaData()
_metrics = Table(
    "metrics", _meta,
    Column("key", String), Column("value", Float), Column("timestamp", BigInteger),
    Column("run_uuid", String), Column("step", BigInteger), Column("is_nan", Boolean),
)  # fmt: skip
_params = Table("params", _meta, Column("key", String), Column("value", String),
                Column("run_uuid", String))  # fmt: skip
_tags = Table("tags", _meta, Column("key", String), Column("value", String),
              Column("run_uuid", String))  # fmt: skip
_runs = Table("runs", _meta, Column("run_uuid", String), Column("name", String),
              Column("status", String))  # fmt: skip

_engines: dict[str, Engine] = {}
_engines_guard = threading.Lock()


def check_tracking_uri(uri: str) -> str:
    """`uri` if this version reads that kind of MLflow store; `InvalidSourceError` else.

    A file store (`file:` or an absolute path: `mlflow_files.py`, its directory checked
    by the registry) and a tracking server (`http(s)://`: `mlflow_rest.py`) are
    told by their prefix; anything else must be a tracking database's URL."""
    if uri.startswith(("file:", "/")):
        return uri
    if uri.startswith(("http://", "https://")):
        if not urlsplit(uri).hostname:
            raise InvalidSourceError(f"tracking_uri {shown_url(uri)!r}: a server needs a host")
        return uri
    try:
        url = make_url(uri)
    except ArgumentError:
        raise InvalidSourceError(f"tracking_uri {shown_url(uri)!r} is not a database URL") from None
    if url.get_backend_name() not in ("sqlite", "postgresql") or (
        url.get_backend_name() == "sqlite" and not url.database
    ):
        raise InvalidSourceError(
            "tracking_uri: an MLflow tracking database (sqlite:///<file> or postgresql://...), "
            "a file store (file:///<directory>) or a tracking server (http(s)://host:port)"
        )
    return uri


def shown_url(uri: str) -> str:
    """`uri` with its password hidden, for answers and messages."""
    if uri.startswith(("http://", "https://")):
        try:
            parts = urlsplit(uri)
            if parts.password is None:
                return uri
            where = parts.netloc.rpartition("@")[2]
            return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{where}"))
        except ValueError:  # a bad port, say
            return "<unparsable>"
    if uri.startswith(("file:", "/")):
        return uri
    try:
        return make_url(uri).render_as_string(hide_password=True)
    except ArgumentError:
        return "<unparsable>"


def engine_for(uri: str) -> Engine:
    """One engine per tracking URI, kept: a SQLite file opened read only, PostgreSQL
    through the server's own driver; no pooled connection is held between reads."""
    with _engines_guard:
        engine = _engines.get(uri)
        if engine is None:
            url = make_url(uri)
            if url.get_backend_name() == "sqlite":
                url = url.set(database=f"file:{url.database}", query={"mode": "ro", "uri": "true"})
            elif url.drivername == "postgresql":
                url = url.set(drivername="postgresql+psycopg")
            engine = create_engine(url, poolclass=NullPool)
            _engines[uri] = engine
        return engine


def read_run(position: ReadPosition, max_bytes: int, *, uri: str, run_id: str) -> ReadBatch:
    """The metric rows of run `run_id` after `position`, as records, with the run's
    params, tags and name once there are rows."""
    limit = max(1, max_bytes // ROW_BYTES)
    engine = engine_for(uri)
    try:
        with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                records, at, count = _after_rowid(connection, uri, run_id, position.offset, limit)
                after = ReadPosition(at)
                complete = count < limit
            else:
                rows, after, complete = _after_time(connection, run_id, position, limit)
                records = records_of(rows)
            about = _about(connection, run_id) if records else None
    except (SQLAlchemyError, sqlite3.Error) as exc:  # the latter: the driver's own cursor
        reason = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        raise MetricsSourceError(
            f"cannot read MLflow run {run_id} at {shown_url(uri)}: {reason[0] if reason else exc}"
        ) from None
    return ReadBatch(
        records=records, position=after, at_eof=complete, file_size=after.offset, about=about
    )


# A catch-up's batches of this many rows or more are read one ahead by a worker
# process (`read_ahead.py`): below, its start would cost more than it saves.
READ_AHEAD_ROWS: Final = 8192
_read_ahead = ReadAhead()


def _after_rowid(connection: Any, uri: str, run_id: str, after: int, limit: int) -> BatchRows:
    """The batch of (at most `limit`) rows after rowid `after`: read ahead by the
    worker, or inline. While the run is behind, the worker starts on the next batch
    before this one is read (its start is hidden behind this batch's read and store)."""
    source = (uri, run_id)
    batch: BatchRows | None = _read_ahead.take(source, (after, limit))
    if batch is not None:
        _read_ahead_next(source, uri, run_id, batch[1], batch[2], limit)
        return batch
    cursor = connection.connection.cursor()
    try:
        count, last = batch_end(cursor, run_id, after, limit)
        _read_ahead_next(source, uri, run_id, last, count, limit)
        return rows_until(cursor, run_id, after, last), last, count
    finally:
        cursor.close()


def _read_ahead_next(
    source: tuple[str, str], uri: str, run_id: str, last: int, count: int, limit: int
) -> None:
    """Start the worker on the batch after `last` if this one was full (and big)."""
    if count < limit or limit < READ_AHEAD_ROWS:
        _read_ahead.caught_up(source)
    else:
        path = str(make_url(uri).database)
        _read_ahead.start(source, (last, limit), read_rows_after, path, run_id, last, limit)


def stop_reading_ahead() -> None:
    """Stop the read-ahead worker, if one runs (a server's close)."""
    _read_ahead.stop()


def _after_time(
    connection: Any, run_id: str, position: ReadPosition, limit: int
) -> tuple[list[Any], ReadPosition, bool]:
    """Rows by timestamp (see the module doc): `discarding` marks a catch-up."""
    since = position.offset if position.discarding else position.offset - LOOKBACK_MS
    rows = connection.execute(
        select(_metrics.c.key, case((_metrics.c.is_nan, null()), else_=_metrics.c.value),
               _metrics.c.timestamp, _metrics.c.step)
        .where(_metrics.c.run_uuid == run_id, _metrics.c.timestamp > since)
        .order_by(_metrics.c.timestamp)
        .limit(limit + 1)
    ).all()  # fmt: skip
    if len(rows) <= limit:  # caught up: next time, look back again
        last = max([position.offset, *(row[2] for row in rows)])
        return rows, ReadPosition(last), True
    # Cut between two timestamps: the last one's rows may go on past the limit.
    rows = rows[:limit]
    last = rows[-1][2]
    kept = [row for row in rows if row[2] < last] or rows  # one timestamp past the limit
    return kept, ReadPosition(kept[-1][2], discarding=True), False


def _about(connection: Any, run_id: str) -> dict[str, Any]:
    params = connection.execute(
        select(_params.c.key, _params.c.value).where(_params.c.run_uuid == run_id)
    ).all()
    tags = connection.execute(
        select(_tags.c.key, _tags.c.value).where(_tags.c.run_uuid == run_id)
    ).all()
    name = connection.scalar(select(_runs.c.name).where(_runs.c.run_uuid == run_id))
    about: dict[str, Any] = {
        "config": {key: _param(value) for key, value in params},
        "tags": [f"{key}:{value}" if value else key for key, value in tags
                 if not key.startswith(SYSTEM_TAGS)],
    }  # fmt: skip
    if name:
        about["name"] = name
    return about


def _param(value: str) -> Any:
    """An MLflow param (always a string) as the value it was: 1e-05 -> 1e-05 (a float)."""
    try:
        parsed = json.loads(value)
    except (TypeError, ValueError):
        return value
    return parsed if isinstance(parsed, int | float | bool | list | dict) else value


def run_status(uri: str, run_id: str) -> str | None:
    """The job status of the run's MLflow status (None: the run is not there)."""
    try:
        with engine_for(uri).connect() as connection:
            status = connection.scalar(select(_runs.c.status).where(_runs.c.run_uuid == run_id))
    except SQLAlchemyError:
        return None  # the metrics read says what is wrong
    return None if status is None else STATUSES.get(str(status).upper())


def mlflow_kind(uri: str, run_id: str) -> LineFileKind:
    return merged_metrics_kind(query=partial(read_run, uri=uri, run_id=run_id))
