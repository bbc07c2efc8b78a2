"""`GET /api/compare?fields=system...`: run-level system series, on both databases."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from tests.system_support import T0, append_system, gpu, system_line


def write_metrics(metrics_dir: Path, job_id: str, steps: int = 4) -> None:
    """A run that started 10 s before its first system sample."""
    records = [
        {"step": s, "timestamp": T0 - 10 + s, "loss": {"actor_loss": 1.0}} for s in range(steps)
    ]
    (metrics_dir / f"{job_id}_metrics.jsonl").write_text(
        "".join(json.dumps(record) + "\n" for record in records)
    )


def sync(client: TestClient, *job_ids: str) -> None:
    for job_id in job_ids:
        assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200


def compare(client: TestClient, query: str) -> list[dict[str, Any]]:
    answer = client.get(f"/api/compare?{query}")
    assert answer.status_code == 200, answer.text
    jobs: list[dict[str, Any]] = answer.json()["jobs"]
    return jobs


def two_runs(client: TestClient, metrics_dir: Path) -> None:
    """`one`: a host with 2 GPUs, its first sample without a step; `two`: a host with
    1 GPU (steps) and one with 3 (no steps); `none`: no system samples."""
    for job_id in ("one", "two", "none"):
        write_metrics(metrics_dir, job_id)
    append_system(
        metrics_dir / "one_system.jsonl",
        *(
            system_line(
                T0 + i, "node-a", None if i == 0 else i,
                gpus=[gpu(0, 10.0 + i, power_w=300.0), gpu(1, 30.0 + i, memory_used_gib=50.0)],
            )
            for i in range(4)
        ),
    )  # fmt: skip
    append_system(
        metrics_dir / "two_system.jsonl",
        *(
            system_line(T0 + i, "h1", i, gpus=[gpu(0, 40.0, temperature_c=70.0)], cpu_percent=100)
            for i in range(4)
        ),
    )
    append_system(
        metrics_dir / "two_system.h2.jsonl",
        *(
            system_line(
                T0 + i, "h2", gpus=[gpu(0, 60.0), gpu(1, 80.0), gpu(2, 100.0)],
                cpu_percent=50.0, memory_used_gib=20.0,
            )
            for i in range(4)
        ),
    )  # fmt: skip
    sync(client, "one", "two", "none")


def test_runs_with_different_gpu_counts_get_the_same_run_level_series(
    client: TestClient, metrics_dir: Path
) -> None:
    two_runs(client, metrics_dir)
    one, two, none = compare(client, "jobs=one,two,none&fields=system&x=time")
    assert one["series"] == {} and two["series"] == {}  # no metric asked
    assert "system.gpu_utilization" in one["system_series"]
    assert none["system_series"] == [] and "system" not in none

    a = one["system"]
    assert (a["downsampled"], a["hosts"], a["count"]) == (False, 1, 4)
    assert a["x_values"] == [10.0, 11.0, 12.0, 13.0]  # seconds since the run's first record
    assert a["steps"] == [None, 1, 2, 3]
    assert a["series"]["system.gpu_utilization"] == {"values": [20.0, 21.0, 22.0, 23.0]}
    assert a["series"]["system.gpu_memory_used_gib"] == {"values": [100.5] * 4}  # max
    assert a["series"]["system.gpu_power_w"] == {"values": [910.0] * 4}  # 300 + 610
    assert a["series"]["system.cpu_percent"] == {"values": [150.0] * 4}

    b = two["system"]
    assert (b["downsampled"], b["hosts"], b["count"]) == (False, 2, 4)
    assert b["steps"] == [0, 1, 2, 3]  # h1's steps; h2's samples know none
    series = b["series"]
    assert series["system.gpu_utilization"] == {"values": [70.0] * 4}  # (40+60+80+100)/4
    assert series["system.gpu_power_w"] == {"values": [2440.0] * 4}  # 4 GPUs x 610
    assert series["system.gpu_temperature_c"] == {"values": [70.0] * 4}  # the hottest
    assert series["system.cpu_percent"] == {"values": [150.0] * 4}  # 100 + 50
    assert series["system.memory_used_gib"] == {"values": [30.5] * 4}  # 10.5 + 20
    assert series["system.network_recv_mib_s"] == {"values": [2.5] * 4}
    assert series["system.disk_used_percent"] == {"values": [40.0] * 4}


def test_the_step_axis_drops_samples_without_a_step_and_metrics_still_come(
    client: TestClient, metrics_dir: Path
) -> None:
    two_runs(client, metrics_dir)
    one, two = compare(client, "jobs=one,two&fields=loss,system.gpu_utilization")
    assert list(one["series"]) == ["loss.actor_loss"]
    assert list(one["system"]["series"]) == ["system.gpu_utilization"]
    assert one["system"]["x_values"] == [1, 2, 3]
    assert one["system"]["series"]["system.gpu_utilization"] == {"values": [21.0, 22.0, 23.0]}
    assert two["system"]["x_values"] == [0, 1, 2, 3]
    (ranged,) = compare(client, "jobs=two&fields=system.cpu_percent&start_step=1&end_step=2")
    assert ranged["system"]["x_values"] == [1, 2]
    (tokens,) = compare(client, "jobs=two&fields=system.cpu_percent&x=tokens")
    assert tokens["system"]["x_values"] == [None] * 4
    # Without `fields`: every metric, and only the names of the system series.
    (default,) = compare(client, "jobs=one")
    assert "system" not in default and "system.gpu_power_w" in default["system_series"]


def test_a_long_run_is_bucketed_and_keeps_a_one_sample_spike(
    client: TestClient, metrics_dir: Path
) -> None:
    # 9,000 samples 30 s apart: read from the per-minute rollups.
    write_metrics(metrics_dir, "long")
    spike_at = 4_321
    append_system(
        metrics_dir / "long_system.jsonl",
        *(
            system_line(T0 + 30 * i, "node", i, gpus=[gpu(0, 100.0 if i == spike_at else 40.0)])
            for i in range(9_000)
        ),
    )
    write_metrics(metrics_dir, "calm")
    append_system(
        metrics_dir / "calm_system.jsonl",
        *(system_line(T0 + 30 * i, "node", i, gpus=[gpu(0, 40.0)]) for i in range(9_000)),
    )
    sync(client, "long", "calm")
    long, calm = compare(client, "jobs=long,calm&max_points=50&fields=system.gpu_utilization")
    system = long["system"]
    assert system["downsampled"] is True and system["count"] <= 50
    assert system["source"] == ["rollups of 60 s"]
    line = system["series"]["system.gpu_utilization"]
    assert max(line["max"]) == 100.0 and line["max"].count(100.0) == 1
    assert min(line["min"]) == 40.0
    assert max(calm["system"]["series"]["system.gpu_utilization"]["max"]) == 40.0


def test_bad_system_series_are_refused(client: TestClient, metrics_dir: Path) -> None:
    two_runs(client, metrics_dir)
    for fields in ("system.gpu_util", "system.nope,loss", "system.", "systemx.a,system.x"):
        answer = client.get(f"/api/compare?jobs=one&fields={fields}")
        assert answer.status_code == 422, fields
    answer = client.get("/api/compare?jobs=one&fields=system.gpu_util")
    assert "system.gpu_utilization" in answer.json()["detail"]


def test_hosts_sampling_at_other_moments_share_buckets(
    client: TestClient, metrics_dir: Path
) -> None:
    """h2 samples half a second after h1 and misses one sample: the run's sum neither
    doubles nor dips (a one-bucket gap keeps the host's value before it)."""
    write_metrics(metrics_dir, "drift")
    append_system(
        metrics_dir / "drift_system.jsonl",
        *(system_line(T0 + i, "h1", i, cpu_percent=100.0) for i in range(10)),
    )
    append_system(
        metrics_dir / "drift_system.h2.jsonl",
        *(system_line(T0 + i + 0.5, "h2", cpu_percent=50.0) for i in range(10) if i != 5),
    )
    sync(client, "drift")
    (entry,) = compare(client, "jobs=drift&fields=system.cpu_percent&x=time")
    system = entry["system"]
    assert system["downsampled"] is False and system["count"] == 11
    # Bucket 0 holds h1's first sample only, bucket 10 h2's last one.
    assert system["series"]["system.cpu_percent"]["values"] == [100.0] + [150.0] * 9 + [50.0]
    assert system["steps"] == [*range(10), None]
