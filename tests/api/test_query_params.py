"""Every REST route refuses a query parameter it does not take; `fields=` names real series."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from fastapi.testclient import TestClient

from tests.api.test_jobs_api import write_job


@pytest.mark.parametrize(
    ("path", "parameter"),
    [
        ("/api/monitoring/run1/metrics?maxpoints=100", "maxpoints"),
        ("/api/monitoring/run1/metrics?max_points=100&feilds=loss", "feilds"),
        ("/api/monitoring/run1/metrics/anomalies?sources=platform", "sources"),
        ("/api/jobs?helth=ok", "helth"),
        ("/api/jobs/run1?verbose=1", "verbose"),
    ],
)
def test_a_misspelt_query_parameter_is_422_naming_it(
    client: TestClient, metrics_dir: Path, path: str, parameter: str
) -> None:
    write_job(metrics_dir, "run1", steps=5)
    client.post("/api/monitoring/run1/metrics/sync")

    response = client.get(path)

    assert response.status_code == 422
    body = response.json()
    assert body["code"] == "validation_error"
    assert [error["loc"] for error in body["detail"]] == [["query", parameter]]
    assert parameter in body["detail"][0]["msg"]


def test_unknown_query_parameters_on_a_post_are_422_too(
    client: TestClient, metrics_dir: Path
) -> None:
    write_job(metrics_dir, "run1")
    response = client.post("/api/monitoring/run1/metrics/sync?force=1")
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["query", "force"]
    assert client.get("/api/jobs/run1").json()["metrics_count"] == 0  # nothing was done


def test_declared_query_parameters_still_work(client: TestClient, metrics_dir: Path) -> None:
    write_job(metrics_dir, "run1", steps=5)
    client.post("/api/monitoring/run1/metrics/sync")
    history = client.get("/api/monitoring/run1/metrics?start_step=1&end_step=3&limit=2")
    assert history.status_code == 200
    assert [record["step"] for record in history.json()["metrics"]] == [1, 2]
    series = client.get("/api/monitoring/run1/metrics?max_points=100&fields=loss,extra.x")
    assert series.status_code == 200


@pytest.mark.parametrize("entry", ["loss.actor_los", "reward.average", "los", "bogus.thing"])
def test_an_unknown_fields_entry_is_422_naming_it(
    client: TestClient, metrics_dir: Path, entry: str
) -> None:
    write_job(metrics_dir, "run1", steps=5)
    client.post("/api/monitoring/run1/metrics/sync")

    response = client.get(f"/api/monitoring/run1/metrics?max_points=100&fields=loss,{entry}")

    assert response.status_code == 422
    assert response.json()["code"] == "invalid_parameter"
    assert repr(entry) in response.json()["detail"]


def test_a_group_the_trainer_invented_is_a_valid_fields_entry(
    client: TestClient, metrics_dir: Path
) -> None:
    with (metrics_dir / "run1_metrics.jsonl").open("ab") as handle:
        for step in range(3):
            handle.write(orjson.dumps({"step": step, "timestamp": 1.0, "custom": {"x": step}}))
            handle.write(b"\n")
    client.post("/api/monitoring/run1/metrics/sync")

    response = client.get("/api/monitoring/run1/metrics?max_points=100&fields=custom")

    assert response.status_code == 200
    assert list(response.json()["series"]) == ["custom.x"]
