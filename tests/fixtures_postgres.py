"""Scratch PostgreSQL databases for the tests: the one place that makes and drops them.

Enabled with ``pytest_plugins = ["tests.fixtures_postgres"]`` in ``tests/conftest.py``.

`TEST_POSTGRES_URL` points at a server where we may create databases
(default the local one, user postgres, database test). Every scratch database
is named ``tp_test_<hex>``, made empty, and dropped (``WITH (FORCE)``) when the
test (or, for the session's migrated one, the session) that asked for it ends.
Without a reachable server the tests that ask for one skip, saying why.

    def test_something(scratch_postgres):
        url = scratch_postgres()  # a fresh, empty database; dropped afterwards

`migrated_postgres` is the session's one migrated database behind the
`database_url` fixture's PostgreSQL variant (truncated per test in conftest).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator, Sequence

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url

from training_platform.store.database import make_engine, migrate_to_head

POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
PREFIX = "tp_test_"


class ScratchPostgres:
    """Creates and drops scratch databases on the server at `admin_url`.

    Nothing connects until the first `create`; whether the server answers is
    probed once, and every later `create` skips with the same reason.
    """

    def __init__(self, admin_url: str = POSTGRES_URL) -> None:
        self.admin_url = admin_url
        self._admin: Engine | None = None
        self._skip_reason: str | None = None
        self._live: set[str] = set()

    def _engine(self) -> Engine:
        if self._skip_reason:
            pytest.skip(self._skip_reason)
        if self._admin is None:
            admin = create_engine(self.admin_url, isolation_level="AUTOCOMMIT")
            try:
                with admin.connect() as connection:
                    connection.execute(text("SELECT 1"))
            except Exception as exc:
                admin.dispose()
                shown = make_url(self.admin_url).render_as_string(hide_password=True)
                self._skip_reason = (
                    f"PostgreSQL not reachable at {shown}: {exc.__class__.__name__}"
                    " (set TEST_POSTGRES_URL, or TEST_DATABASES=sqlite)"
                )
                pytest.skip(self._skip_reason)
            self._admin = admin
        return self._admin

    def create(self) -> str:
        """The URL of a new, empty database (no tables, not even alembic_version)."""
        admin = self._engine()
        name = f"{PREFIX}{uuid.uuid4().hex[:12]}"
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        self._live.add(name)
        return make_url(self.admin_url).set(database=name).render_as_string(hide_password=False)

    def drop(self, url: str) -> None:
        name = make_url(url).database
        if name not in self._live or self._admin is None:
            return
        with self._admin.connect() as connection:
            connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._live.discard(name)

    def close(self) -> None:
        """Drops whatever is left, then the admin connection."""
        if self._admin is None:
            return
        for name in sorted(self._live):
            with self._admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._live.clear()
        self._admin.dispose()
        self._admin = None


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[ScratchPostgres]:
    """The session's handle on the PostgreSQL server (connects lazily, drops leftovers)."""
    server = ScratchPostgres()
    yield server
    server.close()


@pytest.fixture
def scratch_postgres(postgres_server: ScratchPostgres) -> Iterator[Callable[[], str]]:
    """A factory: each call makes a fresh, empty database and returns its URL.

    The databases are dropped when the test ends; without a server, the call skips.
    """
    made: list[str] = []

    def make() -> str:
        url = postgres_server.create()
        made.append(url)
        return url

    yield make
    for url in made:
        postgres_server.drop(url)


class MigratedPostgres:
    """One scratch database for the whole session, made and migrated by the first
    test that needs it; `postgres_server` drops it when the session ends."""

    def __init__(self, server: ScratchPostgres) -> None:
        self.server = server
        self._url: str | None = None
        self._engine: Engine | None = None

    def url(self) -> str:
        if self._url is None:
            url = self.server.create()  # skips, with the reason, without a server
            engine = make_engine(url)
            try:
                migrate_to_head(engine)
            finally:
                engine.dispose()
            self._url = url
        return self._url

    def truncate(self, tables: Sequence[str]) -> str:
        """Empties `tables` (identities restarted); returns the URL. One engine for
        the session: a new one per test cost more than the TRUNCATE itself."""
        url = self.url()
        if self._engine is None:
            self._engine = create_engine(url)
        with self._engine.begin() as connection:
            connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        return url

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None


@pytest.fixture(scope="session")
def migrated_postgres(postgres_server: ScratchPostgres) -> Iterator[MigratedPostgres]:
    migrated = MigratedPostgres(postgres_server)
    yield migrated
    migrated.close()
