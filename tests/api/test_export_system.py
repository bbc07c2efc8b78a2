"""`GET /api/monitoring/{job_id}/system/export`: every system sample, as CSV, Parquet or JSONL."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow.parquet as pq
from fastapi.testclient import TestClient

from tests.system_support import T0, append_system, gpu, system_line

EXPORT = "/api/monitoring/run1/system/export"


def write_two_hosts(client: TestClient, metrics_dir: Path) -> None:
    # Two hours and a bit at 30 s (several chunks of an hour), a spike, two hosts.
    append_system(
        metrics_dir / "run1_system.jsonl",
        *(
            system_line(T0 + 30 * i, "trainer", i, gpus=[gpu(0, 97.3 if i == 200 else 40.0)])
            for i in range(260)
        ),
    )
    append_system(
        metrics_dir / "run1_system.node-2.jsonl",
        *(system_line(T0 + 30 * i + 1, "node-2", gpus=[gpu(0), gpu(1, 12.5)]) for i in range(3)),
    )
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200


def test_every_sample_of_every_host_comes_out_in_time_order_as_csv(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    write_two_hosts(client, metrics_dir)
    response = client.get(f"{EXPORT}?format=csv")
    assert response.status_code == 200
    assert 'filename="run1_system.csv"' in response.headers["content-disposition"]
    rows = list(csv.DictReader(io.StringIO(response.text)))
    assert len(rows) == 263
    assert list(rows[0])[:3] == ["timestamp", "host", "step"]
    times = [float(row["timestamp"]) for row in rows]
    assert times == sorted(times)
    trainer = [row for row in rows if row["host"] == "trainer"]
    assert [int(row["step"]) for row in trainer] == list(range(260))
    assert trainer[200]["gpus.0.utilization"] == "97.3"  # float32's digits, not 97.30000305
    assert trainer[0]["memory.used_gib"] == "10.5"
    assert trainer[0]["gpus.1.utilization"] == ""  # the trainer has one GPU
    node2 = [row for row in rows if row["host"] == "node-2"]
    assert [row["step"] for row in node2] == ["", "", ""]
    assert [row["gpus.1.utilization"] for row in node2] == ["12.5"] * 3


def test_parquet_and_jsonl_carry_the_same_samples_and_a_host_and_fields_can_be_picked(
    client: TestClient, run1: Path, metrics_dir: Path
) -> None:
    write_two_hosts(client, metrics_dir)
    parquet = client.get(f"{EXPORT}?format=parquet&host=node-2&fields=gpus.1,cpu")
    assert parquet.status_code == 200
    table = pq.read_table(io.BytesIO(parquet.content))
    assert table.column_names == [
        "timestamp", "host", "step", "cpu.count", "cpu.load1", "cpu.percent",
        "gpus.1.memory_total_gib", "gpus.1.memory_used_gib", "gpus.1.power_limit_w",
        "gpus.1.power_w", "gpus.1.temperature_c", "gpus.1.throttle_power",
        "gpus.1.throttle_thermal", "gpus.1.utilization",
    ]  # fmt: skip
    assert table.column("gpus.1.utilization").to_pylist() == [12.5] * 3
    assert table.column("step").to_pylist() == [None] * 3
    assert str(table.schema.field("cpu.percent").type) == "double"

    lines = client.get(f"{EXPORT}?format=jsonl&start={T0 + 30 * 199}&end={T0 + 30 * 201}")
    samples = [json.loads(line) for line in lines.text.splitlines()]
    assert [(s["host"], s["step"]) for s in samples] == [
        ("trainer", 199),
        ("trainer", 200),
        ("trainer", 201),
    ]
    assert samples[1]["values"]["gpus.0.utilization"] == 97.3
    assert "gpus.1.utilization" not in samples[1]["values"]


def test_bad_exports_are_clear_errors(client: TestClient, run1: Path, metrics_dir: Path) -> None:
    write_two_hosts(client, metrics_dir)
    assert client.get("/api/monitoring/nope/system/export").status_code == 404
    host = client.get(f"{EXPORT}?host=elsewhere")
    assert host.status_code == 422 and "elsewhere" in host.text and "trainer" in host.text
    field = client.get(f"{EXPORT}?fields=gpus.9")
    assert field.status_code == 422 and "gpus.9" in field.text
    assert client.get(f"{EXPORT}?start={T0 + 5}&end={T0}").status_code == 422
    assert client.get(f"{EXPORT}?format=xlsx").status_code == 422
    empty = client.get("/api/monitoring/run1/metrics/export?format=csv")
    assert empty.status_code == 200  # the metrics export is another file


def test_a_job_without_system_samples_exports_just_the_header(
    client: TestClient, run1: Path
) -> None:
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    response = client.get(f"{EXPORT}?format=csv")
    assert response.status_code == 200
    assert response.text.splitlines() == ["timestamp,host,step"]
