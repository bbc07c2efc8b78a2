"""An MLflow file store on an SSH host (`"format": "mlflow"`, `"run_id"` and `"ssh"`, its
`remote_dir` the store's `mlruns`), read over SFTP from a real OpenSSH server: a run
written by MLflow itself reads as the same run read locally; values appended later
are read once; a half-written, a bad or a rewritten metric line and a key logged
later handled as locally; symlinks in the store never followed; bad registrations
refused, a store or run that is not there and a host that is down said on the job.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.api.test_mlflow_file_store import (
    check_bad_half_written_and_rewritten_lines,
    logged,
    resumed,
)
from tests.api.test_mlflow_runs import check_run, register
from tests.fixtures_sshd import SSHD
from tests.ingest.test_verl_file import stored, sync

pytest.importorskip("mlflow")


@pytest.fixture(scope="module")
def remote_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """An MLflow file store with a finished run of 6 steps, written once: each test
    copies it into the SSH host's directory."""
    root = tmp_path_factory.mktemp("mlflow-ssh") / "mlruns"
    return root, logged(root.as_uri(), range(6))


def on_host(store: tuple[Path, str], sshd: SSHD) -> tuple[Path, str, Path]:
    """The store copied onto the SSH host: its root, the run id and the run's directory."""
    root = sshd.remote_dir / "mlruns"
    shutil.copytree(store[0], root)
    (run_dir,) = root.glob(f"*/{store[1]}")
    return root, store[1], run_dir


def register_remote(
    client: TestClient, sshd: SSHD, job_id: str, root: Path, run_id: str, status: int = 201
) -> dict[str, Any]:
    body = {**sshd.job_body(job_id, remote_dir=str(root)), "format": "mlflow", "run_id": run_id}
    answer = client.post("/api/jobs", json=body)
    assert answer.status_code == status, answer.text
    job: dict[str, Any] = answer.json()
    return job


def synced_once(
    client: TestClient, sshd: SSHD, store: tuple[Path, str], job_id: str
) -> tuple[Path, str, Path]:
    """The store copied onto the host, its run registered as `job_id` and synced once."""
    root, run_id, run_dir = on_host(store, sshd)
    register_remote(client, sshd, job_id, root, run_id)
    sync(client, job_id)
    return root, run_id, run_dir


def test_a_finished_run_over_ssh_reads_as_the_same_run_read_locally(
    ssh_client: TestClient, sshd: SSHD, remote_store: tuple[Path, str]
) -> None:
    root, run_id, _ = on_host(remote_store, sshd)
    job = register_remote(ssh_client, sshd, "mfs-a", root, run_id)
    assert (job["format"], job["source"], job["source_run"]) == ("mlflow", "ssh", run_id)
    assert job["ssh"]["remote_dir"] == str(root) and job["tracking_uri"] is None
    register(ssh_client, "mfs-local", root.as_uri(), run_id)  # the same files, read here
    sync(ssh_client, "mfs-a")
    sync(ssh_client, "mfs-local")
    check_run(ssh_client, "mfs-local", 6)
    assert stored(ssh_client, "mfs-a") == stored(ssh_client, "mfs-local")
    remote, local = (
        ssh_client.get(f"/api/jobs/{job_id}").json() for job_id in ("mfs-a", "mfs-local")
    )
    for field in ("status", "name", "config", "tags", "project", "metrics_count"):
        assert remote[field] == local[field], field
    assert remote["status"] == "completed" and remote["last_sync_error"] is None
    assert sync(ssh_client, "mfs-a")["new_metrics"] == 0  # nothing read twice
    # The same registration again changes nothing.
    assert register_remote(ssh_client, sshd, "mfs-a", root, run_id, status=200)["source"] == "ssh"


def test_values_appended_later_and_a_key_logged_later_are_read_once(
    ssh_client: TestClient, sshd: SSHD, remote_store: tuple[Path, str]
) -> None:
    root, run_id, run_dir = synced_once(ssh_client, sshd, remote_store, "mfs-more")
    assert len(stored(ssh_client, "mfs-more")) == 6
    resumed(root.as_uri(), run_id, range(6, 9))  # MLflow appends to its metric files
    assert sync(ssh_client, "mfs-more")["new_metrics"] == 6  # 3 steps of two keys, merged
    assert [record["step"] for record in stored(ssh_client, "mfs-more")] == list(range(9))
    assert sync(ssh_client, "mfs-more")["new_metrics"] == 0
    # A key logged for the first time: read from the next sync on.
    (run_dir / "metrics" / "eval").mkdir()
    (run_dir / "metrics" / "eval" / "acc").write_bytes(b"1795900893002 0.75 8\n")
    assert sync(ssh_client, "mfs-more")["new_metrics"] == 1
    last = stored(ssh_client, "mfs-more")[-1]
    assert last["extra"]["eval/acc"] == 0.75 and last["loss"]["actor_loss"] == 0.5
    assert ssh_client.get("/api/jobs/mfs-more").json()["status"] == "completed"


