"""TensorBoard runs as jobs (`"format": "tensorboard"`, DESIGN.md §7): event files
written by torch's `SummaryWriter` ingested exactly once with the trainers' key
mapping, a step's tags merged across reads and files, hparams as the config
(secrets masked), new event files picked up, corrupt records counted, discovery
of run directories under the metrics directory, SSH, and live streaming.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.api.live_support import live_server, live_settings, metric_steps, open_ws, receive_until
from tests.fixtures_sshd import SSHD
from tests.ingest.test_verl_file import stored, sync
from training_platform.ingest.formats.tfrecord import frame
from training_platform.settings import Settings

torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")
from tensorboard.compat.proto import event_pb2, summary_pb2  # noqa: E402


def write_steps(directory: Path, steps: range, *, hparams: dict[str, Any] | None = None) -> None:
    """A run as torch's `SummaryWriter` writes it (one writer session: one event file)."""
    writer = torch_tensorboard.SummaryWriter(str(directory))
    for step in steps:
        writer.add_scalar("actor/pg_loss", 1.0 / (step + 1), step)
        writer.add_scalar("critic/score/mean", 0.01 * step, step)
        writer.add_scalar("train/loss", 2.0 - 0.01 * step, step)
        writer.add_scalar("my/custom", float(step), step, new_style=True)
    if hparams is not None:
        writer.add_hparams(hparams, {"hparam/final_reward": 0.5})
    writer.close()


def event(step: int, tag: str, value: float) -> bytes:
    """One framed scalar event, as a writer appends it."""
    summary = summary_pb2.Summary(value=[summary_pb2.Summary.Value(tag=tag, simple_value=value)])
    return frame(
        event_pb2.Event(wall_time=time.time(), step=step, summary=summary).SerializeToString()
    )


def register(client: TestClient, body: dict[str, Any]) -> dict[str, Any]:
    answer = client.post("/api/jobs", json={**body, "format": "tensorboard"})
    assert answer.status_code == 201, answer.text
    job: dict[str, Any] = answer.json()
    return job


def test_a_tensorboard_run_is_stored_with_the_trainers_key_mapping_and_its_hparams(
    client: TestClient, tmp_path: Path
) -> None:
    run = tmp_path / "tb" / "grpo"
    write_steps(run, range(20), hparams={"lr": 1e-5, "wandb_api_key": "wk-0123456789abcdef"})
    job = register(client, {"job_id": "tb-grpo", "metrics_dir": str(run)})
    assert job["format"] == "tensorboard"
    assert sync(client, "tb-grpo")["new_metrics"] >= 20
    records = stored(client, "tb-grpo")
    assert [record["step"] for record in records] == list(range(20))
    last = records[-1]
    assert last["loss"]["actor_loss"] == pytest.approx(1 / 20)
    assert last["loss"]["total_loss"] == pytest.approx(2.0 - 0.19)
    assert last["reward"]["mean"] == pytest.approx(0.19)
    assert last["extra"]["my/custom"] == 19.0  # the tool's own name
    assert records[0]["timestamp"] == pytest.approx(time.time(), abs=120)  # its wall time
    job = client.get("/api/jobs/tb-grpo").json()
    assert job["status"] == "running"  # records came: no status file to say more
    assert job["config"]["lr"] == pytest.approx(1e-5)  # from the hparams subdirectory
    assert "0123456789abcdef" not in str(job["config"])  # a secret is masked

    # Read again: nothing new is stored, nothing is repeated.
    assert sync(client, "tb-grpo")["new_metrics"] == 0
    assert len(stored(client, "tb-grpo")) == 20


