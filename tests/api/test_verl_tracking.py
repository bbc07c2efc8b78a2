"""Runs logged by verl's own `Tracking` (verl 0.9, `trainer.logger=['console','file',
'tensorboard']`), read as jobs: its `file` logger's `{project}/{experiment}.jsonl`
(`"format": "verl_file"` naming the file) and its `tensorboard` logger's event
files (`"format": "tensorboard"`), written by verl in a child process.

Both hold the same steps with verl's key mapping; a run resumed from a
checkpoint (verl opens its file with "wb" again and starts a new event file)
rewrites the resumed steps in both; verl's TensorBoard directory is discovered
under the metrics directory; the file logger's run is read over SSH and streams
live as verl logs.
"""

from __future__ import annotations

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
from tests.fixtures_sshd import SSHD
from tests.ingest.test_verl_file import FIXTURE, stored, sync
from training_platform.settings import Settings

pytest.importorskip("verl.utils.tracking")

STEPS = range(1, 13)
EXPERIMENT = "grpo-a"


def verl_child(
    root: Path, steps: range, *, shift: float = 0.0, gate: bool = False
) -> subprocess.Popen[str]:
    """verl's `Tracking` with its file and TensorBoard loggers under `root`, logging
    the fixture's metric dicts with a few values made step-dependent (with `gate`, it
    prints "ready" once its loggers are open and waits for a line on its stdin)."""
    script = textwrap.dedent(f"""
        import json, sys
        from verl.utils.tracking import Tracking
        samples = [json.loads(line) for line in open({str(FIXTURE)!r})]
        tracking = Tracking(project_name="rl", experiment_name={EXPERIMENT!r},
                            default_backend=["file", "tensorboard"])
        if {gate!r}:
            print("ready", flush=True)
            sys.stdin.readline()
        for step in {list(steps)!r}:
            data = dict(samples[(step - 1) % len(samples)]["data"])
            data["actor/pg_loss"] = -0.01 * step + {shift!r}
            data["critic/score/mean"] = 0.05 * step + {shift!r}
            tracking.log(data=data, step=step)
        tracking.finish()
    """)
    env = {**os.environ, "VERL_FILE_LOGGER_ROOT": str(root),
           "TENSORBOARD_DIR": str(tensorboard_dir(root))}  # fmt: skip
    return subprocess.Popen([sys.executable, "-c", script], env=env, text=True, cwd=root,
                            stdin=subprocess.PIPE if gate else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip


def tensorboard_dir(root: Path) -> Path:
    """Where verl's TensorBoard logger writes by default: tensorboard_log/{project}/{name}."""
    return root / "tensorboard_log" / "rl" / EXPERIMENT


def logged(root: Path, steps: range, *, shift: float = 0.0) -> Path:
    child = verl_child(root, steps, shift=shift)
    _, errors = child.communicate(timeout=180)
    assert child.returncode == 0, errors
    return root


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-step run logged once by verl (it takes seconds to start); each test copies it."""
    return logged(tmp_path_factory.mktemp("verl"), STEPS)


def copy_run(written: Path, where: Path) -> Path:
    shutil.copytree(written, where, dirs_exist_ok=True)
    return where


def register(client: TestClient, job_id: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/api/jobs", json={"job_id": job_id, **body})
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


def register_both(client: TestClient, root: Path) -> None:
    """The file logger's run as "verl-file", the TensorBoard logger's as "verl-tb"."""
    register(
        client,
        "verl-file",
        {"metrics_dir": str(root / "rl"), "format": "verl_file", "file": f"{EXPERIMENT}.jsonl"},
    )
    register(client, "verl-tb",
             {"metrics_dir": str(tensorboard_dir(root)), "format": "tensorboard"})  # fmt: skip


def by_step(records: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {record["step"]: record for record in records}


def test_verls_file_and_tensorboard_loggers_give_the_same_steps(
    client: TestClient, tmp_path: Path, written: Path
) -> None:
    root = copy_run(written, tmp_path / "run")
    register_both(client, root)
    assert sync(client, "verl-file")["new_metrics"] == len(STEPS)
    sync(client, "verl-tb")
    from_file, from_tb = by_step(stored(client, "verl-file")), by_step(stored(client, "verl-tb"))
    assert sorted(from_file) == sorted(from_tb) == list(STEPS)
    record = from_file[3]
    assert record["loss"]["actor_loss"] == pytest.approx(-0.03)
    assert record["reward"]["mean"] == pytest.approx(0.15)
    assert record["extra"]["actor/entropy"] == pytest.approx(0.512)  # verl's own name
    for step in STEPS:  # TensorBoard keeps float32
        for group, key in (("loss", "actor_loss"), ("reward", "mean"), ("loss", "critic_loss")):
            assert from_tb[step][group][key] == pytest.approx(
                from_file[step][group][key], rel=1e-6, abs=1e-7
            ), (step, group, key)
    for job_id in ("verl-file", "verl-tb"):
        assert sync(client, job_id)["new_metrics"] == 0  # nothing read twice
        assert client.get(f"/api/jobs/{job_id}").json()["status"] == "running"


def test_a_run_resumed_by_verl_rewrites_the_resumed_steps(
    client: TestClient, tmp_path: Path, written: Path
) -> None:
    root = copy_run(written, tmp_path / "run")
    register_both(client, root)
    sync(client, "verl-file")
    sync(client, "verl-tb")
    # verl resumes from its step-6 checkpoint: the file logger opens its file with
    # "wb" (truncated, written from step 7), TensorBoard starts a new event file.
    logged(root, range(7, 10), shift=1.0)
    assert sync(client, "verl-file")["resets"] == 1
    sync(client, "verl-tb")
    for job_id in ("verl-file", "verl-tb"):
        records = by_step(stored(client, job_id))
        assert sorted(records) == list(STEPS), job_id  # 10-12 of the first run stay
        assert records[6]["reward"]["mean"] == pytest.approx(0.30), job_id
        assert records[8]["reward"]["mean"] == pytest.approx(1.40), job_id  # resumed
        assert records[11]["reward"]["mean"] == pytest.approx(0.55), job_id


def test_verls_tensorboard_directory_is_discovered(
    client: TestClient, metrics_dir: Path, written: Path
) -> None:
    shutil.copytree(written / "tensorboard_log", metrics_dir / "tensorboard_log")
    jobs = {job["job_id"]: job for job in client.get("/api/jobs").json()["jobs"]}
    job = jobs[f"tensorboard_log.rl.{EXPERIMENT}"]
    assert (job["format"], job["project"]) == ("tensorboard", "tensorboard_log/rl")
    assert sync(client, job["job_id"])["new_metrics"] == len(STEPS)


def test_verls_file_logger_on_an_ssh_host(
    ssh_client: TestClient, sshd: SSHD, written: Path
) -> None:
    remote_file = sshd.remote_dir / f"{EXPERIMENT}.jsonl"
    shutil.copyfile(written / "rl" / f"{EXPERIMENT}.jsonl", remote_file)
    body = sshd.job_body("remote-verl")
    register(ssh_client, "remote-verl", {**body, "format": "verl_file", "file": remote_file.name})
    assert sync(ssh_client, "remote-verl")["new_metrics"] == len(STEPS)
    records = by_step(stored(ssh_client, "remote-verl"))
    assert records[4]["reward"]["mean"] == pytest.approx(0.20)
    assert sync(ssh_client, "remote-verl")["new_metrics"] == 0
    # Resumed on the node: the truncated file is read again from its start.
    resumed = logged(copy_run(written, sshd.remote_dir.parent / "resumed"), range(7, 9), shift=1.0)
    shutil.copyfile(resumed / "rl" / f"{EXPERIMENT}.jsonl", remote_file)
    result = sync(ssh_client, "remote-verl")
    assert (result["resets"], result["new_metrics"]) == (1, 2)
    assert by_step(stored(ssh_client, "remote-verl"))[7]["reward"]["mean"] == pytest.approx(1.35)


def test_steps_verl_logs_while_the_server_runs_stream_live(
    settings: Settings, tmp_path: Path
) -> None:
    root = tmp_path / "live"
    root.mkdir()
    child = verl_child(root, range(1, 5), gate=True)
    try:
        assert child.stdout is not None and child.stdin is not None
        # verl says where its loggers write, then "ready": its file exists, still empty.
        said = [child.stdout.readline().strip()]
        while said[-1] != "ready" and said[-1] and len(said) < 20:
            said.append(child.stdout.readline().strip())
        assert said[-1] == "ready", said
        with live_server(live_settings(settings)) as server:
            body = {"job_id": "verl-live", "metrics_dir": str(root / "rl"),
                    "format": "verl_file", "file": f"{EXPERIMENT}.jsonl"}  # fmt: skip
            answer = httpx.post(server.http_url("/api/jobs"), json=body, timeout=30)
            assert answer.status_code == 201, answer.text
            with open_ws(server.ws_url("/api/monitoring/verl-live/live")) as ws:
                receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
                child.stdin.write("go\n")
                child.stdin.flush()
                messages = receive_until(ws, lambda got: 4 in metric_steps(got), timeout=30)
        assert metric_steps(messages) == [1, 2, 3, 4]  # each once, in order
        _, errors = child.communicate(timeout=60)
        assert child.returncode == 0, errors
    finally:
        child.kill()
