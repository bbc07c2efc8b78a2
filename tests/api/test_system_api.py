"""`GET /api/monitoring/{job_id}/system`: per host, exact or min/max buckets, bad parameters."""

from __future__ import annotations

import signal
from pathlib import Path

from fastapi.testclient import TestClient

from tests.callbacks.system.test_sysmon import start_sysmon, wait_for_lines
from tests.fixtures_sshd import SSHD
from tests.system_support import T0, append_system, gpu, system_line


def sync(client: TestClient) -> None:
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200


def test_two_hosts_come_back_exactly_and_a_host_and_series_can_be_picked(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    append_system(
        metrics_dir / "run1_system.jsonl",
        *(system_line(T0 + i, "trainer", i, gpus=[gpu(0, 80.0 + i)]) for i in range(4)),
    )
    append_system(
        metrics_dir / "run1_system.rollout-1.jsonl",
        *(system_line(T0 + i, "rollout-1", gpus=[gpu(0, 1.0), gpu(1, 2.0)]) for i in range(2)),
    )
    sync(client)

    body = client.get("/api/monitoring/run1/system").json()
    assert body["all_hosts"] == ["rollout-1", "trainer"]
    trainer = body["hosts"]["trainer"]
    assert (trainer["downsampled"], trainer["count"]) == (False, 4)
    assert trainer["steps"] == [0, 1, 2, 3]
    assert trainer["series"]["gpus.0.utilization"] == {"values": [80.0, 81.0, 82.0, 83.0]}
    assert trainer["series"]["cpu.percent"] == {"values": [150.0] * 4}

    picked = client.get(
        "/api/monitoring/run1/system?host=rollout-1&series=gpus.1,memory.used_gib"
    ).json()
    assert list(picked["hosts"]) == ["rollout-1"]
    names = sorted(picked["hosts"]["rollout-1"]["series"])
    assert "memory.used_gib" in names and "gpus.1.temperature_c" in names
    assert all(name.startswith("gpus.1.") or name == "memory.used_gib" for name in names)
    assert picked["hosts"]["rollout-1"]["series"]["gpus.1.utilization"] == {"values": [2.0, 2.0]}
    assert "cpu.percent" not in picked["hosts"]["rollout-1"]["series"]

    window = client.get(f"/api/monitoring/run1/system?host=trainer&start={T0 + 1}&end={T0 + 2}")
    assert window.json()["hosts"]["trainer"]["steps"] == [1, 2]


def test_a_long_run_comes_back_in_buckets_that_keep_a_one_sample_spike(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    # 9,000 samples 30 s apart (75 hours): past what is read sample by sample,
    # so the answer comes from the per-minute rollups.
    spike_at = 4_321
    lines = [
        system_line(T0 + 30 * i, "node", i, gpus=[gpu(0, 100.0 if i == spike_at else 40.0)])
        for i in range(9_000)
    ]
    append_system(metrics_dir / "run1_system.jsonl", *lines)
    sync(client)

    body = client.get("/api/monitoring/run1/system?max_points=50&series=gpus.0.utilization")
    node = body.json()["hosts"]["node"]
    assert node["downsampled"] is True and node["source"] == "rollups of 60 s"
    assert node["count"] <= 50
    series = node["series"]["gpus.0.utilization"]
    assert max(series["max"]) == 100.0 and min(series["min"]) == 40.0
    assert series["max"].count(100.0) == 1  # in exactly one bucket
    assert node["steps"][-1] == 8_999
    assert node["timestamps"] == sorted(node["timestamps"])

    fine = client.get(
        f"/api/monitoring/run1/system?max_points=50&start={T0 + 30 * 4_300}&end={T0 + 30 * 4_340}"
    ).json()["hosts"]["node"]
    assert fine["source"] == "samples" and fine["downsampled"] is False
    assert 100.0 in fine["series"]["gpus.0.utilization"]["values"]


def test_bad_parameters_and_unknown_jobs_and_hosts_are_clear_errors(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    append_system(metrics_dir / "run1_system.jsonl", system_line(T0, "node"))
    sync(client)
    missing = client.get("/api/monitoring/nope/system")
    assert missing.status_code == 404 and "nope" in missing.text
    host = client.get("/api/monitoring/run1/system?host=other")
    assert host.status_code == 422 and "'other'" in host.text and "node" in host.text
    reversed_range = client.get(f"/api/monitoring/run1/system?start={T0 + 5}&end={T0}")
    assert reversed_range.status_code == 422 and "after end" in reversed_range.text
    for query in ("max_points=1", "max_points=100000", "start=-1", "end=nan", "start=abc"):
        response = client.get(f"/api/monitoring/run1/system?{query}")
        assert response.status_code == 422, query


def test_a_job_without_system_samples_answers_no_hosts(client: TestClient, run1: Path) -> None:
    sync(client)
    body = client.get("/api/monitoring/run1/system").json()
    assert (body["all_hosts"], body["hosts"]) == ([], {})


def test_an_ssh_jobs_system_files_are_listed_and_read_over_sftp(
    ssh_client: TestClient, sshd: SSHD
) -> None:
    (sshd.remote_dir / "remote1_metrics.jsonl").write_bytes(b"")
    append_system(sshd.remote_dir / "remote1_system.jsonl", system_line(T0, "gpu-node-1", 0))
    append_system(
        sshd.remote_dir / "remote1_system.gpu-node-2.jsonl",
        *(system_line(T0 + i, "gpu-node-2", gpus=[gpu(0, 7.0)]) for i in range(3)),
    )
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    ssh_client.post("/api/monitoring/remote1/metrics/sync")  # nothing twice

    body = ssh_client.get("/api/monitoring/remote1/system").json()
    assert body["all_hosts"] == ["gpu-node-1", "gpu-node-2"]
    node2 = body["hosts"]["gpu-node-2"]
    assert node2["series"]["gpus.0.utilization"] == {"values": [7.0, 7.0, 7.0]}
    assert body["hosts"]["gpu-node-1"]["steps"] == [0]


def test_an_idle_gpu_of_a_running_job_is_one_system_anomaly(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    (metrics_dir / "run1_status.json").write_text(
        '{"job_id": "run1", "status": "running", "current_step": 12}'
    )
    sync(client)  # the job is running
    append_system(
        metrics_dir / "run1_system.worker.jsonl",
        *(system_line(T0 + 10 * i, "worker", gpus=[gpu(0), gpu(1, 1.0)]) for i in range(40)),
    )
    sync(client)
    sync(client)  # nothing new: nothing twice

    body = client.get("/api/monitoring/run1/metrics/anomalies?source=system").json()
    (incident,) = body["anomalies"]
    assert (incident["type"], incident["severity"], incident["step"]) == ("gpu_idle", "warning", 12)
    assert incident["evidence"] == [1] and "worker: GPU 1" in incident["message"]
    job = client.get("/api/jobs/run1").json()
    assert job["anomaly_count"] == 1 and job["health"] == "warning"


def test_two_real_sysmon_processes_show_as_two_hosts_of_the_job(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    # Two nodes of one run, each a `training-platform sysmon` process of its own.
    nodes = {
        host: start_sysmon("run1", "--output-dir", str(metrics_dir), "--interval", "0.2",
                           "--host", host)
        for host in ("rollout-node", "train-node")
    }  # fmt: skip
    try:
        for host, process in nodes.items():
            wait_for_lines(metrics_dir / f"run1_system.{host}.jsonl", 3, process)
    finally:
        for process in nodes.values():
            process.send_signal(signal.SIGTERM)
            process.communicate(timeout=30)
    sync(client)

    body = client.get("/api/monitoring/run1/system").json()
    assert body["all_hosts"] == ["rollout-node", "train-node"]
    for host in nodes:
        answer = body["hosts"][host]
        assert answer["count"] >= 3 and answer["steps"] == [None] * answer["count"]
        memory = answer["series"]["memory.total_gib"]["values"]
        assert all(value is not None and value > 0 for value in memory)  # this machine's