def test_bad_half_written_and_rewritten_metric_lines_over_ssh(
    ssh_client: TestClient, sshd: SSHD, remote_store: tuple[Path, str]
) -> None:
    run_dir = synced_once(ssh_client, sshd, remote_store, "mfs-bad")[2]
    check_bad_half_written_and_rewritten_lines(ssh_client, "mfs-bad", run_dir)


def test_symlinks_in_the_remote_store_are_never_followed(
    ssh_client: TestClient, sshd: SSHD, remote_store: tuple[Path, str], tmp_path: Path
) -> None:
    root, run_id, run_dir = on_host(remote_store, sshd)
    outside = tmp_path / "outside"
    (outside / "metrics").mkdir(parents=True)
    (outside / "metrics" / "leak").write_bytes(b"1795900892999 9.5 3\n")
    (outside / "secret").write_text("hunter2")
    (run_dir / "metrics" / "leak").symlink_to(outside / "metrics" / "leak")
    (run_dir / "metrics" / "linked").symlink_to(outside / "metrics", target_is_directory=True)
    (run_dir / "params" / "token").symlink_to(outside / "secret")
    register_remote(ssh_client, sshd, "mfs-links", root, run_id)
    sync(ssh_client, "mfs-links")
    records = stored(ssh_client, "mfs-links")
    assert len(records) == 6 and not any("leak" in str(record) for record in records)
    job = ssh_client.get("/api/jobs/mfs-links").json()
    assert "token" not in job["config"] and "hunter2" not in str(job)


def test_bad_registrations_and_unreadable_stores(
    ssh_client: TestClient, sshd: SSHD, remote_store: tuple[Path, str]
) -> None:
    root, run_id, _ = on_host(remote_store, sshd)
    ssh = sshd.job_body("x", remote_dir=str(root))["ssh"]
    base = {"job_id": "mfs", "format": "mlflow", "ssh": ssh}
    for body, reason in [
        ({**base, "run_id": "../etc"}, "not an MLflow run id"),
        (base, "needs 'run_id'"),
        ({**base, "run_id": run_id, "tracking_uri": root.as_uri()}, "without 'tracking_uri'"),
        ({**base, "run_id": run_id, "ssh": {**ssh, "remote_rollout_dir": "/r"}}, "remote_rollout"),
        ({**base, "run_id": run_id, "file": "x.jsonl"}, "with format mlflow"),
    ]:  # fmt: skip
        answer = ssh_client.post("/api/jobs", json=body)
        assert answer.status_code == 422 and reason in answer.text, (body, answer.text)
    # What can only be seen on the host is said on the job at its sync (the host may
    # be down at registration): a directory that is not a store, none, a missing run.
    (sshd.remote_dir / "empty").mkdir()
    for job_id, where, run, said in [
        ("mfs-empty", sshd.remote_dir / "empty", run_id, "is it MLflow's mlruns?"),
        ("mfs-none", sshd.remote_dir / "none", run_id, "no such directory"),
        ("mfs-gone", root, "0123456789abcdef", "MLflow run 0123456789abcdef is not in the"),
    ]:
        register_remote(ssh_client, sshd, job_id, where, run)
        assert ssh_client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 503
        error = ssh_client.get(f"/api/jobs/{job_id}").json()["last_sync_error"]
        assert said in error and sshd.username in error, error
    # A host that is down: a clear sync error, never a 500.
    register_remote(ssh_client, sshd, "mfs-down", root, run_id)
    sync(ssh_client, "mfs-down")
    sshd.stop()
    assert ssh_client.post("/api/monitoring/mfs-down/metrics/sync").status_code == 503
    error = ssh_client.get("/api/jobs/mfs-down").json()["last_sync_error"]
    assert "unreachable" in error or "cannot connect" in error, error
