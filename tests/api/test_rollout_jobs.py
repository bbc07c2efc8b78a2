"""verl's rollout dumps through the API: `rollout_dir` / `ssh.remote_rollout_dir` at
registration, read as the job's samples (locally and over a real sshd), and announced live."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.live_support import (
    append_steps,
    live_server,
    live_settings,
    open_ws,
    receive,
    receive_until,
)
from tests.fixtures_sshd import SSHD
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.settings import Settings


def dump(directory: Path, step: int, n: int) -> None:
    """A step file as verl's `_dump_generations` writes it."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = [
        json.dumps(
            {"input": f"q{i // 2}", "output": f"a{i} at {step}", "gts": f"t{i // 2}",
             "score": float(i % 2), "step": step, "acc": i % 2 == 1, "uid": f"u{i // 2}"}
        )
        for i in range(n)
    ]  # fmt: skip
    (directory / f"{step}.jsonl").write_text("\n".join(lines) + "\n")


def write_metrics(directory: Path, job_id: str, *steps: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory / f"{job_id}_metrics.jsonl").open("ab") as handle:
        for step in steps:
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=1.0)))


def samples(client: TestClient, job_id: str) -> list[tuple[Any, ...]]:
    response = client.get(f"/api/monitoring/{job_id}/samples")
    assert response.status_code == 200, response.text
    return [
        (s["step"], s["index"], s["prompt"], s["completion"], s["reward"], s["group"], s["extra"])
        for s in response.json()["samples"]
    ]


def test_a_registered_rollout_dir_is_read_as_the_jobs_samples(
    client: TestClient, tmp_path: Path
) -> None:
    runs, rollouts = tmp_path / "runs", tmp_path / "verl" / "run7"
    write_metrics(runs, "run7", 1, 2)
    body = {"job_id": "run7", "metrics_dir": str(runs), "rollout_dir": str(rollouts)}

    created = client.post("/api/jobs", json=body)  # before verl made the directory
    assert created.status_code == 201, created.text
    assert created.json()["rollout_dir"] == str(rollouts.resolve())
    assert client.post("/api/jobs", json=body).status_code == 200  # the same source again
    other = {**body, "rollout_dir": str(tmp_path / "elsewhere")}
    assert client.post("/api/jobs", json=other).status_code == 409

    dump(rollouts, 1, 2)
    dump(rollouts, 2, 3)
    assert client.post("/api/monitoring/run7/metrics/sync").status_code == 200

    assert samples(client, "run7") == [
        (1, 0, "q0", "a0 at 1", 0.0, "u0", {"gts": "t0", "acc": False}),
        (1, 1, "q0", "a1 at 1", 1.0, "u0", {"gts": "t0", "acc": True}),
        (2, 0, "q0", "a0 at 2", 0.0, "u0", {"gts": "t0", "acc": False}),
        (2, 1, "q0", "a1 at 2", 1.0, "u0", {"gts": "t0", "acc": True}),
        (2, 2, "q1", "a2 at 2", 0.0, "u1", {"gts": "t1", "acc": False}),
    ]
    assert client.get("/api/jobs/run7").json()["rollout_dir"] == str(rollouts.resolve())


def test_a_discovered_job_shows_no_rollout_dir_but_reads_its_default_one(
    client: TestClient, metrics_dir: Path
) -> None:
    write_metrics(metrics_dir, "run1", 1)
    dump(metrics_dir / "run1_rollouts", 1, 2)
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    assert client.get("/api/jobs/run1").json()["rollout_dir"] is None
    assert [s[:2] for s in samples(client, "run1")] == [(1, 0), (1, 1)]


