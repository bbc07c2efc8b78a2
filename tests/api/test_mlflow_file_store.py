"""MLflow runs in a file store (`"tracking_uri": "file:///.../mlruns"`, DESIGN.md §7):
runs written by MLflow itself (in a child process) read exactly once from their
metric files, with the params as the config (secrets masked), the tags, the run
name and the status of meta.yaml; values appended later read on the next sync and
nothing twice; a bad, a half-written or a rewritten metric line handled as in
any line file; new values streamed live; bad registrations refused.
"""

from __future__ import annotations

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
from tests.api.test_mlflow_runs import check_run, mlflow_child, register
from tests.ingest.test_verl_file import stored, sync
from training_platform.api.main import create_app
from training_platform.settings import Settings

pytest.importorskip("mlflow")


def child_in_file_store(uri: str, steps: range, **options: Any) -> subprocess.Popen[str]:
    """`mlflow_child` on a file store, which MLflow 3 refuses unless told to allow it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
        return mlflow_child(uri, steps, **options)


def logged(uri: str, steps: range) -> str:
    child = child_in_file_store(uri, steps)
    out, errors = child.communicate(timeout=180)
    assert child.returncode == 0, errors
    return out.split()[0]


def resumed(uri: str, run_id: str, steps: range) -> None:
    """MLflow resuming a finished run (`start_run(run_id=...)`) and logging more steps:
    its metric files are appended in place."""
    script = textwrap.dedent(f"""
        import mlflow
        mlflow.set_tracking_uri({uri!r})
        with mlflow.start_run(run_id={run_id!r}):
            for step in {list(steps)!r}:
                mlflow.log_metrics({{"train/loss": 1.0 / (step + 1), "actor/pg_loss": 0.5}},
                                   step=step)
    """)
    env = {**os.environ, "MLFLOW_ALLOW_FILE_STORE": "true", "GIT_PYTHON_REFRESH": "quiet"}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=180, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def file_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An MLflow file store with a run of 6 steps, written once: each test copies it."""
    root = tmp_path_factory.mktemp("mlflow-files") / "mlruns"
    return root, logged(root.as_uri(), range(6))


def copied(store: tuple[Path, str], tmp_path: Path) -> tuple[str, str, Path]:
    """The store copied under `tmp_path`: its URI, the run id and the run's directory."""
    root = tmp_path / "mlruns"
    shutil.copytree(store[0], root)
    run_id = store[1]
    (run_dir,) = root.glob(f"*/{run_id}")
    return root.as_uri(), run_id, run_dir


def test_an_mlflow_run_in_a_file_store(
    client: TestClient, tmp_path: Path, file_store: tuple[Path, str]
) -> None:
    uri, run_id, _ = copied(file_store, tmp_path)
    job = register(client, "mf-a", uri, run_id)
    assert (job["format"], job["source_run"], job["tracking_uri"]) == ("mlflow", run_id, uri)
    sync(client, "mf-a")
    check_run(client, "mf-a", 6)
    assert sync(client, "mf-a")["new_metrics"] == 0  # nothing read twice
    assert len(stored(client, "mf-a")) == 6
    # A plain path names the same store; registering it again changes nothing.
    again = client.post("/api/jobs", json={"job_id": "mf-a", "format": "mlflow",
                                           "tracking_uri": str(tmp_path / "mlruns"),
                                           "run_id": run_id})  # fmt: skip
    assert again.status_code == 200, again.text


def test_values_appended_later_are_read_once_on_the_next_sync(
    client: TestClient, tmp_path: Path, file_store: tuple[Path, str]
) -> None:
    uri, run_id, _ = copied(file_store, tmp_path)
    register(client, "mf-more", uri, run_id)
    sync(client, "mf-more")
    assert len(stored(client, "mf-more")) == 6
    resumed(uri, run_id, range(6, 9))
    # Two keys of three new steps: each step stored once, merged from both files.
    assert sync(client, "mf-more")["new_metrics"] == 6
    records = stored(client, "mf-more")
    assert [record["step"] for record in records] == list(range(9))
    assert records[8]["loss"]["total_loss"] == pytest.approx(1 / 9)
    assert records[8]["loss"]["actor_loss"] == 0.5
    assert sync(client, "mf-more")["new_metrics"] == 0
    assert client.get("/api/jobs/mf-more").json()["status"] == "completed"


def test_bad_half_written_and_rewritten_metric_lines(
    client: TestClient, tmp_path: Path, file_store: tuple[Path, str]
) -> None:
    uri, run_id, run_dir = copied(file_store, tmp_path)
    register(client, "mf-bad", uri, run_id)
    sync(client, "mf-bad")
    check_bad_half_written_and_rewritten_lines(client, "mf-bad", run_dir)


