"""Alembic: one head, up/down/up on both databases, models == migrations, CLI no-op."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from alembic.util.exc import CommandError
from fastapi.testclient import TestClient
from sqlalchemy import Connection, inspect, text
from sqlalchemy.engine import Engine

from training_platform.api.main import create_app
from training_platform.callbacks.wire.records import build_record
from training_platform.history.samples_query import SampleFilter, sample_page
from training_platform.history.series.answer import downsampled_history
from training_platform.ingest.metrics_file import upsert_metrics
from training_platform.settings import Settings
from training_platform.store.database import (
    SchemaOutOfDateError,
    alembic_config,
    current_revision,
    head_revision,
    make_engine,
    make_session_factory,
    prepare_schema,
)
from training_platform.store.models import Job
from training_platform.store.stored_text import unpack_text

TABLES = {"jobs", "training_metrics", "anomalies", "sync_state", "deleted_jobs"}


def test_the_migration_tree_has_a_single_head() -> None:
    heads = ScriptDirectory.from_config(alembic_config()).get_heads()
    assert heads == [head_revision()]


def test_upgrade_downgrade_upgrade_and_models_agree(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "head")
    engine = make_engine(empty_database_url)
    try:
        assert set(inspect(engine).get_table_names()) >= TABLES
        command.downgrade(config, "base")
        assert not TABLES & set(inspect(engine).get_table_names())
        command.upgrade(config, "head")
        command.upgrade(config, "head")  # twice is a no-op
        assert current_revision(engine) == head_revision()
        command.check(config)  # raises when models and migrations disagree
    finally:
        engine.dispose()


def test_check_fails_when_the_models_drift(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "head")
    engine = make_engine(empty_database_url)
    with engine.begin() as connection:
        connection.execute(text("DROP INDEX ix_anomalies_job_id_step"))
    engine.dispose()
    with pytest.raises(CommandError, match="New upgrade operations detected"):
        command.check(config)


def test_migrate_command_upgrades_then_is_a_no_op(empty_database_url: str) -> None:
    env = {**os.environ, "DATABASE_URL": empty_database_url}
    cli = [sys.executable, "-m", "training_platform", "migrate"]
    first = subprocess.run(cli, env=env, capture_output=True, text=True, check=True)
    second = subprocess.run(cli, env=env, capture_output=True, text=True, check=True)
    assert f"migrated from empty to {head_revision()}" in first.stdout
    assert f"already at revision {head_revision()}" in second.stdout


def test_serve_brings_a_fresh_sqlite_file_up_by_itself(tmp_path: Path) -> None:
    database = tmp_path / "fresh" / "platform.db"
    settings = Settings(
        DATABASE_URL=f"sqlite:///{database}",
        PLATFORM_METRICS_DIR=tmp_path,
        PLATFORM_POLL_INTERVAL=0,
    )
    with TestClient(create_app(settings)) as client:
        assert client.get("/api/jobs").json() == {"jobs": []}
    engine = make_engine(settings.database_url)
    assert current_revision(engine) == head_revision()
    engine.dispose()


def test_a_first_start_logs_one_line_and_the_migrations_details_at_debug(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings(
        DATABASE_URL=f"sqlite:///{tmp_path / 'platform.db'}",
        PLATFORM_METRICS_DIR=tmp_path,
        PLATFORM_POLL_INTERVAL=0,
    )
    caplog.set_level(logging.INFO)
    with TestClient(create_app(settings)):  # the server's lifespan: prepare_schema
        pass
    revisions = list(ScriptDirectory.from_config(alembic_config()).walk_revisions())
    schema_lines = [
        record
        for record in caplog.records
        if record.name.startswith(("alembic", "training_platform.store"))
    ]
    assert [record.getMessage() for record in schema_lines] == [
        f"fresh database: creating the schema (revision {head_revision()})"
    ]
    assert len(revisions) > 1  # one line in all, not one per revision

    # The details are still there for whoever asks for them.
    caplog.clear()
    caplog.set_level(logging.DEBUG, logger="alembic")
    engine = make_engine(f"sqlite:///{tmp_path / 'debug.db'}")
    try:
        prepare_schema(engine, auto_migrate=True)
    finally:
        engine.dispose()
    upgrades = [r for r in caplog.records if r.getMessage().startswith("Running upgrade")]
    assert len(upgrades) == len(revisions)
    assert {record.levelno for record in upgrades} == {logging.DEBUG}


def test_an_out_of_date_schema_is_refused_with_a_clear_message(empty_database_url: str) -> None:
    engine = make_engine(empty_database_url)
    with engine.begin() as connection:
        connection.execute(text("CREATE TABLE alembic_version (version_num VARCHAR(32))"))
        connection.execute(text("INSERT INTO alembic_version VALUES ('0000')"))
    try:
        with pytest.raises(SchemaOutOfDateError, match="training-platform migrate"):
            prepare_schema(engine, auto_migrate=True)
    finally:
        engine.dispose()


def test_0003_adds_the_tombstones_table_and_keeps_existing_jobs(empty_database_url: str) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0002")
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            _insert_job(connection, "run1", "running")
        assert "deleted_jobs" not in inspect(engine).get_table_names()

        command.upgrade(config, "head")
        command.upgrade(config, "head")  # twice is a no-op

        assert "deleted_jobs" in inspect(engine).get_table_names()
        with engine.connect() as connection:
            assert connection.execute(text("SELECT job_id FROM jobs")).scalars().all() == ["run1"]
        command.downgrade(config, "0002")
        assert "deleted_jobs" not in inspect(engine).get_table_names()
        assert "jobs" in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_the_alembic_config_is_built_in_code_and_agrees_with_alembic_ini() -> None:
    """A wheel has no alembic.ini: the code needs none, and says what the file says."""
    from configparser import ConfigParser

    from training_platform.store.database import REPO_MIGRATIONS, migrations_dir

    config = alembic_config()
    assert config.config_file_name is None
    assert Path(config.get_main_option("script_location") or "") == migrations_dir()
    ini = ConfigParser(interpolation=None)
    ini.read(REPO_MIGRATIONS.parent / "alembic.ini")
    assert ini["alembic"]["script_location"] == "%(here)s/migrations"
    for option in ("path_separator", "file_template"):
        in_ini = ini["alembic"][option].replace("%%", "%")
        assert config.get_main_option(option) == in_ini, option


def test_the_packaged_scripts_come_first_and_none_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from training_platform.store import database

    packaged = tmp_path / "_migrations"
    monkeypatch.setattr(database, "PACKAGED_MIGRATIONS", packaged)
    assert database.migrations_dir() == database.REPO_MIGRATIONS  # a source checkout
    packaged.mkdir()
    (packaged / "env.py").write_text("")
    assert database.migrations_dir() == packaged  # a wheel
    monkeypatch.setattr(database, "PACKAGED_MIGRATIONS", tmp_path / "none")
    monkeypatch.setattr(database, "REPO_MIGRATIONS", tmp_path / "none")
    with pytest.raises(database.MigrationsMissingError, match="reinstall the package"):
        alembic_config()


def test_0004_keys_sync_state_by_kind_and_keeps_each_jobs_offset(
    empty_database_url: str,
) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0003")
    engine = make_engine(empty_database_url)
    job = (
        "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected, created_at)"
        " VALUES ('run1', 'local', true, 'running', false, 1.0)"
    )
    state = (
        'INSERT INTO sync_state (job_id, {kind}"offset", discarding, lines_malformed,'
        " lines_oversized, records_ingested, resets) VALUES ('run1', {value}{offset}, false,"
        " 0, 0, 7, 0)"
    )
    try:
        with engine.begin() as connection:
            connection.execute(text(job))
            connection.execute(text(state.format(kind="", value="", offset=42)))

        command.upgrade(config, "head")

        with engine.begin() as connection:
            rows = connection.execute(text('SELECT job_id, kind, "offset" FROM sync_state'))
            assert rows.all() == [("run1", "metrics", 42)]  # the old row is the metrics file's
            # A second kind of file of the same job has its own row.
            connection.execute(text(state.format(kind="kind, ", value="'samples', ", offset=9)))
        columns = inspect(engine).get_pk_constraint("sync_state")["constrained_columns"]
        assert sorted(columns) == ["job_id", "kind"]

        command.downgrade(config, "0003")
        with engine.connect() as connection:
            rows = connection.execute(text('SELECT job_id, "offset" FROM sync_state'))
            assert rows.all() == [("run1", 42)]  # only the metrics row fits the old table
    finally:
        engine.dispose()


def test_0007_gives_existing_buckets_the_time_of_their_first_record(
    empty_database_url: str,
) -> None:
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0006")
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            _insert_job(connection, "run1", "running")
            for step, timestamp in ((0, 100.0), (32, 132.5), (64, None)):
                connection.execute(
                    text(
                        "INSERT INTO training_metrics (job_id, step, timestamp, received_at,"
                        " has_anomaly) VALUES ('run1', :step, :ts, 1.0, false)"
                    ),
                    {"step": step, "ts": timestamp},
                )
            for level, bucket, first in ((0, 0, 0), (0, 1, 32), (0, 2, 64), (1, 0, 0)):
                connection.execute(
                    text(
                        "INSERT INTO metric_rollups (job_id, level, bucket, first_step,"
                        " last_step, row_count, stats) VALUES ('run1', :l, :b, :f, :f, 1, :s)"
                    ),
                    {"l": level, "b": bucket, "f": first, "s": b""},
                )

        command.upgrade(config, "head")

        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT level, bucket, first_timestamp FROM metric_rollups ORDER BY 1, 2")
            )
            assert rows.all() == [(0, 0, 100.0), (0, 1, 132.5), (0, 2, None), (1, 0, 100.0)]
        command.downgrade(config, "0006")
        columns = {c["name"] for c in inspect(engine).get_columns("metric_rollups")}
        assert "first_timestamp" not in columns
        assert "run_files" not in inspect(engine).get_table_names()
    finally:
        engine.dispose()


def test_0008_stores_the_sealed_chunks_of_existing_buckets(empty_database_url: str) -> None:
    """Downgraded to 0007 (no rollup_columns) and upgraded again: the backfill
    stores exactly what ingestion stored."""
    config = alembic_config(empty_database_url)
    command.upgrade(config, "head")
    engine = make_engine(empty_database_url)
    select_chunks = text(
        "SELECT level, chunk, series, payload FROM rollup_columns ORDER BY level, chunk, series"
    )
    try:
        factory = make_session_factory(engine)
        records = [
            build_record(step, {"loss": {"actor_loss": step % 13 / 7}}) for step in range(9_000)
        ]
        with factory() as session:
            session.add(Job(job_id="run1", created_at=0.0))
            session.flush()
            upsert_metrics(session, job_id="run1", records=records, received_at=1.0)  # + rollups
            session.commit()
        with engine.connect() as connection:
            stored = [(*row[:3], bytes(row[3])) for row in connection.execute(select_chunks)]
        assert len({row[1] for row in stored}) == 4  # level 0: 9,000 steps, 2,048 per chunk

        command.downgrade(config, "0007")
        assert "rollup_columns" not in inspect(engine).get_table_names()
        command.upgrade(config, "head")

        with engine.connect() as connection:
            rebuilt = [(*row[:3], bytes(row[3])) for row in connection.execute(select_chunks)]
        assert rebuilt == stored
    finally:
        engine.dispose()


def test_rows_stored_before_0002_get_their_buckets_and_chunks_at_head(
    empty_database_url: str,
) -> None:
    """A database from revision 0001 with metrics upgrades to head, its history
    downsampled from buckets like any other."""
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0001")
    engine = make_engine(empty_database_url)
    try:
        with engine.begin() as connection:
            _insert_job(connection, "old", "completed")
            connection.execute(
                text(
                    "INSERT INTO training_metrics (job_id, step, timestamp, actor_loss,"
                    " received_at, has_anomaly) VALUES ('old', :step, :ts, :loss, 1.0, false)"
                ),
                [{"step": s, "ts": 100.0 + s, "loss": 1.0 + s % 7} for s in range(3_000)],
            )

        command.upgrade(config, "head")

        with engine.connect() as connection:
            buckets = connection.execute(
                text("SELECT count(*) FROM metric_rollups WHERE job_id = 'old' AND level = 0")
            ).scalar()
            chunks = connection.execute(
                text("SELECT count(DISTINCT chunk) FROM rollup_columns WHERE job_id = 'old'")
            ).scalar()
        assert (buckets, chunks) == (94, 1)  # 3,000 steps of 32; one sealed chunk of 64
        with make_session_factory(engine)() as session:
            body = downsampled_history(
                session, job_id="old", start_step=None, end_step=None, max_points=100
            )
        assert body["downsampled"] and body["count"] <= 100
        assert max(body["series"]["loss.actor_loss"]["max"]) == 7.0
    finally:
        engine.dispose()


def _insert_job(connection: Connection, job_id: str, status: str) -> None:
    """A job row as an older revision's schema holds it (raw SQL, no models)."""
    connection.execute(
        text(
            "INSERT INTO jobs (job_id, source, discovered, status, anomaly_detected, created_at)"
            " VALUES (:job, 'local', true, :status, false, 1.0)"
        ),
        {"job": job_id, "status": status},
    )


