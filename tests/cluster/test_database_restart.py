"""Faults of the one shared engine: PostgreSQL restarted under load, and PostgreSQL
briefly unreachable, with two server processes ingesting and serving live clients.

A PostgreSQL server of the test's own (initdb in a temporary directory, run as
the `postgres` user on a free port), so stopping it disturbs no other test.
Whatever the outage, every client ends with every step exactly once and in
order, and every line is ingested once (`sync_state.records_ingested`): the
processes' pools, listeners and lease rounds reconnect by themselves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from tests.api.live_support import append_steps, open_ws, receive_until, wait_for
from tests.api.test_several_processes import Server, answers, free_port, steps_until
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory, migrate_to_head
from training_platform.store.models import SyncState

BIN = next(iter(sorted(Path("/usr/lib/postgresql").glob("*/bin"))), None)
LIVE = "/api/monitoring/run1/live"


class PrivatePostgres:
    """initdb + pg_ctl as `postgres` in a directory of its own, on a free port."""

    def __init__(self) -> None:
        assert BIN is not None
        self.root = Path(tempfile.mkdtemp(prefix="tp-private-pg-", dir="/tmp"))
        self.data = self.root / "data"
        self.port = free_port()
        shutil.chown(self.root, "postgres")
        self._as_postgres(BIN / "initdb", "-D", self.data, "-A", "trust", "-U", "postgres",
                          "--no-sync", "-E", "UTF8")  # fmt: skip
        self.start()
        admin = create_engine(self.url("postgres"), isolation_level="AUTOCOMMIT")
        with admin.connect() as connection:
            connection.execute(text('CREATE DATABASE "platform"'))
        admin.dispose()

    def url(self, database: str = "platform") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _as_postgres(self, *command: object) -> None:
        args = ["runuser", "-u", "postgres", "--", *map(str, command)]
        subprocess.run(args, check=True, capture_output=True, timeout=120)

    def _ctl(self, *action: str) -> None:
        options = f"-p {self.port} -k {self.root} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._as_postgres(BIN / "pg_ctl", "-D", self.data, "-o", options, "-l",
                          self.root / "log", "-w", *action)  # fmt: skip

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("-m", "fast", "stop")

    def restart(self) -> None:
        self._ctl("-m", "fast", "restart")

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def private_postgres() -> Iterator[PrivatePostgres]:
    if BIN is None or shutil.which("runuser") is None or os.geteuid() != 0:
        pytest.skip("needs Debian's PostgreSQL binaries and root (to run them as postgres)")
    server = PrivatePostgres()
    try:
        yield server
    finally:
        server.close()


def ingested(url: str) -> int:
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            state = session.get(SyncState, ("run1", "metrics"))
            return state.records_ingested if state is not None else 0
    finally:
        engine.dispose()


@pytest.mark.parametrize("outage", ["restart", "unreachable"])
def test_live_clients_miss_nothing_when_postgresql_goes_away_and_comes_back(
    private_postgres: PrivatePostgres, metrics_dir: Path, tmp_path: Path, outage: str
) -> None:
    url = private_postgres.url()
    engine = make_engine(url)
    migrate_to_head(engine)
    engine.dispose()
    settings = Settings(DATABASE_URL=url, PLATFORM_METRICS_DIR=metrics_dir)
    run1 = metrics_dir / "run1_metrics.jsonl"
    append_steps(run1, range(0, 10))
    servers = [Server(settings, metrics_dir, tmp_path / f"server{i}.log") for i in range(2)]
    try:
        for server in servers:
            assert wait_for(lambda s=server: answers(s.base + "/healthz"), timeout=60)
        with ExitStack() as stack:
            clients = [stack.enter_context(open_ws(server.ws(LIVE))) for server in servers]
            for ws in clients:
                receive_until(ws, lambda got: bool(got), timeout=20)
            append_steps(run1, range(10, 30))
            for ws in clients:
                assert steps_until(ws, 29) == list(range(10, 30))

            if outage == "restart":
                private_postgres.restart()
                append_steps(run1, range(30, 60))
            else:
                private_postgres.stop()
                # Appended while nobody can store them, for longer than a lease (2 s):
                # the leases expire meanwhile and are claimed again afterwards.
                for start in range(30, 60, 10):
                    append_steps(run1, range(start, start + 10))
                    time.sleep(1.0)
                private_postgres.start()
            for ws in clients:
                assert steps_until(ws, 59, timeout=60) == list(range(30, 60))
        assert ingested(url) == 60
    finally:
        for server in servers:
            server.stop()
