"""Reading ahead: a big MLflow run's next batch read by a worker process while the
last is stored, exactly once whatever happens to the worker."""

from __future__ import annotations

import math
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.ingest.test_verl_file import sync
from tests.run_once import once
from training_platform.api.main import create_app
from training_platform.ingest import read_ahead
from training_platform.ingest.formats import mlflow_rows, mlflow_store
from training_platform.ingest.formats.mlflow_rows import batch_end, read_rows_after
from training_platform.ingest.read_ahead import ReadAhead
from training_platform.settings import Settings

pytest.importorskip("mlflow")

STEPS = 2000
KEYS = 12  # 24,000 rows: three batches of 8,192
BATCH_ROWS = mlflow_store.READ_AHEAD_ROWS
SPLIT = 1000  # logged in two calls, step 1001 between them


def value(step: int, key: int) -> float:
    return math.nan if (step, key) == (7, 3) else step / (key + 1) + 0.1


WRITER = f"""
import math, sys, time, mlflow
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

def value(step, key):
    return math.nan if (step, key) == (7, 3) else step / (key + 1) + 0.1

def key(k):
    return {{0: "actor/pg_loss", 1: "critic/score/mean"}}.get(k, f"series/{{k}}")

mlflow.set_tracking_uri(sys.argv[1])
mlflow.set_experiment("big")
with mlflow.start_run(run_name="big") as run:
    client, now = MlflowClient(), int(time.time() * 1000)
    metrics = []
    for step in range({STEPS}):
        keys = range({KEYS})
        if step == {SPLIT}:
            keys = range({KEYS} // 2)
        if step == {SPLIT} + 1:
            keys = [*keys, *(("late", k) for k in range({KEYS} // 2, {KEYS}))]
        for k in keys:
            at = {SPLIT} if isinstance(k, tuple) else step
            k = k[1] if isinstance(k, tuple) else k
            metrics.append(Metric(key(k), value(at, k), now + at, at))
    for start in range(0, len(metrics), 1000):
        client.log_batch(run.info.run_id, metrics=metrics[start:start + 1000])
    print(run.info.run_id)
"""


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An MLflow SQLite store holding one run of 24,000 metric rows, written by
    MLflow's own client once for the test run (~10 s): each test copies it."""

    def write(folder: Path) -> dict[str, str]:
        path = folder / "mlflow.db"
        env = {**os.environ, "GIT_PYTHON_REFRESH": "quiet"}
        done = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(WRITER), f"sqlite:///{path}"],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        return {"path": str(path), "run_id": done.stdout.split()[-1]}

    made = once(tmp_path_factory, "mlflow-big-run", write)
    return Path(made["path"]), made["run_id"]


@pytest.fixture
def run_copy(big_run: tuple[Path, str], tmp_path: Path) -> tuple[str, str]:
    shutil.copy(big_run[0], tmp_path / "mlflow.db")
    return f"sqlite:///{tmp_path}/mlflow.db", big_run[1]


@pytest.fixture
def workers(monkeypatch: pytest.MonkeyPatch) -> list[subprocess.Popen[bytes]]:
    """Every read-ahead worker started, in order."""
    started: list[subprocess.Popen[bytes]] = []
    real = read_ahead._start_worker

    def counted() -> subprocess.Popen[bytes]:
        started.append(real())
        return started[-1]

    monkeypatch.setattr(read_ahead, "_start_worker", counted)
    return started


