"""SSH jobs end to end through the API, against a real sshd on loopback."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from tests.fixtures_sshd import SSHD
from training_platform.api.main import create_app
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.settings import Settings


def append(sshd: SSHD, *steps: int, partial: bytes = b"") -> None:
    with (sshd.remote_dir / "remote1_metrics.jsonl").open("ab") as handle:
        for step in steps:
            handle.write(encode_record(build_record(step, {"reward": step / 10}, timestamp=1.0)))
        handle.write(partial)


def test_a_remote_file_is_queryable_after_one_sync(ssh_client: TestClient, sshd: SSHD) -> None:
    append(sshd, 0, 1, 2, partial=b'{"step": 3')
    (sshd.remote_dir / "remote1_status.json").write_text(
        '{"job_id": "remote1", "status": "running", "current_step": 2, "total_steps": 9,'
        ' "anomaly_detected": false, "anomaly_reason": null}'
    )

    created = ssh_client.post("/api/jobs", json=sshd.job_body())
    assert created.status_code == 201, created.text
    assert created.json()["ssh"]["host"] == sshd.host
    assert "password" not in created.text

    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").json()["new_metrics"] == 3
    history = ssh_client.get("/api/monitoring/remote1/metrics").json()["metrics"]
    assert [(r["step"], r["reward"]["mean"]) for r in history] == [(0, 0.0), (1, 0.1), (2, 0.2)]
    job = ssh_client.get("/api/jobs/remote1").json()
    assert (job["status"], job["current_step"], job["total_steps"]) == ("running", 2, 9)

    with (sshd.remote_dir / "remote1_metrics.jsonl").open("ab") as handle:
        handle.write(b', "timestamp": 1.0}\n')  # the partial line completes
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").json()["new_metrics"] == 1
    steps = [r["step"] for r in ssh_client.get("/api/monitoring/remote1/metrics").json()["metrics"]]
    assert steps == [0, 1, 2, 3]


def test_an_unknown_host_key_is_refused_at_registration(settings: Settings, sshd: SSHD) -> None:
    untrusting = settings.model_copy(update={"ssh_key_dir": sshd.key_dir})
    with TestClient(create_app(untrusting)) as client:
        response = client.post("/api/jobs", json=sshd.job_body())
        assert response.status_code == 422
        assert response.json()["code"] == "invalid_source"
        assert "host key" in response.json()["detail"].lower()
        assert client.get("/api/jobs").json() == {"jobs": []}


def test_a_key_outside_the_key_dir_is_refused(
    ssh_client: TestClient, sshd: SSHD, tmp_path_factory: pytest.TempPathFactory
) -> None:
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "id_ed25519"
    elsewhere.write_bytes(sshd.key_path.read_bytes())
    response = ssh_client.post("/api/jobs", json=sshd.job_body(key_path=str(elsewhere)))
    assert response.status_code == 422 and response.json()["code"] == "invalid_source"


def test_an_unreachable_host_is_503_on_sync_and_recovers(
    ssh_client: TestClient, sshd: SSHD
) -> None:
    append(sshd, 0, 1)
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").json()["new_metrics"] == 2

    sshd.stop()
    append(sshd, 2, 3)
    down = ssh_client.post("/api/monitoring/remote1/metrics/sync")
    assert down.status_code == 503 and down.json()["code"] == "metrics_source_unavailable"
    assert ssh_client.get("/api/jobs/remote1").json()["last_sync_error"]

    sshd.start()
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").json()["new_metrics"] == 2
    history = ssh_client.get("/api/monitoring/remote1/metrics").json()["metrics"]
    assert [r["step"] for r in history] == [0, 1, 2, 3]
    assert ssh_client.get("/api/jobs/remote1").json()["last_sync_error"] is None


def test_a_remote_samples_file_is_ingested_over_sftp_exactly_once(
    ssh_client: TestClient, sshd: SSHD
) -> None:
    append(sshd, 0, 1)
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201
    # No samples file yet: not an error, nothing to show.
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert ssh_client.get("/api/jobs/remote1").json()["last_sync_error"] is None
    assert ssh_client.get("/api/monitoring/remote1/samples").json()["samples"] == []

    samples = sshd.remote_dir / "remote1_samples.jsonl"
    first = [build_sample(0, i, "2+2?", f"answer {i}", reward=i / 2, group="g") for i in range(3)]
    with samples.open("ab") as handle:
        handle.write(b"".join(encode_record(sample) for sample in first))
        handle.write(b'{"step": 1, "index": 0, "prompt": "3+3?", "compl')  # mid-write
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    with samples.open("ab") as handle:
        handle.write(b'etion": "six", "reward": 1.0}\n')
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200

    stored = ssh_client.get("/api/monitoring/remote1/samples").json()["samples"]
    assert [(s["step"], s["index"], s["prompt"], s["completion"], s["reward"]) for s in stored] == [
        (0, 0, "2+2?", "answer 0", 0.0),
        (0, 1, "2+2?", "answer 1", 0.5),
        (0, 2, "2+2?", "answer 2", 1.0),
        (1, 0, "3+3?", "six", 1.0),
    ]