def test_a_steps_tags_split_across_reads_are_merged(client: TestClient, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    path = run / "events.out.tfevents.1700000000.host.1.0"
    path.write_bytes(event(1, "actor/pg_loss", 0.5) + event(1, "critic/score/mean", 0.25))
    register(client, {"job_id": "split", "metrics_dir": str(run)})
    sync(client, "split")
    second = event(1, "train/loss", 1.5)
    with path.open("ab") as handle:  # the rest of step 1, and half of step 2's record
        handle.write(second + event(2, "actor/pg_loss", 0.4)[:10])
    sync(client, "split")
    (record,) = stored(client, "split")
    assert record["loss"] == {"actor_loss": 0.5, "total_loss": 1.5}
    assert record["reward"]["mean"] == 0.25
    with path.open("ab") as handle:  # the half-written record is finished
        handle.write(event(2, "actor/pg_loss", 0.4)[10:])
    sync(client, "split")
    assert [r["step"] for r in stored(client, "split")] == [1, 2]


def test_a_new_event_file_is_picked_up_and_a_corrupt_record_is_counted(
    client: TestClient, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    write_steps(run, range(5))
    register(client, {"job_id": "restarted", "metrics_dir": str(run)})
    sync(client, "restarted")
    # The run restarts from step 3: a second writer session, a second event file,
    # and in it one record whose data no longer matches its checksum.
    time.sleep(1.1)  # event files are named by the second they were created in
    write_steps(run, range(3, 8))
    (newer,) = sorted(run.glob("events.out.tfevents.*"))[1:]
    data = bytearray(newer.read_bytes())
    data[-5] ^= 0xFF  # inside the last record's data
    newer.write_bytes(bytes(data))
    result = sync(client, "restarted")
    assert result["lines_malformed"] == 1
    steps = [record["step"] for record in stored(client, "restarted")]
    assert steps == list(range(8))
    job = client.get("/api/jobs/restarted").json()
    assert "bad record data checksum" in job["last_sync_error"]


def test_run_directories_under_the_metrics_directory_are_discovered(
    client: TestClient, metrics_dir: Path
) -> None:
    write_steps(metrics_dir / "grpo" / "seed1", range(3))
    write_steps(metrics_dir / "grpo" / "seed2", range(3))
    (metrics_dir / ".hidden" / "x").mkdir(parents=True)
    jobs = {job["job_id"]: job for job in client.get("/api/jobs").json()["jobs"]}
    assert set(jobs) == {"grpo.seed1", "grpo.seed2"}
    seed1 = jobs["grpo.seed1"]
    assert (seed1["format"], seed1["project"], seed1["name"]) == (
        "tensorboard",
        "grpo",
        "grpo/seed1",
    )
    assert sync(client, "grpo.seed1")["new_metrics"] == 3
    # A deleted run stays deleted while its directory is still there.
    assert client.delete("/api/jobs/grpo.seed2").status_code in (200, 204)
    assert "grpo.seed2" not in {job["job_id"] for job in client.get("/api/jobs").json()["jobs"]}


def test_a_format_that_does_not_name_a_file_is_refused(client: TestClient, tmp_path: Path) -> None:
    body = {"job_id": "tb", "metrics_dir": str(tmp_path), "format": "tensorboard", "file": "x"}
    answer = client.post("/api/jobs", json=body)
    assert answer.status_code == 422 and "verl_file" in answer.text


def test_a_tensorboard_run_on_an_ssh_host(ssh_client: TestClient, sshd: SSHD) -> None:
    write_steps(sshd.remote_dir, range(4), hparams={"lr": 3e-6})
    job = register(ssh_client, sshd.job_body("remote-tb"))
    assert job["format"] == "tensorboard"
    sync(ssh_client, "remote-tb")
    records = stored(ssh_client, "remote-tb")
    assert [record["step"] for record in records] == [0, 1, 2, 3]
    assert records[2]["reward"]["mean"] == pytest.approx(0.02)
    assert ssh_client.get("/api/jobs/remote-tb").json()["config"]["lr"] == pytest.approx(3e-6)


def test_events_written_while_the_server_runs_stream_live(
    settings: Settings, tmp_path: Path
) -> None:
    run = tmp_path / "live-run"
    run.mkdir()
    with live_server(live_settings(settings)) as server:
        answer = httpx.post(
            server.http_url("/api/jobs"),
            json={"job_id": "tb-live", "metrics_dir": str(run), "format": "tensorboard"},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        with open_ws(server.ws_url("/api/monitoring/tb-live/live")) as ws:
            receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
            writer = torch_tensorboard.SummaryWriter(str(run))
            for step in range(3):
                writer.add_scalar("actor/pg_loss", 1.0 / (step + 1), step)
                writer.add_scalar("critic/score/mean", 0.1 * step, step)
            writer.flush()
            messages = receive_until(ws, lambda got: 2 in metric_steps(got), timeout=20)
            writer.close()
        steps = metric_steps(messages)
        assert sorted(set(steps)) == [0, 1, 2]
        last = [m for m in messages if m["type"] == "metric" and m["data"]["step"] == 2][-1]
        assert last["data"]["reward"]["mean"] == pytest.approx(0.2)
        assert last["data"]["loss"]["actor_loss"] == pytest.approx(1 / 3)


def test_an_event_file_rewritten_in_place_is_read_again_from_its_start(
    client: TestClient, tmp_path: Path
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    path = run / "events.out.tfevents.1700000000.host.1.0"
    path.write_bytes(b"".join(event(step, "actor/pg_loss", 1.0) for step in range(5)))
    register(client, {"job_id": "rewritten", "metrics_dir": str(run)})
    sync(client, "rewritten")
    # The same name, other bytes, shorter: a writer that started the file over.
    path.write_bytes(b"".join(event(step, "actor/pg_loss", 2.0) for step in range(3)))
    assert sync(client, "rewritten")["resets"] == 1
    records = stored(client, "rewritten")
    assert [r["loss"]["actor_loss"] for r in records] == [2.0, 2.0, 2.0, 1.0, 1.0]
