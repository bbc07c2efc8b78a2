"""Engine, sessions and schema management (SQLite by default, PostgreSQL in production).

The engine is built by the caller (the app's lifespan, the CLI, a test) from a
URL; nothing here runs at import time. The schema only changes through Alembic
(`migrations/` at the repository root); `migrate_to_head` drives it from code.
A wheel carries those same scripts as `training_platform/_migrations/` (see
setup.py), so `migrate` and `serve` work however the package is installed.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any

import orjson
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import MetaData, create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker

from training_platform.errors import PlatformError
from training_platform.store.stored_text import register_sqlite_functions

logger = logging.getLogger(__name__)

# Every constraint gets a predictable name, so migrations can drop or alter it
# on both databases (SQLite's batch mode needs names to find constraints).
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

# A wheel install: the scripts inside the package (setup.py maps migrations/
# onto training_platform/_migrations). A source checkout: the repository's.
PACKAGED_MIGRATIONS = Path(__file__).resolve().parents[1] / "_migrations"
REPO_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class MigrationsMissingError(PlatformError):
    """This installation has no Alembic scripts (a broken install)."""


class SchemaOutOfDateError(PlatformError):
    """The database is at an older schema revision than this code expects."""


def _json_dumps(value: Any) -> str:
    # orjson writes NaN as null: callers keep non-finite values aside (see
    # metric_rows.py), so JSON columns only ever hold standard JSON.
    return orjson.dumps(value).decode()


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine for `url` with the per-dialect settings this project relies on."""
    parsed = make_url(url)
    options: dict[str, Any] = {
        "json_serializer": _json_dumps,
        "json_deserializer": orjson.loads,
        **kwargs,
    }
    if parsed.get_backend_name() == "sqlite":
        options.setdefault("connect_args", {})
        # Sync runs in worker threads; SQLite's own locking serialises writers.
        options["connect_args"].setdefault("check_same_thread", False)
        options["connect_args"].setdefault("timeout", 30)
        database = parsed.database
        if database and database != ":memory:":
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    else:
        options.setdefault("pool_pre_ping", True)
    engine = create_engine(parsed, **options)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    # Takes effect only in a new, empty database (before WAL). 16 KiB pages hold
    # ~8 generated samples of 2 KB where 4 KiB pages held 2 and left a quarter
    # of each page empty (docs/benchmarks.md, Samples); small rows do not mind.
    cursor.execute("PRAGMA page_size=16384")
    # WAL lets readers (REST, WebSocket backfill) proceed while a sync writes;
    # NORMAL sync is still crash-safe in WAL mode (a crash loses at most the
    # last transactions, never consistency, and the offset commits with them).
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()
    # `tp_text`, which inflates the samples' compressed completions: the text
    # search's triggers call it on every write of a sample (store/stored_text.py).
    register_sqlite_functions(dbapi_connection)


def dialect_insert(session: Session) -> Any:
    """`insert()` of the session's dialect, which has `on_conflict_do_update`.

    SQLite (3.24+) and PostgreSQL share the ON CONFLICT syntax, so one upsert
    statement serves both; SQLAlchemy exposes it per dialect.
    """
    from sqlalchemy.dialects import postgresql, sqlite

    dialect = session.get_bind().dialect.name
    return (postgresql if dialect == "postgresql" else sqlite).insert