def check_bad_half_written_and_rewritten_lines(
    client: TestClient, job_id: str, run_dir: Path
) -> None:
    """After a first sync of the 6-step run in `run_dir` (here or on an SSH host)."""
    loss = run_dir / "metrics" / "train" / "loss"
    with loss.open("ab") as file:  # a bad line, a good one, a line still being written
        file.write(b"not a metric line\n1795900892999 0.25 40\n1795900893000 0.5")
    answer = sync(client, job_id)
    assert answer["lines_malformed"] == 1 and answer["new_metrics"] == 1
    assert [record["step"] for record in stored(client, job_id)][-1] == 40
    with loss.open("ab") as file:  # the writer finishes its line
        file.write(b" 41\n")
    assert sync(client, job_id)["new_metrics"] == 1
    assert stored(client, job_id)[-1]["loss"]["total_loss"] == 0.5
    # A metric file rewritten shorter (a restored copy): read again from its start.
    (run_dir / "metrics" / "actor" / "pg_loss").write_bytes(b"1795900893001 0.75 0\n")
    answer = sync(client, job_id)
    assert answer["resets"] == 1 and answer["new_metrics"] == 1
    records = stored(client, job_id)
    assert records[0]["loss"]["actor_loss"] == 0.75 and len(records) == 8
    assert records[0]["loss"]["total_loss"] == 1.0  # the step's other key kept


def test_bad_file_store_registrations(
    client: TestClient, settings: Settings, tmp_path: Path, file_store: tuple[Path, str]
) -> None:
    base = {"job_id": "mf", "format": "mlflow"}
    for body, reason in [
        ({**base, "tracking_uri": f"file://{tmp_path}/none", "run_id": "r"}, "no such directory"),
        ({**base, "tracking_uri": tmp_path.as_uri(), "run_id": "../etc"}, "not an MLflow run id"),
        ({**base, "tracking_uri": "file://elsewhere/mlruns", "run_id": "r"}, "on this machine"),
        ({**base, "tracking_uri": "ftp://h/mlruns", "run_id": "r"}, "a file store (file:///"),
    ]:  # fmt: skip
        answer = client.post("/api/jobs", json=body)
        assert answer.status_code == 422 and reason in answer.text, (body, answer.text)
    # A run the store does not hold: registered, and said on the job when read.
    register(client, "mf-gone", tmp_path.as_uri(), "0123456789abcdef")
    assert client.post("/api/monitoring/mf-gone/metrics/sync").status_code == 503
    error = client.get("/api/jobs/mf-gone").json()["last_sync_error"]
    assert "MLflow run 0123456789abcdef is not in the file store" in error
    # A store outside the directories jobs may live in is refused.
    uri, run_id, _ = copied(file_store, tmp_path)
    fenced = settings.model_copy(update={"allowed_job_roots": [tmp_path / "elsewhere"]})
    with TestClient(create_app(fenced)) as other:
        answer = other.post("/api/jobs", json={**base, "tracking_uri": uri, "run_id": run_id})
    assert answer.status_code == 422 and "PLATFORM_ALLOWED_JOB_ROOTS" in answer.text


def completed(messages: list[dict[str, Any]]) -> bool:
    return any(
        message.get("type") == "status" and message["data"].get("status") == "completed"
        for message in messages
    )


def stream_a_gated_run(
    settings: Settings, uri: str, start: Callable[[], subprocess.Popen[str]], job_id: str
) -> None:
    """A platform polling every 0.2 s; `start()` is an MLflow child that prints its run id
    and logs steps 0-3 once released (a line on its stdin): registered, subscribed,
    released, then every step arrives live, and the run's end ("completed")."""
    fast = live_settings(settings).model_copy(update={"ssh_poll_interval": 0.2})
    with live_server(fast) as server:
        child = start()
        try:
            assert child.stdout is not None and child.stdin is not None
            run_id = child.stdout.readline().split()[0]
            body = {"job_id": job_id, "format": "mlflow", "tracking_uri": uri, "run_id": run_id}
            answer = httpx.post(server.http_url("/api/jobs"), json=body, timeout=30)
            assert answer.status_code == 201, answer.text
            with open_ws(server.ws_url(f"/api/monitoring/{job_id}/live")) as ws:
                receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
                child.stdin.write("go\n")
                child.stdin.flush()
                messages = receive_until(ws, lambda got: 3 in metric_steps(got), timeout=60)
                status = receive_until(ws, completed, timeout=30)
        finally:
            child.communicate(timeout=120)
    assert sorted(set(metric_steps(messages))) == [0, 1, 2, 3]
    assert completed(status)  # receive_until stops at its timeout without failing


def test_values_logged_while_the_server_runs_stream_live(
    settings: Settings, tmp_path: Path
) -> None:
    uri = (tmp_path / "mlruns").as_uri()
    stream_a_gated_run(
        settings, uri, lambda: child_in_file_store(uri, range(4), pause=0.5, gate=True), "mf-live"
    )
