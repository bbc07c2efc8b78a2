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
    directory: Path,
    run: str,
    steps: range,
    *,
    project: str = "rl",
    pause: float = 0.0,
    system: bool = False,
) -> subprocess.Popen[bytes]:
    """Trackio logging `steps` of `run` in a child process (started, not waited for);
    with `system`, after each step the host's readings as Trackio's own CPU
    collector gives them and one GPU's under the keys of Trackio's GPU collector
    (this machine has no GPU), utilization 80 + step."""
    script = textwrap.dedent(f"""
        import time, trackio
        from trackio.cpu import collect_cpu_metrics
        trackio.init(project={project!r}, name={run!r},
                     config={{"lr": 1e-5, "hf_token": {SECRET!r}, "model": "qwen-0.5b"}})
        for step in {list(steps)!r}:
            trackio.log({{"train/loss": 1.0 / (step + 1), "train/reward": 0.1 * step,
                          "actor/pg_loss": 0.5, "note": "not a number"}}, step=step)
            if {system!r}:
                gpu = {{"gpu/0/utilization": 80 + step, "gpu/0/allocated_memory": 10.5,
                        "gpu/0/total_memory": 80.0, "gpu/0/temp": 61, "gpu/0/power": 300.5,
                        "gpu/0/power_limit": 700.0, "gpu/0/sm_clock": 1980,
                        "gpu/0/throttle_thermal": 0, "gpu/mean_utilization": 80 + step}}
                trackio.log_system({{**collect_cpu_metrics(), **gpu}})
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
    logged(directory, "grpo-1", range(6), system=True)
    logged(directory, "grpo-2", range(3))
    return directory / "rl.db"


def copy_project(project: Path, where: Path) -> None:
    for part in project.parent.glob("rl.db*"):  # its write-ahead log too, if any
        shutil.copy(part, where / part.name)


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
    copy_project(project, tmp_path)  # grpo-1, and grpo-2: another run of it
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


def test_a_trackio_runs_system_metrics_are_its_system_samples(
    client: TestClient, tmp_path: Path, project: Path
) -> None:
    copy_project(project, tmp_path)
    register(client, tmp_path, "tk-system", "grpo-1")
    sync(client, "tk-system")
    body = client.get("/api/monitoring/tk-system/system").json()
    assert body["all_hosts"] == ["trackio"]
    host = body["hosts"]["trackio"]
    assert host["count"] == 6
    series = host["series"]
    assert series["gpus.0.utilization"] == {"values": [80.0, 81.0, 82.0, 83.0, 84.0, 85.0]}
    assert series["gpus.0.memory_used_gib"]["values"][0] == 10.5  # Trackio's allocated_memory
    assert series["gpus.0.temperature_c"]["values"][0] == 61.0
    assert series["gpus.0.power_limit_w"]["values"][0] == 700.0
    assert series["gpus.0.sm_clock"]["values"][0] == 1980.0  # a reading of its own name
    assert "gpu.mean_utilization" not in json.dumps(sorted(series))  # an aggregate: left out
    count = series["cpu.count"]["values"][0]
    assert count >= 1 and 0 <= series["cpu.percent"]["values"][0] <= 100 * count
    assert 0 < series["memory.used_gib"]["values"][0] < series["memory.total_gib"]["values"][0]
    sync(client, "tk-system")  # read once: the samples are not stored again
    again = client.get("/api/monitoring/tk-system/system").json()["hosts"]["trackio"]
    assert again["count"] == 6


def test_trackio_system_rows_map_onto_the_samplers_series() -> None:
    from training_platform.ingest.formats.trackio_system import trackio_sample
    from training_platform.ingest.system_lines import system_sample

    logged = {"cpu/utilization": 50.0, "cpu/count_logical": 4, "cpu/0/utilization": 90.0,
              "memory/total": 16.0, "memory/available": 6.0, "memory/used": 9.0,
              "network/recv_mb_per_sec": 1.5, "network/recv_bytes": 10**9,
              "gpu/1/utilization": 1e9, "gpu/1/temp": 70, "temp/coretemp": 55.0}  # fmt: skip
    sample = system_sample(trackio_sample("2026-11-28T12:00:00+00:00", logged))
    assert sample["host"] == "trackio" and sample["step"] is None
    assert sample["timestamp"] == 1795867200.0
    assert sample["values"] == {
        "cpu.percent": 200.0,  # a mean over 4 cores, counted as top does
        "cpu.count": 4.0,
        "memory.total_gib": 16.0,
        "memory.used_gib": 10.0,  # total minus available, as the sampler's
        "network.recv_mib_s": 1.5,
        "gpus.1.temperature_c": 70.0,
    }
    assert sample["dropped"] == ["gpus.1.utilization"]  # out of its range: named