@pytest.fixture
def taken(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """What each `take` gave (None: nothing read ahead for the caller, who reads inline)."""
    answers: list[Any] = []
    real = ReadAhead.take

    def recorded(self: ReadAhead, source: Any, request: Any) -> Any:
        answers.append(real(self, source, request))
        return answers[-1]

    monkeypatch.setattr(ReadAhead, "take", recorded)
    return answers


def import_run(settings: Settings, uri: str, run_id: str) -> list[dict[str, Any]]:
    """The run registered and synced to its end with batches of `BATCH_ROWS` rows:
    its stored records, once the server has stopped."""
    big = settings.model_copy(update={"sync_batch_bytes": BATCH_ROWS * mlflow_store.ROW_BYTES})
    with TestClient(create_app(big)) as client:
        body = {"job_id": "big", "format": "mlflow", "tracking_uri": uri, "run_id": run_id}
        assert client.post("/api/jobs", json=body).status_code == 201
        while not sync(client, "big")["at_eof"]:
            pass
        assert sync(client, "big")["new_metrics"] == 0
        # Each step in one batch (cuts fall between steps): stored and counted once.
        job = client.get("/api/jobs/big").json()
        assert job["sync"]["records_ingested"] == STEPS
        records: list[dict[str, Any]] = client.get(
            "/api/monitoring/big/metrics", params={"limit": 5000}
        ).json()["metrics"]
    return records


def check_whole(records: list[dict[str, Any]]) -> None:
    assert [record["step"] for record in records] == list(range(STEPS))
    for record in (records[0], records[7], records[SPLIT], records[SPLIT + 1], records[-1]):
        step = record["step"]
        assert record["loss"]["actor_loss"] == value(step, 0)
        assert record["reward"]["mean"] == value(step, 1)
        extra = record["extra"]
        assert len(extra) == KEYS - 2, step  # the split step whole, not half
        for k in range(2, KEYS):
            expected = value(step, k)
            assert extra[f"series/{k}"] == ("NaN" if math.isnan(expected) else expected)


def test_a_big_run_is_read_ahead_and_stored_whole_and_once(
    settings: Settings,
    run_copy: tuple[str, str],
    workers: list[subprocess.Popen[bytes]],
    taken: list[Any],
) -> None:
    check_whole(import_run(settings, *run_copy))
    # Three batches: the first read inline, the other two by the worker.
    assert len(workers) == 1
    assert sum(answer is not None for answer in taken) == 2
    assert workers[0].poll() is not None  # gone once the run was caught up


def test_a_killed_worker_costs_only_its_batch_read_inline(
    settings: Settings,
    run_copy: tuple[str, str],
    workers: list[subprocess.Popen[bytes]],
    taken: list[Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real_start = ReadAhead.start

    def start_then_kill(self: ReadAhead, *args: Any) -> None:
        real_start(self, *args)
        if len(workers) == 1 and workers[0].poll() is None:
            workers[0].kill()  # mid-read, or before it

    monkeypatch.setattr(ReadAhead, "start", start_then_kill)
    check_whole(import_run(settings, *run_copy))
    # The second batch read inline after the kill, the third by a new worker.
    assert len(workers) == 2
    assert sum(answer is not None for answer in taken) == 1
    assert all(worker.poll() is not None for worker in workers)


def test_a_failed_or_unwanted_read_is_read_inline_and_the_worker_goes_on(
    run_copy: tuple[str, str], workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    path, run_id = run_copy[0].removeprefix("sqlite:///"), run_copy[1]
    ahead = ReadAhead()
    try:
        ahead.start("gone", 0, read_rows_after, str(tmp_path / "none.db"), run_id, 0, 10)
        assert ahead.take("gone", 0) is None  # the worker's sqlite3 error: inline says it
        ahead.start("run", (0, 10), read_rows_after, path, run_id, 0, 10)
        assert ahead.take("run", (5, 10)) is None  # not the batch asked for
        ahead.start("run", (0, 10), read_rows_after, path, run_id, 0, 10)
        ahead.start("other", (0, 10), read_rows_after, path, run_id, 0, 10)  # one at a time
        assert ahead.take("other", (0, 10)) is None
        records, last, count = ahead.take("run", (0, 10))
        assert last > 0
        assert count == KEYS and [record["step"] for record in records] == [0]  # step 0 whole
        assert len(workers) == 1 and workers[0].poll() is None
        ahead.caught_up("run")
        assert workers[0].poll() is not None
    finally:
        ahead.stop()


def test_without_a_worker_every_batch_is_read_inline(
    run_copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, run_id = run_copy[0].removeprefix("sqlite:///"), run_copy[1]
    monkeypatch.setattr(read_ahead.sys, "executable", "/nonexistent/python")
    ahead = ReadAhead()
    ahead.start("run", (0, 10), read_rows_after, path, run_id, 0, 10)
    assert ahead.take("run", (0, 10)) is None


def test_a_full_batch_ends_with_its_last_step_unless_that_step_is_too_long(
    run_copy: tuple[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, run_id = run_copy[0].removeprefix("sqlite:///"), run_copy[1]
    connection = sqlite3.connect(path)
    cursor = connection.cursor()

    def step_at(rowid: int) -> int:
        return int(
            cursor.execute("SELECT step FROM metrics WHERE rowid = ?", (rowid,)).fetchone()[0]
        )

    first = int(
        cursor.execute("SELECT min(rowid) FROM metrics WHERE run_uuid = ?", (run_id,)).fetchone()[0]
    )
    try:
        # 100 rows end 4 rows into step 8 (12 keys a step): the batch takes its other 8.
        count, last = batch_end(cursor, run_id, first - 1, 100)
        assert (count, step_at(last), step_at(last + 1)) == (108, 8, 9)
        # The run's end: fewer rows than asked, all of them.
        assert batch_end(cursor, run_id, first - 1, 10**6) == (
            STEPS * KEYS,
            first - 1 + STEPS * KEYS,
        )
        # A step's rest longer than the look-ahead: cut where the limit says.
        monkeypatch.setattr(mlflow_rows, "STEP_LOOKAHEAD", 8)
        count, last = batch_end(cursor, run_id, first - 1, 100)
        assert (count, step_at(last), step_at(last + 1)) == (100, 8, 8)
    finally:
        connection.close()


def test_a_worker_stopped_mid_read_ends_by_itself(
    run_copy: tuple[str, str], workers: list[subprocess.Popen[bytes]]
) -> None:
    """Its answer (~1 MB, more than a pipe holds) is never read: the worker stops on
    the closed pipe instead of waiting to be killed."""
    path, run_id = run_copy[0].removeprefix("sqlite:///"), run_copy[1]
    ahead = ReadAhead()
    ahead.start("run", (0, 20_000), read_rows_after, path, run_id, 0, 20_000)
    ahead.stop()
    assert workers[0].wait(timeout=30) == 0  # not -9: nobody had to kill it
