"""Shared fixtures: a fresh database per test on SQLite and PostgreSQL, settings, app.

`TEST_DATABASES` picks the backends (default "sqlite,postgresql");
`TEST_POSTGRES_URL` points at a server where we may create scratch
databases (default the local one, user postgres, database test; see
`tests/fixtures_postgres.py`, whose `scratch_postgres` fixture is the only
place that makes them). Without a reachable server the PostgreSQL variants
skip, saying why.

Markers are also given here, by rule (`pytest_collection_modifyitems`), so the
fast lane (`make test-fast`, `-m "not slow and not browser"`) needs no
decorator in the tests: see docs/testing.md.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session, sessionmaker

from tests.webhook_receiver import Receiver
from training_platform.api.main import create_app
from training_platform.settings import Settings
from training_platform.store.database import make_engine, make_session_factory, migrate_to_head

if TYPE_CHECKING:  # imported as a plugin below, so that pytest rewrites its asserts
    from tests.fixtures_postgres import MigratedPostgres

pytest_plugins = ["tests.fixtures_postgres", "tests.fixtures_sshd"]

# Starlette's TestClient sends `Host: testserver`, which the server's Host check
# (api/security.py) refuses unless allowed; tests that check Host set their own.
os.environ.setdefault("PLATFORM_ALLOWED_HOSTS", "testserver")

BACKENDS = [
    name.strip()
    for name in os.environ.get("TEST_DATABASES", "sqlite,postgresql").split(",")
    if name.strip()
]
_TABLES = (
    "anomalies",
    "training_metrics",
    "sync_state",
    "jobs",
    "deleted_jobs",
    "server_instances",
)
_DATA_HOME: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    """No test writes into the real user's data directory, the default metrics
    directory of the callback and the server (callbacks/wire/locations.py): both
    point into a temporary directory for the whole run, subprocesses included.
    Tests of the default itself set XDG_DATA_HOME / HOME and drop PLATFORM_METRICS_DIR."""
    data_home = tempfile.mkdtemp(prefix="training-platform-tests-")
    _DATA_HOME.append(data_home)
    os.environ["XDG_DATA_HOME"] = data_home
    os.environ["PLATFORM_METRICS_DIR"] = os.path.join(data_home, "training-platform", "metrics")


def pytest_unconfigure(config: pytest.Config) -> None:
    while _DATA_HOME:
        shutil.rmtree(_DATA_HOME.pop(), ignore_errors=True)


# --- markers by rule ------------------------------------------------------------------
# `make test-fast` runs -m "not slow and not browser"; CI (`make test`) runs everything.
# Rather than decorating tests, the markers are given here:
#   browser   every test that uses the `browser` fixture (headless Chromium; `page` uses it)
#   slow      everything under tests/soak/, and the tests named in SLOW_TESTS below,
#             each measured at over ~2 s (subprocesses, real servers, long runs)
#   ssh       every test that uses the session's sshd (`sshd`, `sshd_server`)
#   postgres  the PostgreSQL variant of a backend-parametrised test, and any test that
#             asks `scratch_postgres` for a database without a backend parameter
# Tests may still carry the markers themselves (the soak, the wheel install, ...).

SLOW_DIRS = ("soak",)  # directories under tests/
# "file name::test function" (any directory, every parametrisation), each measured at over
# ~2 s on a 2-core machine: `pytest --durations=30 -m "not slow and not browser"` finds more.
# A whole-suite run warns about entries that match no test (renamed or removed).
SLOW_TESTS = frozenset(
    {
        # callbacks: subprocesses and real trainers
        "test_demo.py::test_a_long_healthy_demo_run_learns_and_raises_no_false_alarm",
        "test_demo.py::test_sigterm_to_the_demo_stops_its_trainer_too",
        "test_demo.py::test_the_demo_command_runs_runs_to_compare_keeps_its_log_quiet_and_reaps_them",
        "test_status_transitions.py::test_a_status_file_never_goes_back_while_both_threads_write_it",
        "test_detector_cost.py::test_the_fused_path_equivalence_runs_see_every_kind_of_anomaly",
        "test_trl_samples.py::test_a_real_grpo_run_records_every_completion_with_its_rewards",
        "test_sample_diagnostics_demo.py::test_a_healthy_demo_run_raises_no_finding_from_its_samples",
        "test_sample_diagnostics_demo.py::"
        "test_the_demos_learning_rate_blow_up_is_caught_from_its_samples_within_5_steps",
        "test_demo_incidents.py::test_the_demos_blow_up_is_a_handful_of_lasting_incidents",
        "test_demo_incidents.py::test_a_healthy_demo_run_of_the_same_length_raises_no_incident",
        "test_several_processes.py::"
        "test_every_client_of_every_process_gets_every_step_once_in_order_through_a_kill",
        # ingest and history
        "test_persister.py::test_a_killed_sync_process_resumes_without_loss_or_duplicate",
        "test_persister.py::test_many_small_appends_arrive_in_order",
        "test_downsample.py::test_a_long_run_comes_back_as_exact_bucket_summaries",
        "test_export.py::test_a_long_run_is_read_a_chunk_at_a_time_and_lazily",
        "test_migrations.py::test_migrate_command_upgrades_then_is_a_no_op",
        # API: real servers, many clients, timeouts waited out
        "test_slow_clients.py::test_sigterm_stops_the_server_promptly_with_stalled_clients_and_a_seek_flood",
        "test_slow_clients.py::test_clients_that_never_read_are_closed_by_the_send_timeout",
        "test_slow_clients.py::test_clients_that_never_read_are_closed_by_the_ping_timeout",
        "test_ssh_jobs_api.py::test_an_unreachable_host_is_503_on_sync_and_recovers",
        "test_live_fanout.py::test_fifty_clients_get_everything_while_a_slow_one_is_dropped",
        "test_live_fanout.py::test_a_client_that_stops_answering_pings_is_dropped",
        "test_artifact_safety.py::test_a_file_swapped_for_a_fifo_answers_promptly_and_pins_nothing",
        "test_artifact_safety.py::test_a_file_swapped_for_a_symlink_never_leaks_the_outside",
        "test_live_progress.py::test_progress_reaches_status_only_clients_coalesced_and_identical",
        "test_export_api.py::test_a_client_that_disconnects_mid_export_stops_the_reading",
        "test_notebook_example.py::test_the_notebook_example_plots_two_runs_and_their_final_mean",
    }
)
_BACKEND_NAMES = ("sqlite", "postgresql")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests_dir = Path(__file__).parent
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        if "browser" in fixtures:
            item.add_marker(pytest.mark.browser)
        if "sshd_server" in fixtures:
            item.add_marker(pytest.mark.ssh)
        relative = item.path.relative_to(tests_dir) if item.path.is_relative_to(tests_dir) else None
        name = getattr(item, "originalname", item.name)
        if (relative is not None and relative.parts[0] in SLOW_DIRS) or (
            f"{item.path.name}::{name}" in SLOW_TESTS
        ):
            item.add_marker(pytest.mark.slow)
        callspec = getattr(item, "callspec", None)
        params = callspec.params.values() if callspec is not None else ()
        backends = {value for value in params if isinstance(value, str)} & set(_BACKEND_NAMES)
        if "postgresql" in backends or (not backends and "scratch_postgres" in fixtures):
            item.add_marker(pytest.mark.postgres)
    if config.args_source is pytest.Config.ArgsSource.TESTPATHS:
        seen = {f"{item.path.name}::{getattr(item, 'originalname', item.name)}" for item in items}
        if stale := sorted(SLOW_TESTS - seen):
            warnings.warn(
                pytest.PytestWarning(f"tests/conftest.py SLOW_TESTS matches no test: {stale}"),
                stacklevel=1,
            )


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test (faster than migrating each time)."""
    path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
    engine = make_engine(f"sqlite:///{path}")
    migrate_to_head(engine)
    engine.dispose()
    return path


@pytest.fixture(params=BACKENDS)
def empty_database_url(
    request: pytest.FixtureRequest, tmp_path: Path, scratch_postgres: Callable[[], str]
) -> str:
    """A database with nothing in it (not even alembic_version)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'empty.db'}"
    return scratch_postgres()


@pytest.fixture(params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    migrated_postgres: MigratedPostgres,
    _sqlite_template: Path,
) -> str:
    """The URL of an empty, migrated database of the parametrised backend."""
    if request.param == "sqlite":
        path = tmp_path / "platform.db"
        shutil.copyfile(_sqlite_template, path)
        return f"sqlite:///{path}"
    return migrated_postgres.truncate(_TABLES)


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


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    """A webhook receiver on 127.0.0.1 (tests/webhook_receiver.py), stopped afterwards."""
    server = Receiver()
    server.thread.start()
    yield server
    server.release.set()
    server.server.shutdown()
    server.server.server_close()