@functools.cache
def upsert_sql(
    table: str,
    columns: tuple[str, ...],
    keys: tuple[str, ...],
    paramstyle: str,
    source: str | None = None,
    updated: tuple[str, ...] | None = None,
) -> str:
    """INSERT ... ON CONFLICT (keys) DO UPDATE the other columns, for a DBAPI cursor.

    The same text runs on SQLite and PostgreSQL (`paramstyle` "qmark" or
    "format"/"pyformat"). Hot paths hand rows to the driver directly:
    SQLAlchemy's per-row parameter processing cost more than the database.
    With `source`, rows come from that (staging) table instead. `updated`: the
    columns a conflict sets (default: `columns`); one not inserted is set to
    its default, so a row given without its NULL columns still replaces the
    stored one whole.
    """
    quoted = ", ".join(f'"{column}"' for column in columns)
    updates = ", ".join(
        f'"{column}" = excluded."{column}"'
        for column in (columns if updated is None else updated)
        if column not in keys
    )
    if source is None:
        marker = "?" if paramstyle == "qmark" else "%s"
        rows = "VALUES (" + ", ".join([marker] * len(columns)) + ")"
    else:
        rows = f"SELECT {quoted} FROM {source}"
    conflict = ", ".join(keys)
    return f"INSERT INTO {table} ({quoted}) {rows} ON CONFLICT ({conflict}) DO UPDATE SET {updates}"


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(bind=engine, expire_on_commit=False, autoflush=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """A session that commits on success and rolls back on any error."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def migrations_dir() -> Path:
    """Where the Alembic scripts are: inside the installed package, else the checkout's."""
    for candidate in (PACKAGED_MIGRATIONS, REPO_MIGRATIONS):
        if (candidate / "env.py").is_file():
            return candidate
    raise MigrationsMissingError(
        f"no Alembic scripts in {PACKAGED_MIGRATIONS} or {REPO_MIGRATIONS}: "
        "reinstall the package (pip install --force-reinstall training-platform)"
    )


def alembic_config(url: str | None = None) -> Config:
    """The Alembic config, built in code: no alembic.ini is needed at run time.

    alembic.ini stays at the repository root for developers running `alembic`
    there (e.g. `alembic revision`); the options below mirror its own.
    """
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    config.set_main_option("path_separator", "os")
    config.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    if url is not None:
        # ConfigParser treats % as interpolation; URLs may contain %-escapes.
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


# Alembic logs each revision it runs at INFO with the revision's whole docstring
# (design notes, several lines each), plus its context set-up. Inside this
# module's calls they are details: demoted to DEBUG, so a start logs one line.
_ALEMBIC_LOGGER = "alembic.runtime.migration"
_alembic_details_quiet: ContextVar[bool] = ContextVar("alembic_details_quiet", default=False)


def _demote_alembic_details(record: logging.LogRecord) -> bool:
    if not _alembic_details_quiet.get() or record.levelno != logging.INFO:
        return True
    record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
    return logging.getLogger(_ALEMBIC_LOGGER).isEnabledFor(logging.DEBUG)


@contextmanager
def _alembic_details_at_debug() -> Iterator[None]:
    alembic_logger = logging.getLogger(_ALEMBIC_LOGGER)
    if _demote_alembic_details not in alembic_logger.filters:
        alembic_logger.addFilter(_demote_alembic_details)
    token = _alembic_details_quiet.set(True)
    try:
        yield
    finally:
        _alembic_details_quiet.reset(token)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def current_revision(engine: Engine) -> str | None:
    with _alembic_details_at_debug(), engine.connect() as connection:
        return MigrationContext.configure(connection).get_current_revision()


def migrate_to_head(engine: Engine) -> None:
    """Upgrade the database to the newest schema; a no-op when it is there already.

    Alembic's per-revision lines are logged at DEBUG; the caller says what changed.
    """
    config = alembic_config(engine.url.render_as_string(hide_password=False))
    with _alembic_details_at_debug(), engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def prepare_schema(engine: Engine, *, auto_migrate: bool) -> None:
    """Bring a fresh database to head; refuse to run on an out-of-date one.

    An existing database at an older revision is not upgraded silently: a
    migration on a production PostgreSQL is an operator's decision
    (`training-platform migrate`).
    """
    current, head = current_revision(engine), head_revision()
    if current == head:
        return
    if current is None and auto_migrate:
        logger.info("fresh database: creating the schema (revision %s)", head)
        migrate_to_head(engine)
        return
    raise SchemaOutOfDateError(
        f"database schema is at revision {current or 'none'}, this version needs {head}: "
        "run `training-platform migrate`"
    )
