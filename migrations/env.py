"""Alembic environment: one migration tree for SQLite and PostgreSQL.

The URL comes, in order, from a connection handed over by the caller
(`database.migrate_to_head`), `-x url=...`, the config, or `Settings()`
(`DATABASE_URL`). `render_as_batch` makes ALTERs work on SQLite too.
"""

from __future__ import annotations

import logging.config

from alembic import context
from sqlalchemy.engine import Connection

from training_platform.settings import Settings
from training_platform.store import cluster_models, models  # noqa: F401  (registers the tables)
from training_platform.store.database import Base, make_engine
from training_platform.store.text_search import is_text_search_object

config = context.config
if config.config_file_name is not None and config.attributes.get("connection") is None:
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _url() -> str:
    url = context.get_x_argument(as_dictionary=True).get("url")
    return url or config.get_main_option("sqlalchemy.url") or Settings().database_url


def _include_object(
    _object: object, name: str | None, _type: str, _reflected: bool, _compare_to: object
) -> bool:
    # The text search's FTS5 tables (SQLite) and trigram GIN indexes (PostgreSQL)
    # have no model: one dialect's DDL (store/text_search.py, migration 0006),
    # which the comparison of models and database must not ask to drop.
    return not is_text_search_object(name)


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        include_object=_include_object,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_offline() -> None:
    context.configure(
        url=_url(),
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
        dialect_opts={"paramstyle": "named"},
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(Settings(DATABASE_URL=_url()).database_url)
    try:
        with engine.connect() as connection:
            _run(connection)
            connection.commit()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
