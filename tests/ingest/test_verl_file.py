"""Runs logged with verl's `file` logger (`trainer.logger=['console','file']`),
registered with `"format": "verl_file"`: ingested exactly once with the key
mapping the verl adapter uses, a restart that truncates the file ("wb") handled
as a rewritten file, bad lines counted, and new lines streamed live.

The lines are those of `tests/fixtures/verl/file_logger.jsonl` (the shape verl's
file logger writes, `{"step": N, "data": {flat keys}}`, from ../shared/samples).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from fastapi.testclient import TestClient

from tests.api.live_support import (
    live_server,
    live_settings,
    metric_steps,
    open_ws,
    receive_until,
)
from training_platform.settings import Settings

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "verl" / "file_logger.jsonl"
SAMPLE = [json.loads(line) for line in FIXTURE.read_text().splitlines()]


def verl_line(step: int, **changes: float) -> bytes:
    """A line as verl writes it: the fixture's data for `step`, some values changed."""
    data = {**SAMPLE[(step - 1) % len(SAMPLE)]["data"], **changes}
    return (json.dumps({"step": step, "data": data}) + "\n").encode()


def register(client: TestClient, metrics_dir: Path, job_id: str = "grpo-exp") -> dict[str, Any]:
    answer = client.post(
        "/api/jobs",
        json={"job_id": job_id, "metrics_dir": str(metrics_dir), "format": "verl_file"},
    )
    assert answer.status_code == 201, answer.text
    body: dict[str, Any] = answer.json()
    return body


def sync(client: TestClient, job_id: str = "grpo-exp") -> dict[str, Any]:
    answer = client.post(f"/api/monitoring/{job_id}/metrics/sync")
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def stored(client: TestClient, job_id: str = "grpo-exp") -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = client.get(
        f"/api/monitoring/{job_id}/metrics", params={"limit": 1000}
    ).json()["metrics"]
    return records


def test_a_verl_file_run_is_stored_with_the_verl_key_mapping(
    client: TestClient, metrics_dir: Path
) -> None:
    (metrics_dir / "grpo-exp.jsonl").write_bytes(FIXTURE.read_bytes())
    assert register(client, metrics_dir)["format"] == "verl_file"
    assert sync(client)["new_metrics"] == 3
    records = stored(client)
    assert [record["step"] for record in records] == [1, 2, 3]
    first, data = records[0], SAMPLE[0]["data"]
    assert first["loss"]["actor_loss"] == data["actor/pg_loss"]
    assert first["loss"]["critic_loss"] == data["critic/vf_loss"]
    assert first["reward"]["mean"] == data["critic/score/mean"]
    assert first["timing"]["gen"] == data["timing_s/gen"]
    assert first["extra"]["actor/entropy"] == data["actor/entropy"]  # verl's own name
    job = client.get("/api/jobs/grpo-exp").json()
    assert job["status"] == "running" and job["format"] == "verl_file"  # no status file


def test_a_restart_that_truncates_the_file_rewrites_the_resumed_steps(
    client: TestClient, metrics_dir: Path
) -> None:
    path = metrics_dir / "grpo-exp.jsonl"
    path.write_bytes(b"".join(verl_line(step) for step in range(1, 6)))
    register(client, metrics_dir)
    sync(client)
    # verl resumes from its step-3 checkpoint and opens the file with "wb".
    path.write_bytes(b"".join(verl_line(step, **{"actor/pg_loss": -1.0}) for step in (3, 4)))
    result = sync(client)
    assert result["resets"] == 1 and result["new_metrics"] == 2
    records = {record["step"]: record for record in stored(client)}
    assert sorted(records) == [1, 2, 3, 4, 5]  # step 5 of the old run stays until rewritten
    assert records[3]["loss"]["actor_loss"] == -1.0 and records[4]["loss"]["actor_loss"] == -1.0
    assert records[2]["loss"]["actor_loss"] == SAMPLE[1]["data"]["actor/pg_loss"]


def test_bad_lines_are_counted_and_the_rest_lands(client: TestClient, metrics_dir: Path) -> None:
    lines = [
        verl_line(1),
        b"not json\n",
        b'{"step": -1, "data": {"a": 1}}\n',
        b'{"step": 2, "data": [1, 2]}\n',
        b'{"data": {"a": 1}}\n',
        verl_line(3),
    ]
    (metrics_dir / "grpo-exp.jsonl").write_bytes(b"".join(lines))
    register(client, metrics_dir)
    result = sync(client)
    assert result["new_metrics"] == 2 and result["lines_malformed"] == 4
    assert [record["step"] for record in stored(client)] == [1, 3]


def test_an_unknown_format_is_422(client: TestClient, metrics_dir: Path) -> None:
    answer = client.post(
        "/api/jobs", json={"job_id": "x", "metrics_dir": str(metrics_dir), "format": "csv"}
    )
    assert answer.status_code == 422


def test_the_same_directory_as_another_format_is_a_conflict(
    client: TestClient, metrics_dir: Path
) -> None:
    (metrics_dir / "grpo-exp.jsonl").write_bytes(verl_line(1))
    register(client, metrics_dir)
    again = client.post("/api/jobs", json={"job_id": "grpo-exp", "metrics_dir": str(metrics_dir)})
    assert again.status_code == 409


def test_appended_verl_lines_stream_live(settings: Settings, metrics_dir: Path) -> None:
    path = metrics_dir / "grpo-exp.jsonl"
    path.write_bytes(verl_line(1))
    with live_server(live_settings(settings)) as server:
        answer = httpx.post(
            server.http_url("/api/jobs"),
            json={"job_id": "grpo-exp", "metrics_dir": str(metrics_dir), "format": "verl_file"},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        # Step 1 stored first: it is history, not live, for a client that comes later.
        httpx.post(server.http_url("/api/monitoring/grpo-exp/metrics/sync"), timeout=30)
        with open_ws(server.ws_url("/api/monitoring/grpo-exp/live")) as ws:
            receive_until(ws, lambda got: bool(got), timeout=20)  # subscribed
            with path.open("ab") as handle:
                handle.write(verl_line(2) + verl_line(3))
            messages = receive_until(ws, lambda got: 3 in metric_steps(got), timeout=20)
            # On PostgreSQL the lease keeper may still have been committing step 1 as
            # the client subscribed (the POST then answers its progress): step 1 is
            # sent live then. Each step once and in order either way.
            assert metric_steps(messages) in ([2, 3], [1, 2, 3])
            metric = next(m for m in messages if m["type"] == "metric")
            assert metric["data"]["reward"]["mean"] == SAMPLE[1]["data"]["critic/score/mean"]
