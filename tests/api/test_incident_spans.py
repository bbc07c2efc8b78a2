"""The anomalies list as incidents: a span from onset to the last step the
condition held, whether it may still be going on, and episodes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.history.incidents import mark_episodes

CALM = {"kl": {"mean": 0.01}, "loss": {"total_loss": 1.0}}


def write_run(metrics_dir: Path, status: str) -> None:
    records = []
    for step in range(100):
        groups: dict[str, Any] = dict(CALM)
        if 20 <= step < 80:
            groups = {"kl": {"mean": 3.0}, "loss": {"total_loss": 1.0}}  # blown up, every step
        if step == 22:
            groups = {"kl": {"mean": 3.0}, "loss": {"total_loss": float("nan")}}
        records.append(build_record(step, groups, timestamp=float(step)))
    (metrics_dir / "span_metrics.jsonl").write_bytes(b"".join(encode_record(r) for r in records))
    status_file = metrics_dir / "span_status.json"
    status_file.write_text(json.dumps({"job_id": "span", "status": status, "step": 99}))


def incidents(client: TestClient) -> list[dict[str, Any]]:
    assert client.post("/api/monitoring/span/metrics/sync").status_code == 200
    answer = client.get("/api/monitoring/span/metrics/anomalies")
    assert answer.status_code == 200
    listed: list[dict[str, Any]] = answer.json()["anomalies"]
    return listed


def test_a_blow_up_that_lasts_is_one_incident_spanning_its_steps(
    client: TestClient, metrics_dir: Path
) -> None:
    write_run(metrics_dir, "running")

    found = {a["type"]: a for a in incidents(client)}

    assert set(found) == {"kl_explosion", "nan_inf"}
    kl, nan = found["kl_explosion"], found["nan_inf"]
    assert (kl["step"], kl["end_step"]) == (20, 79)  # 60 steps over the threshold: one alert
    assert (nan["step"], nan["end_step"]) == (22, 22)
    # Started 2 steps apart: one episode, named by its first part's onset.
    assert kl["episode"] == nan["episode"] == 20
    # 20 calm steps since step 79: the detectors would still hold it open
    # (it lasted 60 steps, so it ends after 120 clear ones) while the run runs.
    assert kl["ongoing"] is True


def test_nothing_is_ongoing_once_the_run_has_ended(client: TestClient, metrics_dir: Path) -> None:
    write_run(metrics_dir, "completed")

    assert [a["ongoing"] for a in incidents(client)] == [False, False]


def test_raw_rows_carry_their_extent_and_no_incident_view(
    client: TestClient, metrics_dir: Path
) -> None:
    write_run(metrics_dir, "running")
    incidents(client)

    rows = client.get("/api/monitoring/span/metrics/anomalies?raw=true").json()["anomalies"]

    kl = next(r for r in rows if r["type"] == "kl_explosion")
    assert (kl["source"], kl["end_step"], kl["ongoing"], kl["episode"]) == (
        "platform",
        79,
        None,
        None,
    )


def test_episodes_chain_onsets_that_follow_each_other_closely() -> None:
    listed = [{"step": step} for step in (401, 402, 403, 414, 419, 430, 712)]
    assert [i["episode"] for i in mark_episodes(listed)] == [401, 401, 401, 414, 414, 430, 712]
