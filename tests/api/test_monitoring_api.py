"""`/api/monitoring/{job_id}/...`: history, pagination, anomalies, sync, non-finite JSON."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.history.incidents import merge_incidents

# Written as a person would, in the contract's format (long lines on purpose).
HAND_WRITTEN = b"""{"step": 0, "timestamp": 1704672000.0, "loss": {"actor_loss": 2.5, "critic_loss": 1.2, "total_loss": 3.7}, "reward": {"mean": 0.5, "std": 0.1, "max": 0.7, "min": 0.3}, "kl": {"mean": 0.1, "max": 0.15}, "gradient": {"actor_norm": 1.5, "critic_norm": 0.8}, "performance": {"tokens_per_second": 1000.0, "step_time": 2.5, "gpu_memory_allocated": 40.5}, "timing": {"rollout": 1.2, "reward": 0.3}, "extra": {"actor/entropy": 0.91, "response_length/mean": 312.0}}
{"step": 1, "timestamp": 1704672002.5, "loss": {"actor_loss": NaN, "total_loss": Infinity}, "kl": {"mean": -Infinity}, "extra": {"actor/entropy": NaN}, "anomalies": [{"type": "nan_inf", "severity": "critical", "message": "loss.actor_loss is NaN"}]}
"""


@pytest.fixture
def job(metrics_dir: Path) -> Path:
    path = metrics_dir / "run1_metrics.jsonl"
    path.write_bytes(HAND_WRITTEN)
    return path


def test_a_hand_written_file_is_queryable_after_one_sync(client: TestClient, job: Path) -> None:
    sync = client.post("/api/monitoring/run1/metrics/sync").json()
    assert sync["new_metrics"] == 2 and sync["at_eof"] is True

    body = client.get("/api/monitoring/run1/metrics").json()

    assert body["job_id"] == "run1" and body["count"] == 2 and body["next_start_step"] is None
    first = json.loads(HAND_WRITTEN.splitlines()[0])
    assert body["metrics"][0] == first


def test_non_finite_numbers_are_strings_in_standard_json(client: TestClient, job: Path) -> None:
    client.post("/api/monitoring/run1/metrics/sync")

    response = client.get("/api/monitoring/run1/metrics?start_step=1")

    def refuse(token: str) -> None:
        raise AssertionError(f"bare {token} in an API response")

    body = json.loads(response.text, parse_constant=refuse)
    (record,) = body["metrics"]
    assert record["loss"] == {"actor_loss": "NaN", "total_loss": "Infinity"}
    assert record["kl"] == {"mean": "-Infinity"}
    assert record["extra"] == {"actor/entropy": "NaN"}
    assert "critic_loss" not in record["loss"]


def test_step_range_is_inclusive_and_pages_follow_next_start_step(
    client: TestClient, metrics_dir: Path
) -> None:
    with (metrics_dir / "long_metrics.jsonl").open("wb") as handle:
        for step in range(0, 50, 2):
            handle.write(encode_record(build_record(step, {"loss": step}, timestamp=1.0)))
    client.post("/api/monitoring/long/metrics/sync")

    ranged = client.get("/api/monitoring/long/metrics?start_step=10&end_step=20").json()
    assert [r["step"] for r in ranged["metrics"]] == [10, 12, 14, 16, 18, 20]

    steps, start = [], 0
    while start is not None:
        page = client.get(f"/api/monitoring/long/metrics?start_step={start}&limit=7").json()
        assert page["count"] <= 7
        steps += [r["step"] for r in page["metrics"]]
        start = page["next_start_step"]
    assert steps == list(range(0, 50, 2))


@pytest.mark.parametrize(
    "query",
    [
        "start_step=-1",
        "end_step=abc",
        "start_step=5&end_step=4",
        "limit=0",
        "limit=100001",
        "start_step=1e3",
        "start_step=99999999999999999999999999",
    ],
)
def test_bad_parameters_are_422(client: TestClient, job: Path, query: str) -> None:
    response = client.get(f"/api/monitoring/run1/metrics?{query}")
    assert response.status_code == 422
    assert response.json()["code"] in ("validation_error", "invalid_parameter")


def test_anomalies_report_their_source(client: TestClient, job: Path) -> None:
    client.post("/api/monitoring/run1/metrics/sync")

    body = client.get("/api/monitoring/run1/metrics/anomalies").json()
    raw = client.get("/api/monitoring/run1/metrics/anomalies?raw=true").json()

    # The trainer's callback reported the NaN, and the platform's own detectors,
    # which run over every stored record whatever the trainer did, found it too:
    # one incident naming both, and the two stored rows with raw=true.
    assert body["job_id"] == "run1"
    (incident,) = body["anomalies"]
    assert (incident["step"], incident["type"], incident["severity"]) == (1, "nan_inf", "critical")
    assert incident["sources"] == ["callback", "platform"] and incident["source"] == "callback"
    assert incident["message"] == "loss.actor_loss is NaN"  # the callback's
    found = {(a["step"], a["type"], a["source"], tuple(a["sources"])) for a in raw["anomalies"]}
    assert found == {
        (1, "nan_inf", "callback", ("callback",)),
        (1, "nan_inf", "platform", ("platform",)),
    }
    platform_only = client.get("/api/monitoring/run1/metrics/anomalies?source=platform").json()
    assert [a["sources"] for a in platform_only["anomalies"]] == [["platform"]]
    assert client.get("/api/monitoring/run1/metrics/anomalies?source=x").status_code == 422
    assert client.get("/api/monitoring/run1/metrics/anomalies?raw=maybe").status_code == 422


def test_one_incident_per_step_and_type_with_the_highest_severity(
    client: TestClient, metrics_dir: Path
) -> None:
    calm = {"kl": {"mean": 0.01}, "loss": {"total_loss": 1.0}}
    records = [build_record(step, calm, timestamp=float(step)) for step in range(5)]
    # The callback calls a KL spike a warning; the platform's threshold (1.0) says critical.
    records.append(
        build_record(
            5,
            {"kl": {"mean": 7.0}, "loss": {"total_loss": 1.0}},
            timestamp=5.0,
            anomalies=[
                {"type": "kl_explosion", "severity": "warning", "message": "KL 7.0 at lr 3e-6"},
                {"type": "reward_hacking", "severity": "info", "message": "callback only"},
            ],
        )
    )
    # Past the detectors' cooldown (50 steps): a new incident, found by the platform alone.
    records += [build_record(step, calm, timestamp=float(step)) for step in range(6, 60)]
    records.append(
        build_record(60, {"kl": {"mean": 9.0}, "loss": {"total_loss": 1.0}}, timestamp=60)
    )
    (metrics_dir / "inc_metrics.jsonl").write_bytes(b"".join(encode_record(r) for r in records))
    client.post("/api/monitoring/inc/metrics/sync")

    merged = client.get("/api/monitoring/inc/metrics/anomalies").json()["anomalies"]
    rows = client.get("/api/monitoring/inc/metrics/anomalies?raw=true").json()["anomalies"]

    summary = [(a["step"], a["type"], a["severity"], a["sources"]) for a in merged]
    assert summary == [
        (5, "kl_explosion", "critical", ["callback", "platform"]),
        (5, "reward_hacking", "info", ["callback"]),
        (60, "kl_explosion", "critical", ["platform"]),
    ]
    assert merged[0]["message"] == "KL 7.0 at lr 3e-6"
    assert merged[0]["created_at"] == min(
        r["created_at"] for r in rows if (r["step"], r["type"]) == (5, "kl_explosion")
    )
    assert len(rows) == 4
    window = client.get("/api/monitoring/inc/metrics/anomalies?start_step=6").json()
    assert [(a["step"], a["sources"]) for a in window["anomalies"]] == [(60, ["platform"])]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/monitoring/ghost/metrics"),
        ("GET", "/api/monitoring/ghost/metrics/anomalies"),
        ("POST", "/api/monitoring/ghost/metrics/sync"),
    ],
)
def test_unknown_jobs_are_404_on_every_monitoring_route(
    client: TestClient, method: str, path: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == 404
    assert response.json()["code"] == "job_not_found"


def test_sync_of_a_registered_job_whose_file_vanished_is_503_not_500(
    client: TestClient, job: Path
) -> None:
    client.post("/api/monitoring/run1/metrics/sync")
    job.unlink()

    response = client.post("/api/monitoring/run1/metrics/sync")

    assert response.status_code == 503
    assert response.json()["code"] == "metrics_source_unavailable"
    assert "run1_metrics.jsonl" in client.get("/api/jobs/run1").json()["last_sync_error"]


def test_sync_counts_skipped_lines_and_explains_them(client: TestClient, metrics_dir: Path) -> None:
    (metrics_dir / "messy_metrics.jsonl").write_bytes(
        b'{"step": 1, "timestamp": 1.0}\n{broken\n{"step": 2, "timestamp": 2.0}\n{"step": 3'
    )
    body = client.post("/api/monitoring/messy/metrics/sync").json()
    assert (body["new_metrics"], body["lines_malformed"]) == (2, 1)
    assert len(body["errors"]) == 1 and "byte" in body["errors"][0]
    records = client.get("/api/monitoring/messy/metrics").json()["metrics"]
    assert [r["step"] for r in records] == [1, 2]
    assert not any(isinstance(v, float) and math.isnan(v) for r in records for v in r.values())


def test_an_incident_is_the_same_whichever_source_comes_first() -> None:
    callback = {
        "step": 7,
        "type": "grad_explosion",
        "severity": "warning",
        "message": "grad norm 40 (trainer)",
        "source": "callback",
        "created_at": 2.0,
    }
    platform = {
        "step": 7,
        "type": "grad_explosion",
        "severity": "critical",
        "message": "gradient.actor_norm 40 > 10x its median 0.4",
        "source": "platform",
        "created_at": 1.0,
    }
    expected = {
        "step": 7,
        "type": "grad_explosion",
        "severity": "critical",
        "message": "grad norm 40 (trainer)",
        "source": "callback",
        "sources": ["callback", "platform"],
        "created_at": 1.0,
        "evidence": None,  # only a finding from samples points at samples
        "end_step": 9,  # the furthest any source saw it go on
    }
    platform["end_step"] = 9

    assert merge_incidents([callback, platform]) == [expected]
    assert merge_incidents([platform, callback]) == [expected]
    # Without the callback's, the longest message says the most.
    terse = {**platform, "message": "grad", "severity": "warning"}
    (merged,) = merge_incidents([terse, platform])
    assert merged["message"] == platform["message"] and merged["sources"] == ["platform"]
