"""A full disk under the SQLite database (issue 23 §5).

The database lives on a small tmpfs (mounted here; root only, skipped with the
reason elsewhere) that a filler file fills while a run's lines keep coming.
Syncs must then fail as a storage failure the client can retry (503), not as
a server error; nothing already committed may be lost, no offset may move
past what was not stored, reads keep working, and once space returns the
rest of the file lands exactly once. SQLite only: PostgreSQL's disk is not
ours to fill.
"""

from __future__ import annotations

import errno
import os
import shutil
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fastapi.testclient import TestClient
from sqlalchemy import exc as sa_exc
from sqlalchemy import select

from training_platform.api.main import create_app
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.settings import Settings
from training_platform.store.database import make_engine
from training_platform.store.models import SyncState
from training_platform.store.storage_errors import storage_error

DISK_BYTES = 48 << 20  # room for the WAL (checkpointed at 1,000 pages of 16 KiB) and more
HEADROOM = 256 << 10  # left free by the filler: a few batches commit, then the disk is full
EXTRA = {f"actor/metric_{i:02d}": 0.25 + i for i in range(24)}  # ~700 bytes a line


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh tmpfs of `DISK_BYTES`, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small filesystem for the database needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount)],
        capture_output=True,
        timeout=30,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, timeout=30, check=False)


def fill(disk: Path, leave: int) -> Path:
    """A filler file taking all of `disk` but about `leave` bytes."""
    filler = disk / "filler"
    chunk = b"\0" * (1 << 20)
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for size in (1 << 20, 4096):  # big pieces, then small ones to the last page
            for _ in range(2 * DISK_BYTES // size):  # bounded: more than the disk holds
                try:
                    os.write(fd, chunk[:size])
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    os.truncate(filler, max(0, filler.stat().st_size - leave))
    return filler


def lines(first: int, count: int) -> list[bytes]:
    return [
        encode_record(build_record(step, {"loss": 1.0, "extra": EXTRA}, timestamp=1.0 + step))
        for step in range(first, first + count)
    ]


def stored_steps(client: TestClient) -> list[int]:
    steps: list[int] = []
    start: int | None = 0
    for _ in range(100):  # pages of 10,000: bounded
        if start is None:
            break
        page = client.get("/api/monitoring/run1/metrics", params={"start_step": start})
        assert page.status_code == 200, page.text
        steps += [record["step"] for record in page.json()["metrics"]]
        start = page.json()["next_start_step"]
    return steps


def committed_offset(database_url: str) -> int:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            offset = connection.execute(
                select(SyncState.offset).where(
                    SyncState.job_id == "run1", SyncState.kind == "metrics"
                )
            ).scalar_one()
        return int(offset)
    finally:
        engine.dispose()


def test_a_full_disk_is_503_loses_nothing_and_the_rest_lands_exactly_once(
    small_disk: Path, _sqlite_template: Path, tmp_path: Path
) -> None:
    database = small_disk / "platform.db"
    shutil.copyfile(_sqlite_template, database)
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    settings = Settings(
        DATABASE_URL=f"sqlite:///{database}",
        PLATFORM_METRICS_DIR=metrics_dir,
        PLATFORM_API_TOKEN=None,
        PLATFORM_SSH_KEY_DIR=tmp_path,
        PLATFORM_POLL_INTERVAL=0,
        PLATFORM_SYNC_BATCH_BYTES=64 << 10,  # many small transactions
        PLATFORM_SYNC_REQUEST_BUDGET=60,  # the disk, not the budget, stops the sync
    )
    written = lines(0, 100)
    metrics = metrics_dir / "run1_metrics.jsonl"
    metrics.write_bytes(b"".join(written))

    app = create_app(settings)
    with TestClient(app, raise_server_exceptions=False) as client:
        first = client.post("/api/monitoring/run1/metrics/sync")
        assert first.status_code == 200 and first.json()["new_metrics"] == 100

        filler = fill(small_disk, HEADROOM)
        more = lines(100, 3_000)  # ~2 MB: far more than the headroom
        with metrics.open("ab") as handle:
            handle.write(b"".join(more))
        written += more

        answers: list[dict[str, Any]] = []
        for _ in range(2):  # a second try, still full, changes nothing
            full = client.post("/api/monitoring/run1/metrics/sync")
            assert full.status_code == 503, full.text
            answers.append(full.json())
        assert {answer["code"] for answer in answers} == {"storage_unavailable"}, answers
        assert "full" in answers[0]["detail"], answers

        # What was committed stays, and the offset says exactly that much.
        steps = stored_steps(client)
        assert steps == list(range(len(steps))) and len(steps) >= 100
        assert committed_offset(settings.database_url) == sum(map(len, written[: len(steps)]))
        # Reads go on while the disk is full.
        for path in ("/api/jobs", "/api/jobs/run1", "/api/monitoring/run1/metrics?max_points=50"):
            assert client.get(path).status_code == 200, path

        filler.unlink()  # space returns
        done = client.post("/api/monitoring/run1/metrics/sync")
        assert done.status_code == 200, done.text
        assert done.json()["at_eof"] is True
        assert stored_steps(client) == list(range(len(written)))
        assert committed_offset(settings.database_url) == metrics.stat().st_size
        assert client.get("/api/jobs/run1").json()["metrics_count"] == len(written)


@pytest.mark.parametrize(
    "cause",
    [
        sqlite3.OperationalError("database or disk is full"),
        psycopg.errors.DiskFull('could not extend file "base/16384/2619": No space left'),
    ],
    ids=["sqlite", "postgresql"],
)
def test_a_full_disk_on_either_database_is_said_without_the_statement(cause: Exception) -> None:
    wrapped = sa_exc.OperationalError("INSERT INTO samples VALUES (?)", ("a secret prompt",), cause)

    error = storage_error(wrapped)

    assert "disk is full" in str(error) and type(cause).__name__ in str(error)
    assert "INSERT" not in str(error) and "secret" not in str(error)


def test_a_database_gone_away_is_a_storage_error_too() -> None:
    cause = psycopg.OperationalError("connection to server at 127.0.0.1 failed")
    error = storage_error(sa_exc.OperationalError("SELECT 1", None, cause))
    assert "cannot be used right now" in str(error) and "disk" not in str(error)


@pytest.mark.parametrize(
    "cause",
    [
        sqlite3.OperationalError("no such column: bogus"),
        sqlite3.OperationalError("unterminated string"),
    ],
)
def test_bad_sql_is_not_a_storage_condition_but_a_bug(cause: Exception) -> None:
    """SQLite raises OperationalError for bad SQL too: a 503 would hide the bug."""
    assert storage_error(sa_exc.OperationalError("SELECT bogus", None, cause)) is None
