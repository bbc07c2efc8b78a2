"""Trackio runs as jobs (`"format": "trackio"`, DESIGN.md §7): rows written by Trackio
itself (`trackio.init` / `log` / `finish`, in a child process with its own
`TRACKIO_DIR`) read from its project database in place, exactly once, with the
trainers' key mapping and the run's config (secrets masked), each run of a project
its own job, new rows streamed live, and the bad registrations refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.api.live_support import live_server, live_settings, metric_steps, open_ws, receive_until
from tests.ingest.test_verl_file import stored, sync
from training_platform.settings import Settings

pytest.importorskip("trackio")

SECRET = "hf_abcdefghijklmnopqrst"


def log_with_trackio(
    directory: Path, run: str, steps: range, *, project: str = "rl", pause: float = 0.0
) -> subprocess.Popen[bytes]:
    """Trackio logging `steps` of `run` in a child process (started, not waited for)."""
    script = textwrap.dedent(f"""
        import time, trackio
        trackio.init(project={project!r}, name={run!r},
                     config={{"lr": 1e-5, "hf_token": {SECRET!r}, "model": "qwen-0.5b"}})
        for step in {list(steps)!r}:
            trackio.log({{"train/loss": 1.0 / (step + 1), "train/reward": 0.1 * step,
                          "actor/pg_loss": 0.5, "note": "not a number"}}, step=step)
            time.sleep({pause})
        trackio.finish()
    """)
    env = {**os.environ, "TRACKIO_DIR": str(directory), "HF_HUB_OFFLINE": "1"}
    return subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip


def logged(directory: Path, run: str, steps: range, **options: Any) -> None:
    child = log_with_trackio(directory, run, steps, **options)
    _, errors = child.communicate(timeout=120)
    assert child.returncode == 0, errors.decode()


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Trackio project with runs grpo-1 (6 steps) and grpo-2 (3), written once by
    Trackio (it takes seconds to start): each test copies its database."""
    directory = tmp_path_factory.mktemp("trackio")
    logged(directory, "grpo-1", range(6))
    logged(directory, "grpo-2", range(3))
    return directory / "rl.db"


def register(client: TestClient, directory: Path, job_id: str, run: str) -> dict[str, Any]:
    body = {"job_id": job_id, "metrics_dir": str(directory), "format": "trackio",
            "project": "rl", "run": run}  # fmt: skip
    answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


def test_a_trackio_run_is_read_in_place_exactly_once(
    client: TestClient, tmp_path: Path, project: Path
) -> None:
    for part in project.parent.glob("rl.db*"):  # its write-ahead log too, if any
        shutil.copy(part, tmp_path / part.name)  # grpo-1, and grpo-2: another run of it
    job = register(client, tmp_path, "tk-grpo-1", "grpo-1")
    assert (job["format"], job["file"], job["source_run"]) == ("trackio", "rl.db", "grpo-1")
    assert sync(client, "tk-grpo-1")["new_metrics"] == 6
    records = stored(client, "tk-grpo-1")
    assert [record["step"] for record in records] == list(range(6))
    assert records[2]["loss"]["total_loss"] == pytest.approx(1 / 3)  # train/loss
    assert records[2]["loss"]["actor_loss"] == 0.5
    assert records[2]["extra"]["train/reward"] == pytest.approx(0.2)
    assert "note" not in json.dumps(records[2])  # not a number: passed over
    job = client.get("/api/jobs/tk-grpo-1").json()
    assert (job["status"], job["project"], job["name"]) == ("running", "rl", "grpo-1")
    assert job["config"]["lr"] == pytest.approx(1e-5) and job["config"]["model"] == "qwen-0.5b"
    assert SECRET not in json.dumps(job["config"])  # masked
    assert not any(key.startswith("_") for key in job["config"])  # Trackio's own

    assert sync(client, "tk-grpo-1")["new_metrics"] == 0  # nothing read twice
    register(client, tmp_path, "tk-grpo-2", "grpo-2")
    assert sync(client, "tk-grpo-2")["new_metrics"] == 3  # its own rows only
    logged(tmp_path, "grpo-1", range(6, 8))  # resumed: a new Trackio run of that name
    sync(client, "tk-grpo-1")
    assert [record["step"] for record in stored(client, "tk-grpo-1")] == list(range(8))


@pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
def test_bad_trackio_registrations_are_refused(client: TestClient, tmp_path: Path) -> None:
    base = {"job_id": "tk", "metrics_dir": str(tmp_path), "format": "trackio"}
    for body, reason in [
        (base, "needs 'project' and 'run'"),
        ({**base, "project": "rl"}, "needs 'project' and 'run'"),
        ({**base, "project": "../etc/x", "run": "r"}, "not a Trackio project"),
        ({**base, "project": "rl", "run": "r", "file": "x.db"}, "not 'file'"),
        ({"job_id": "tk", "metrics_dir": str(tmp_path), "project": "rl"}, "format trackio"),
    ]:
        answer = client.post("/api/jobs", json=body)
        assert answer.status_code == 422 and reason in answer.text, (body, answer.text)


def test_a_missing_database_is_said_on_the_job(client: TestClient, tmp_path: Path) -> None:
    register(client, tmp_path, "tk-none", "r")
    answer = client.post("/api/monitoring/tk-none/metrics/sync")
    assert answer.status_code == 503
    job = client.get("/api/jobs/tk-none").json()
    assert "rl.db does not exist" in job["last_sync_error"]


def test_rows_logged_while_the_server_runs_stream_live(settings: Settings, tmp_path: Path) -> None:
    with live_server(live_settings(settings)) as server:
        body = {"job_id": "tk-live", "metrics_dir": str(tmp_path), "format": "trackio",
                "project": "rl", "run": "live"}  # fmt: skip
        answer = httpx.post(server.http_url("/api/jobs"), json=body, timeout=30)
        assert answer.status_code == 201, answer.text
        with open_ws(server.ws_url("/api/monitoring/tk-live/live")) as ws:
            receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
            child = log_with_trackio(tmp_path, "live", range(4), pause=0.3)
            try:
                messages = receive_until(ws, lambda got: 3 in metric_steps(got), timeout=60)
            finally:
                child.communicate(timeout=120)
        assert sorted(set(metric_steps(messages))) == [0, 1, 2, 3]
