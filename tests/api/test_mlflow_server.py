"""MLflow runs behind a tracking server (`"tracking_uri": "http://host:port"`, DESIGN.md
§7): a real `mlflow server` on 127.0.0.1, runs logged to it by MLflow itself (in a
child process), read through its REST API exactly once, with the params as the
config (secrets masked), the tags, the run name and its status; values logged
later read on the next sync, page by page, nothing twice; new values streamed
live; an unreachable server or an unknown run said on the job, never a 500, its
password never shown.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import textwrap
import time
import urllib.request
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.api.test_mlflow_file_store import stream_a_gated_run
from tests.api.test_mlflow_runs import check_run, logged, mlflow_child, register
from tests.ingest.test_verl_file import stored, sync
from training_platform.ingest.formats import mlflow_rest
from training_platform.settings import Settings

pytest.importorskip("mlflow.server")
STARTUP_S = 90


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`mlflow server` on a free loopback port with a SQLite backend, up within
    `STARTUP_S` seconds, stopped at the end of the module."""
    mlflow = shutil.which("mlflow", path=os.path.dirname(sys.executable))
    assert mlflow is not None, "the mlflow command (the full mlflow package)"
    home = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    command = [mlflow, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
               "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
               "--default-artifact-root", str(home / "artifacts")]  # fmt: skip
    env = {**os.environ, "GIT_PYTHON_REFRESH": "quiet"}
    log = (home / "server.log").open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)  # fmt: skip
    uri = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_S
        while True:
            assert process.poll() is None, (home / "server.log").read_text()[-2000:]
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not come up"
            time.sleep(0.5)
        yield uri
    finally:
        # Its own session: the gunicorn/uvicorn workers it starts go with it.
        os.killpg(process.pid, 15)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            process.wait(timeout=20)
        log.close()


def resumed(uri: str, run_id: str, steps: range) -> None:
    """MLflow resuming a finished run and logging two keys for more steps."""
    script = textwrap.dedent(f"""
        import mlflow
        mlflow.set_tracking_uri({uri!r})
        with mlflow.start_run(run_id={run_id!r}):
            for step in {list(steps)!r}:
                mlflow.log_metrics({{"train/loss": 1.0 / (step + 1), "actor/pg_loss": 0.5}},
                                   step=step)
    """)
    env = {**os.environ, "GIT_PYTHON_REFRESH": "quiet"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_an_mlflow_run_behind_a_tracking_server(client: TestClient, server: str) -> None:
    run_id = logged(server, range(6))
    job = register(client, "ms-a", server, run_id)
    assert (job["format"], job["source_run"], job["tracking_uri"]) == ("mlflow", run_id, server)
    sync(client, "ms-a")
    check_run(client, "ms-a", 6)
    assert sync(client, "ms-a")["new_metrics"] == 0  # nothing read twice
    assert len(stored(client, "ms-a")) == 6


def test_values_logged_later_are_read_page_by_page_once(
    client: TestClient, server: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of 4 values: the history is read over several requests, and the next
    # read starts at a page the server handed out (or the one before: look-back).
    monkeypatch.setattr(mlflow_rest, "PAGE", 4)
    monkeypatch.setattr(mlflow_rest, "LOOKBACK", 2)
    run_id = logged(server, range(6))
    register(client, "ms-more", server, run_id)
    sync(client, "ms-more")
    check_run(client, "ms-more", 6)
    resumed(server, run_id, range(6, 9))
    # Two keys of three new steps: each new step written once per key, merged.
    assert sync(client, "ms-more")["new_metrics"] == 6
    records = stored(client, "ms-more")
    assert [record["step"] for record in records] == list(range(9))
    assert records[8]["loss"]["total_loss"] == pytest.approx(1 / 9)
    assert records[8]["loss"]["actor_loss"] == 0.5
    assert records[5]["reward"]["mean"] == pytest.approx(0.5)  # the keys not logged again
    assert sync(client, "ms-more")["new_metrics"] == 0
    assert client.get("/api/jobs/ms-more").json()["status"] == "completed"


def test_an_unreachable_server_or_unknown_run_is_said_on_the_job(
    client: TestClient, server: str
) -> None:
    uri = f"http://me:hunter2@127.0.0.1:{free_port()}"  # nothing listens there
    job = register(client, "ms-down", uri, "r1")
    assert job["tracking_uri"] == uri.replace("hunter2", "***")
    assert client.post("/api/monitoring/ms-down/metrics/sync").status_code == 503
    error = client.get("/api/jobs/ms-down").json()["last_sync_error"]
    assert "cannot reach MLflow server" in error and "hunter2" not in error
    register(client, "ms-none", server, "0123456789abcdef")
    assert client.post("/api/monitoring/ms-none/metrics/sync").status_code == 503
    error = client.get("/api/jobs/ms-none").json()["last_sync_error"]
    assert "cannot read MLflow run 0123456789abcdef" in error and "RESOURCE_DOES_NOT_EXIST" in error
    answer = client.post("/api/jobs", json={"job_id": "ms-bad", "format": "mlflow",
                                            "tracking_uri": "http://", "run_id": "r"})  # fmt: skip
    assert answer.status_code == 422 and "a server needs a host" in answer.text


def test_values_logged_while_the_server_runs_stream_live(settings: Settings, server: str) -> None:
    stream_a_gated_run(
        settings, server, lambda: mlflow_child(server, range(4), pause=0.5, gate=True), "ms-live"
    )
