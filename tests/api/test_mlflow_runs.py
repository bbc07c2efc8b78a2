"""MLflow runs as jobs (`"format": "mlflow"`, DESIGN.md §7): rows written by MLflow
itself (`mlflow.start_run` / `log_metrics` / `log_params` / `set_tags`, in a child
process) read from its tracking database, SQLite and PostgreSQL, exactly once, with
the trainers' key mapping, the params as the config (secrets masked), the tags, the
run name and MLflow's run status; new rows streamed live; bad registrations refused.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.api.live_support import live_server, live_settings, metric_steps, open_ws, receive_until
from tests.ingest.test_verl_file import stored, sync
from training_platform.api.main import create_app
from training_platform.ingest.formats import mlflow_rows
from training_platform.settings import Settings

pytest.importorskip("mlflow")

SECRET = "sk-abcdefghijklmnopqrstuvwx"


def mlflow_child(
    uri: str, steps: range, *, pause: float = 0.0, name: str = "grpo-a", gate: bool = False
) -> subprocess.Popen[str]:
    """MLflow logging a run in a child process; it prints the run id first (and with
    `gate`, waits for a line on its stdin before logging)."""
    script = textwrap.dedent(f"""
        import math, sys, time, mlflow
        mlflow.set_tracking_uri({uri!r})
        mlflow.set_experiment("rl")
        with mlflow.start_run(run_name={name!r}) as run:
            print(run.info.run_id, flush=True)
            if {gate!r}:
                sys.stdin.readline()
            mlflow.log_params({{"lr": 1e-05, "api_key": {SECRET!r}, "model": "qwen"}})
            mlflow.set_tags({{"algo": "grpo"}})
            for step in {list(steps)!r}:
                mlflow.log_metrics({{"train/loss": 1.0 / (step + 1), "actor/pg_loss": 0.5,
                                    "critic/score/mean": 0.1 * step,
                                    "grad": math.nan if step == 1 else 1.0}}, step=step)
                time.sleep({pause})
    """)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "GIT_PYTHON_REFRESH": "quiet"}
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True,
                            stdin=subprocess.PIPE if gate else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def logged(uri: str, steps: range, **options: Any) -> str:
    child = mlflow_child(uri, steps, **options)
    out, errors = child.communicate(timeout=180)
    assert child.returncode == 0, errors
    return out.split()[0]


@pytest.fixture(scope="module")
def sqlite_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An MLflow SQLite store with a run of 6 steps, written once (MLflow takes seconds
    to start): each test copies it."""
    path = tmp_path_factory.mktemp("mlflow") / "mlflow.db"
    return path, logged(f"sqlite:///{path}", range(6))


def register(client: TestClient, job_id: str, uri: str, run_id: str) -> dict[str, Any]:
    body = {"job_id": job_id, "format": "mlflow", "tracking_uri": uri, "run_id": run_id}
    answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


def check_run(client: TestClient, job_id: str, steps: int) -> None:
    records = stored(client, job_id)
    assert [record["step"] for record in records] == list(range(steps))
    assert records[2]["loss"]["total_loss"] == pytest.approx(1 / 3)
    assert records[2]["loss"]["actor_loss"] == 0.5
    assert records[2]["reward"]["mean"] == pytest.approx(0.2)
    assert records[1]["extra"]["grad"] == "NaN"  # MLflow's is_nan, kept non-finite
    job = client.get(f"/api/jobs/{job_id}").json()
    assert (job["status"], job["name"], job["source"]) == ("completed", "grpo-a", "tracking")
    assert job["config"]["lr"] == pytest.approx(1e-5) and job["config"]["model"] == "qwen"
    assert SECRET not in json.dumps(job["config"])
    assert "algo:grpo" in job["tags"] and not any("mlflow." in tag for tag in job["tags"])


def test_an_mlflow_run_in_a_sqlite_store(
    client: TestClient, tmp_path: Path, sqlite_store: tuple[Path, str]
) -> None:
    shutil.copy(sqlite_store[0], tmp_path / "mlflow.db")
    uri, run_id = f"sqlite:///{tmp_path}/mlflow.db", sqlite_store[1]
    job = register(client, "ml-a", uri, run_id)
    assert (job["format"], job["source_run"], job["tracking_uri"]) == ("mlflow", run_id, uri)
    sync(client, "ml-a")  # (or the background poll got there first)
    check_run(client, "ml-a", 6)
    assert sync(client, "ml-a")["new_metrics"] == 0  # nothing read twice


