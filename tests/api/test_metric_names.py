"""Flat metric names (the columns', the design documents') wherever a series is named."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from training_platform.callbacks.wire.records import build_record
from training_platform.history.field_names import FLAT_NAMES, resolve_fields

HISTORY = "/api/monitoring/run1/metrics?max_points=100&fields="
EXPORT = "/api/monitoring/run1/metrics/export?format=csv&fields="


def kl_max_at(step: int) -> float:
    return math.inf if step == 2 else 0.1 * step


def write_run(metrics_dir: Path, job_id: str = "run1", steps: int = 5) -> None:
    with (metrics_dir / f"{job_id}_metrics.jsonl").open("w") as handle:
        for step in range(steps):
            record = {
                "step": step,
                "timestamp": 1_767_268_800.0 + step,
                "kl": {"mean": 0.01 * step, "max": kl_max_at(step)},
                "gradient": {"actor_norm": 1.0 + step},
                "performance": {"gpu_memory_allocated": 40.0 + step},
            }
            # Python's json writes inf as `Infinity`, the wire format's spelling.
            handle.write(json.dumps(record) + "\n")


@pytest.fixture
def run1(client: TestClient, metrics_dir: Path) -> str:
    write_run(metrics_dir)
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200
    return "run1"


def series(client: TestClient, fields: str) -> dict[str, Any]:
    response = client.get(HISTORY + fields)
    assert response.status_code == 200, response.text
    answer: dict[str, Any] = response.json()["series"]
    return answer


def test_the_design_documents_names_are_answered_under_those_names(
    client: TestClient, run1: str
) -> None:
    ours = series(client, "kl.max,gradient.actor_norm,performance.gpu_memory_allocated")
    theirs = series(client, "kl_divergence_max,grad_norm_actor,gpu_memory_allocated_gib")

    assert set(theirs) == {"kl_divergence_max", "grad_norm_actor", "gpu_memory_allocated_gib"}
    assert theirs["kl_divergence_max"] == ours["kl.max"]
    assert theirs["kl_divergence_max"]["values"][2] == "Infinity"
    assert theirs["grad_norm_actor"] == ours["gradient.actor_norm"]
    assert theirs["gpu_memory_allocated_gib"] == ours["performance.gpu_memory_allocated"]


def test_the_stored_column_names_are_taken_too(client: TestClient, run1: str) -> None:
    answer = series(client, "kl_max,actor_grad_norm")
    assert set(answer) == {"kl_max", "actor_grad_norm"}
    assert answer["actor_grad_norm"]["values"] == [1.0, 2.0, 3.0, 4.0, 5.0]


def test_a_series_asked_under_two_names_comes_under_both(client: TestClient, run1: str) -> None:
    answer = series(client, "kl,kl_divergence_max")
    assert set(answer) == {"kl.mean", "kl.max", "kl_divergence_max"}
    assert answer["kl_divergence_max"] == answer["kl.max"]


def test_a_near_miss_is_422_naming_it_and_the_name_it_resembles(
    client: TestClient, run1: str
) -> None:
    response = client.get(HISTORY + "kl_divergense_max")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "'kl_divergense_max'" in detail
    assert "did you mean 'kl_divergence_max'?" in detail


def test_compare_answers_each_run_in_the_asked_names_smoothed_too(
    client: TestClient, metrics_dir: Path
) -> None:
    write_run(metrics_dir, "a")
    write_run(metrics_dir, "b", steps=3)
    for job_id in ("a", "b"):
        assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200

    response = client.get("/api/compare?jobs=a,b&fields=grad_norm_actor&smoothing=0.5")

    assert response.status_code == 200, response.text
    for entry, steps in zip(response.json()["jobs"], (5, 3), strict=True):
        assert list(entry["series"]) == ["grad_norm_actor"]
        columns = entry["series"]["grad_norm_actor"]
        assert columns["values"] == [1.0 + step for step in range(steps)]
        assert len(columns["smoothed"]) == steps


def export_rows(client: TestClient, fields: str) -> list[list[str]]:
    response = client.get(EXPORT + fields)
    assert response.status_code == 200, response.text
    return list(csv.reader(io.StringIO(response.text)))


def test_csv_columns_take_the_asked_names(client: TestClient, run1: str) -> None:
    rows = export_rows(client, "gpu_memory_allocated_gib,kl.max,kl_divergence_max")

    assert rows[0] == [
        "step",
        "timestamp",
        "kl.max",
        "kl_divergence_max",
        "gpu_memory_allocated_gib",
    ]
    # Both names of one column spell its infinity: neither copy is spelt twice.
    assert rows[3][2:4] == ["inf", "inf"]
    assert rows[1][2:] == ["0.0", "0.0", "40.0"]


def test_parquet_columns_take_the_asked_names(client: TestClient, run1: str) -> None:
    response = client.get(EXPORT.replace("csv", "parquet") + "kl_divergence_max")
    assert response.status_code == 200, response.text
    table = pq.read_table(pa.BufferReader(response.content))
    assert table.column_names == ["step", "timestamp", "kl_divergence_max"]
    assert table.column("kl_divergence_max").to_pylist() == [kl_max_at(s) for s in range(5)]


def test_jsonl_keeps_the_nested_records_cut_to_the_named_field(
    client: TestClient, run1: str
) -> None:
    response = client.get(EXPORT.replace("csv", "jsonl") + "grad_norm_actor")
    assert response.status_code == 200, response.text
    first = json.loads(response.text.splitlines()[0])
    assert first["gradient"] == {"actor_norm": 1.0}
    assert "kl" not in first


def test_an_alias_of_a_field_the_run_never_logged_is_422_saying_which_it_is(
    client: TestClient, run1: str
) -> None:
    response = client.get(EXPORT + "grad_norm_critic")
    assert response.status_code == 422
    detail = response.json()["detail"]
    assert "'gradient.critic_norm'" in detail
    assert "'grad_norm_critic' is 'gradient.critic_norm'" in detail


def test_a_trainer_logging_the_documents_names_fills_the_fields(
    client: TestClient, metrics_dir: Path
) -> None:
    flat = {
        "kl_divergence_max": 0.5,
        "grad_norm_actor": 1.5,
        "grad_norm_critic": 2.5,
        "gpu_memory_allocated_gib": 40.5,
    }
    (metrics_dir / "run1_metrics.jsonl").write_text(
        json.dumps({"step": 0, "timestamp": 1.0, **flat}) + "\n"
    )
    assert client.post("/api/monitoring/run1/metrics/sync").status_code == 200

    (record,) = client.get("/api/monitoring/run1/metrics").json()["metrics"]

    assert record["kl"] == {"max": 0.5}
    assert record["gradient"] == {"actor_norm": 1.5, "critic_norm": 2.5}
    assert record["performance"] == {"gpu_memory_allocated": 40.5}
    assert "extra" not in record or not set(flat) & set(record["extra"])
    assert build_record(0, flat, timestamp=1.0) == {"step": 0, "timestamp": 1.0, **record}


def test_every_flat_name_names_a_fixed_field_and_omitted_series_are_renamed() -> None:
    assert FLAT_NAMES["kl_divergence_max"] == FLAT_NAMES["kl_max"] == "kl.max"
    assert len(FLAT_NAMES) == 14 + 4

    names = resolve_fields(["grad_norm_critic", "loss"])
    assert names.read == frozenset({"gradient.critic_norm", "loss"})
    body = {
        "series": {"loss.actor_loss": {}},
        "series_omitted": ["gradient.critic_norm"],
        "series_omitted_count": 1,
    }
    assert names.rename_answer(body) == {
        "series": {"loss.actor_loss": {}},
        "series_omitted": ["grad_norm_critic"],
        "series_omitted_count": 1,
    }
