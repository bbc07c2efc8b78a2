"""Shared fixtures: a fresh database per test on SQLite and PostgreSQL, settings, app.

`TEST_DATABASES` picks the backends (default "sqlite,postgresql");
`TEST_POSTGRES_URL` points at a server where we may create a scratch
database (default the local one, user postgres, database test). Without a
reachable server the PostgreSQL variants skip, saying why.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.orm import Session, sessionmaker

from training_platform.api.main import create_app
from training_platform.core.database import make_engine, make_session_factory, migrate_to_head
from training_platform.settings import Settings

pytest_plugins = ["tests.fixtures_sshd"]

# Starlette's TestClient sends `Host: testserver`, which the server's Host check
# (api/security.py) refuses unless allowed; tests that check Host set their own.
os.environ.setdefault("PLATFORM_ALLOWED_HOSTS", "testserver")

POSTGRES_URL = os.environ.get(
    "TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
BACKENDS = [
    name.strip()
    for name in os.environ.get("TEST_DATABASES", "sqlite,postgresql").split(",")
    if name.strip()
]
_TABLES = ("anomalies", "training_metrics", "sync_state", "jobs", "deleted_jobs")


class _PostgresServer:
    """One scratch database per test session, migrated once, truncated per test."""

    def __init__(self) -> None:
        self.url: str | None = None
        self.skip_reason: str | None = None
        self._admin: Engine | None = None

    def start(self) -> str:
        if self.url or self.skip_reason:
            if self.skip_reason:
                pytest.skip(self.skip_reason)
            assert self.url
            return self.url
        admin = create_engine(POSTGRES_URL, isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as exc:
            reason = exc.__class__.__name__
            self.skip_reason = f"PostgreSQL not reachable at {POSTGRES_URL}: {reason}"
            admin.dispose()
            pytest.skip(self.skip_reason)
        name = f"tp_test_{uuid.uuid4().hex[:12]}"
        with admin.connect() as connection:
            connection.execute(text(f'CREATE DATABASE "{name}"'))
        self._admin = admin
        self.url = make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
        engine = make_engine(self.url)
        migrate_to_head(engine)
        engine.dispose()
        return self.url

    def stop(self) -> None:
        if self._admin is not None and self.url is not None:
            name = make_url(self.url).database
            with self._admin.connect() as connection:
                connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            self._admin.dispose()


@pytest.fixture(scope="session")
def _postgres() -> Iterator[_PostgresServer]:
    server = _PostgresServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (faster than migrating each time)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate_to_head(engine)
    engine.dispose()
    return path


@pytest.fixture(params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    _postgres: _PostgresServer,
    _sqlite_template: Path,
) -> str:
    """The URL of an empty, migrated database of the parametrised backend."""
    if request.param == "sqlite":
        path = tmp_path / "platform.db"
        shutil.copyfile(_sqlite_template, path)
        return f"sqlite:///{path}"
    url = _postgres.start()
    engine = create_engine(url)
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join(_TABLES)} RESTART IDENTITY CASCADE"))
    engine.dispose()
    return url


@pytest.fixture
def engine(database_url: str) -> Iterator[Engine]:
    engine = make_engine(database_url)
    yield engine
    engine.dispose()


@pytest.fixture
def session_factory(engine: Engine) -> sessionmaker[Session]:
    return make_session_factory(engine)


@pytest.fixture
def metrics_dir(tmp_path: Path) -> Path:
    path = tmp_path / "metrics"
    path.mkdir()
    return path


@pytest.fixture
def settings(database_url: str, metrics_dir: Path, tmp_path: Path) -> Settings:
    key_dir = tmp_path / "keys"
    key_dir.mkdir()
    return Settings(
        DATABASE_URL=database_url,
        PLATFORM_METRICS_DIR=metrics_dir,
        PLATFORM_API_TOKEN=None,
        PLATFORM_SSH_KEY_DIR=key_dir,
        PLATFORM_POLL_INTERVAL=0,  # tests sync explicitly; background rounds are tested apart
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client