def test_0010_compresses_the_stored_completions_and_downgrades_to_text(
    empty_database_url: str,
) -> None:
    """SQLite: completions stored as text before 0010 become zlib streams (a short
    one stays text), `q` still finds them, and the downgrade restores the text.
    PostgreSQL: the text stays as it is both ways."""
    config = alembic_config(empty_database_url)
    command.upgrade(config, "0009")
    engine = make_engine(empty_database_url)
    long = "we add the numbers step by step " * 40 + "then Zanzibar " + "and check " * 80
    texts = [long, "ok", "日本語の説明と計算の手順。" * 60]
    insert = text(
        "INSERT INTO samples (job_id, step, sample_index, prompt_id, completion,"
        " completion_chars, received_at) VALUES ('run1', 0, :index, 1, :text, :chars, 1.0)"
    )
    sqlite = engine.dialect.name == "sqlite"
    try:
        with engine.begin() as connection:
            _insert_job(connection, "run1", "running")
            connection.execute(
                text(
                    "INSERT INTO sample_prompts (id, job_id, digest, text)"
                    " VALUES (1, 'run1', 'd', 'Old prompt')"
                )
            )
            connection.execute(
                insert, [{"index": i, "text": t, "chars": len(t)} for i, t in enumerate(texts)]
            )

        command.upgrade(config, "0010")

        stored = _stored_completions(engine)
        if sqlite:
            assert [kind for kind, _ in stored] == ["blob", "text", "blob"]
            for (_, value), original in zip(stored, texts, strict=True):
                assert unpack_text(value) == original
                assert len(value) < len(original.encode("utf-8")) or original == "ok"
        else:
            assert stored == [("text", t) for t in texts]
        _assert_found(engine, {"zanZIBAR": [long], "計算の手順": [texts[2]], "OK": ["ok"]})

        command.downgrade(config, "0009")

        assert _stored_completions(engine) == [("text", t) for t in texts]
        _assert_found(engine, {"zanZIBAR": [long], "計算の手順": [texts[2]]})
        if sqlite:  # the objects of 0006-0009 again: the FTS table over `samples` itself
            with engine.connect() as connection:
                sql = connection.execute(
                    text("SELECT group_concat(sql, ';') FROM sqlite_master WHERE sql IS NOT NULL")
                ).scalar_one()
            assert "samples_text" not in sql and "tp_text" not in sql
        command.upgrade(config, "head")
        assert [kind for kind, _ in _stored_completions(engine)] == (
            ["blob", "text", "blob"] if sqlite else ["text"] * 3
        )
    finally:
        engine.dispose()


def _stored_completions(engine: Engine) -> list[tuple[str, Any]]:
    """(the stored value's type, the value) of each sample, in index order."""
    sqlite = engine.dialect.name == "sqlite"
    kind = "typeof(completion)" if sqlite else "pg_typeof(completion)::text"
    with engine.connect() as connection:
        query = text(f"SELECT {kind}, completion FROM samples ORDER BY sample_index")
        return [(row[0], row[1]) for row in connection.execute(query)]


def _assert_found(engine: Engine, expected: dict[str, list[str]]) -> None:
    """Each `q` finds those completions; on SQLite, the FTS5 index equals the rows."""
    with make_session_factory(engine)() as session:
        for q, completions in expected.items():
            page = sample_page(session, job_id="run1", where=SampleFilter(q=q), limit=10)
            assert [s["completion"] for s in page.samples] == completions, q
    if engine.dialect.name == "sqlite":
        with engine.connect() as connection:
            connection.execute(
                text("INSERT INTO samples_fts(samples_fts, rank) VALUES ('integrity-check', 1)")
            )