def test_batches_cut_within_a_step_store_each_step_once_and_whole(
    settings: Settings,
    tmp_path: Path,
    sqlite_store: tuple[Path, str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    shutil.copy(sqlite_store[0], tmp_path / "mlflow.db")
    uri, run_id = f"sqlite:///{tmp_path}/mlflow.db", sqlite_store[1]
    # 5 rows a batch, 4 rows (keys) a step: most steps begin in one batch, end in the
    # next, as a step too long to finish within the batch's look-ahead is.
    monkeypatch.setattr(mlflow_rows, "STEP_LOOKAHEAD", 2)
    small = settings.model_copy(update={"sync_batch_bytes": 5 * 64})
    with TestClient(create_app(small)) as client:
        register(client, "ml-cut", uri, run_id)
        while not sync(client, "ml-cut")["at_eof"]:
            pass
        check_run(client, "ml-cut", 6)
        assert all(len(record["loss"]) == 2 for record in stored(client, "ml-cut"))


@pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)  # MLflow's: on PostgreSQL
def test_an_mlflow_run_in_a_postgresql_store(
    client: TestClient, scratch_postgres: Callable[[], str]
) -> None:
    uri = scratch_postgres()
    run_id = logged(uri, range(5))
    assert register(client, "ml-pg", uri, run_id)["tracking_uri"] == uri  # no password in it
    sync(client, "ml-pg")
    check_run(client, "ml-pg", 5)
    # Read again with its look-back: the same rows change nothing and are not repeated,
    # nor counted as ingested again.
    assert sync(client, "ml-pg")["new_metrics"] == 0
    assert len(stored(client, "ml-pg")) == 5
    assert client.get("/api/jobs/ml-pg").json()["sync"]["records_ingested"] == 5


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_bad_mlflow_registrations_are_refused(client: TestClient, tmp_path: Path) -> None:
    base = {"job_id": "ml", "format": "mlflow"}
    for body, reason in [
        (base, "needs 'tracking_uri' and 'run_id'"),
        ({**base, "tracking_uri": "sqlite:///x.db"}, "needs 'tracking_uri' and 'run_id'"),
        ({**base, "tracking_uri": "file:///no/mlruns", "run_id": "r"}, "no such directory"),
        ({**base, "tracking_uri": "::nonsense", "run_id": "r"}, "not a database URL"),
        ({**base, "tracking_uri": "mysql://h/db", "run_id": "r"}, "sqlite:///<file> or"),
        ({**base, "tracking_uri": "sqlite:///x.db", "run_id": "r", "metrics_dir": str(tmp_path)},
         "with format mlflow"),
        ({"job_id": "ml", "metrics_dir": str(tmp_path), "run_id": "r"}, "names an MLflow run"),
    ]:  # fmt: skip
        answer = client.post("/api/jobs", json=body)
        assert answer.status_code == 422 and reason in answer.text, (body, answer.text)


def test_an_unreadable_store_is_said_on_the_job(client: TestClient, tmp_path: Path) -> None:
    register(client, "ml-gone", f"sqlite:///{tmp_path}/missing.db", "r1")
    assert client.post("/api/monitoring/ml-gone/metrics/sync").status_code == 503
    job = client.get("/api/jobs/ml-gone").json()
    assert "cannot read MLflow run r1" in job["last_sync_error"]
    # A password in the URI is used, never shown.
    uri = "postgresql://me:hunter2@127.0.0.1:9/mlflow"
    job = register(client, "ml-pw", uri, "r2")
    assert job["tracking_uri"] == "postgresql://me:***@127.0.0.1:9/mlflow"
    assert client.post("/api/monitoring/ml-pw/metrics/sync").status_code == 503
    error = client.get("/api/jobs/ml-pw").json()["last_sync_error"]
    assert "cannot read MLflow run r2" in error and "hunter2" not in error


def test_metrics_logged_while_the_server_runs_stream_live(
    settings: Settings, tmp_path: Path
) -> None:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    fast = live_settings(settings).model_copy(update={"ssh_poll_interval": 0.2})
    with live_server(fast) as server:
        child = mlflow_child(uri, range(4), pause=0.5, gate=True)
        try:
            assert child.stdout is not None and child.stdin is not None
            run_id = child.stdout.readline().strip()
            body = {"job_id": "ml-live", "format": "mlflow", "tracking_uri": uri, "run_id": run_id}
            answer = httpx.post(server.http_url("/api/jobs"), json=body, timeout=30)
            assert answer.status_code == 201, answer.text
            with open_ws(server.ws_url("/api/monitoring/ml-live/live")) as ws:
                receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
                child.stdin.write("go\n")
                child.stdin.flush()
                messages = receive_until(ws, lambda got: 3 in metric_steps(got), timeout=60)
                status = receive_until(
                    ws,
                    lambda got: any(m.get("type") == "status"
                                    and m["data"].get("status") == "completed" for m in got),
                    timeout=30,
                )  # fmt: skip
        finally:
            child.communicate(timeout=120)
        steps = metric_steps(messages)
        assert sorted(set(steps)) == [0, 1, 2, 3] and len(steps) == len(set(steps))
        assert status
