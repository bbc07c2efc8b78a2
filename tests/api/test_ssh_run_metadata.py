"""Run metadata and comparison of an SSH job, against a real sshd on loopback."""

from __future__ import annotations

import json

from fastapi.testclient import TestClient

from tests.fixtures_sshd import SSHD
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record


def write_remote(sshd: SSHD, run: dict[str, object], status: str = "running") -> None:
    (sshd.remote_dir / "remote1_run.json").write_text(json.dumps({"job_id": "remote1", **run}))
    (sshd.remote_dir / "remote1_status.json").write_text(
        json.dumps({"job_id": "remote1", "status": status, "current_step": 2})
    )


def test_an_ssh_jobs_run_file_is_read_kept_up_to_date_and_compared(
    ssh_client: TestClient, sshd: SSHD
) -> None:
    with (sshd.remote_dir / "remote1_metrics.jsonl").open("ab") as handle:
        for step in range(3):
            record = build_record(step, {"loss": 1.0 / (step + 1)}, timestamp=10.0 + step)
            handle.write(encode_record(record))
    write_remote(sshd, {"project": "remote-p", "tags": ["ssh"], "config": {"lr": 1e-6}})
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    job = ssh_client.get("/api/jobs/remote1").json()
    assert (job["project"], job["tags"], job["config"]) == ("remote-p", ["ssh"], {"lr": 1e-6})
    listed = ssh_client.get("/api/jobs?project=remote-p&tag=ssh").json()["jobs"]
    assert [j["job_id"] for j in listed] == ["remote1"]

    # A restarted run rewrites its run file (and its status): the platform follows.
    write_remote(sshd, {"project": "remote-q", "config": {"lr": 3e-6}}, status="completed")
    ssh_client.post("/api/monitoring/remote1/metrics/sync")
    job = ssh_client.get("/api/jobs/remote1").json()
    assert (job["project"], job["config"], job["status"]) == ("remote-q", {"lr": 3e-6}, "completed")

    (entry,) = ssh_client.get("/api/compare?jobs=remote1&x=time&smoothing=0.5").json()["jobs"]
    assert entry["x_values"] == [0.0, 1.0, 2.0] and entry["smoothing_exact"] is True
    config = ssh_client.get("/api/compare/config?jobs=remote1").json()
    assert config == {"jobs": ["remote1"], "differences": {}, "same": 1}