@pytest.mark.parametrize(
    ("extra", "code"),
    [
        ({"rollout_dir": "FILE"}, "invalid_source"),  # a file, not a directory
        ({"rollout_dir": "bad\x00path"}, "validation_error"),
        ({"rollout_dir": ""}, "validation_error"),
    ],
)
def test_a_bad_rollout_dir_is_refused(
    client: TestClient, tmp_path: Path, extra: dict[str, str], code: str
) -> None:
    write_metrics(tmp_path / "runs", "run7", 1)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    if extra.get("rollout_dir") == "FILE":
        extra = {"rollout_dir": str(a_file)}
    body = {"job_id": "run7", "metrics_dir": str(tmp_path / "runs"), **extra}
    response = client.post("/api/jobs", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["code"] == code
    assert client.get("/api/jobs").json() == {"jobs": []}


def test_an_ssh_jobs_remote_rollout_dir_is_read_over_sftp(
    ssh_client: TestClient, sshd: SSHD
) -> None:
    write_metrics(sshd.remote_dir, "remote1", 1, 2)
    remote_rollouts = sshd.remote_dir / "verl_rollouts"
    dump(remote_rollouts, 1, 2)
    (remote_rollouts / "notes.txt").write_text("ignored")

    top_level = {**sshd.job_body(), "rollout_dir": str(remote_rollouts)}
    refused = ssh_client.post("/api/jobs", json=top_level)
    assert refused.status_code == 422 and "remote_rollout_dir" in refused.text

    created = ssh_client.post(
        "/api/jobs", json=sshd.job_body(remote_rollout_dir=str(remote_rollouts))
    )
    assert created.status_code == 201, created.text
    job = created.json()
    assert job["rollout_dir"] == job["ssh"]["remote_rollout_dir"] == str(remote_rollouts)

    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert [s[:4] for s in samples(ssh_client, "remote1")] == [
        (1, 0, "q0", "a0 at 1"),
        (1, 1, "q0", "a1 at 1"),
    ]

    dump(remote_rollouts, 1, 1)  # rewritten shorter
    dump(remote_rollouts, 2, 1)
    with (remote_rollouts / "3.jsonl").open("w") as handle:
        handle.write('{"input": "q", "output": "being written"}')  # no final newline yet
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert [s[:2] for s in samples(ssh_client, "remote1")] == [(1, 0), (2, 0)]

    with (remote_rollouts / "3.jsonl").open("a") as handle:
        handle.write('\n{"input": "q", "output": "done"}\n')
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert [s[:4] for s in samples(ssh_client, "remote1")][2:] == [
        (3, 0, "q", "being written"),
        (3, 1, "q", "done"),
    ]

    dump(sshd.remote_dir / "elsewhere", 4, 2)
    (remote_rollouts / "4.jsonl").symlink_to(sshd.remote_dir / "elsewhere" / "4.jsonl")
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert [s[:2] for s in samples(ssh_client, "remote1")][-1] == (3, 1)  # not followed
    error = ssh_client.get("/api/jobs/remote1").json()["last_sync_error"]
    assert "rollout step 4" in error and "symbolic link" in error


def test_a_new_step_file_is_announced_live(
    settings: Settings, run1: Path, metrics_dir: Path
) -> None:
    rollouts = metrics_dir / "run1_rollouts"
    with (
        live_server(live_settings(settings)) as server,
        open_ws(server.ws_url("/api/monitoring/run1/live")) as ws,
    ):
        assert receive(ws)["type"] == "status"
        append_steps(run1, [1])
        dump(rollouts, 1, 4)
        messages = receive_until(ws, lambda ms: any(m["type"] == "samples" for m in ms))
        dump(rollouts, 2, 6)  # no metrics line: the rollout directory alone makes it due
        messages += receive_until(
            ws, lambda ms: any(m["type"] == "samples" and m["step"] == 2 for m in ms)
        )

    announced = [(m["step"], m["count"]) for m in messages if m["type"] == "samples"]
    assert announced == [(1, 4), (2, 6)]


def test_rollouts_dumped_by_verls_own_trainer_code_are_the_jobs_samples(
    client: TestClient, tmp_path: Path
) -> None:
    ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
    runs, rollouts = tmp_path / "runs", tmp_path / "rollout_data"
    write_metrics(runs, "grpo7", 3)
    # verl's RayPPOTrainer methods themselves (`trainer.rollout_data_dir`): only the
    # dump executor's state is set up; nothing of Ray or a GPU is involved.
    trainer = object.__new__(ray_trainer.RayPPOTrainer)
    trainer._init_dump_executor()
    trainer.global_steps = 3
    trainer._dump_generations(
        inputs=["What is 2+3?", "What is 2+3?"], outputs=["5", "The answer is 6"],
        gts=["5", "5"], scores=[1.0, 0.0], reward_extra_infos_dict={"acc": [True, False]},
        dump_path=str(rollouts),
    )  # fmt: skip
    trainer._shutdown_dump_executor()  # waits for the background write
    body = {"job_id": "grpo7", "metrics_dir": str(runs), "rollout_dir": str(rollouts)}
    assert client.post("/api/jobs", json=body).status_code == 201
    assert client.post("/api/monitoring/grpo7/metrics/sync").status_code == 200
    assert [s[:5] for s in samples(client, "grpo7")] == [
        (3, 0, "What is 2+3?", "5", 1.0),
        (3, 1, "What is 2+3?", "The answer is 6", 0.0),
    ]
    assert samples(client, "grpo7")[0][6] == {"gts": "5", "acc": True}
