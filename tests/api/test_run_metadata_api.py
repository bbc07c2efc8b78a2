"""Run metadata: the run file ingested and kept up to date, jobs filtered by it, PATCH."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.wire.run_file import default_framework
from training_platform.ingest.run_file import RUN_MAX_BYTES


def start_run(metrics_dir: Path, job_id: str, **options: Any) -> None:
    """A real callback run of two steps: metrics, status and run file."""
    callback = PlatformCallback(job_id, metrics_dir, **options)
    callback.on_train_begin(2)
    for step in range(2):
        callback.on_step_end(step, {"loss": 1.0 / (step + 1), "reward": 0.5})
    callback.on_train_end()


def sync(client: TestClient, job_id: str) -> None:
    assert client.post(f"/api/monitoring/{job_id}/metrics/sync").status_code == 200


def job(client: TestClient, job_id: str) -> dict[str, Any]:
    answer = client.get(f"/api/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def listed(client: TestClient, query: str) -> list[str]:
    answer = client.get(f"/api/jobs?{query}")
    assert answer.status_code == 200, answer.text
    ids = [j["job_id"] for j in answer.json()["jobs"]]
    assert answer.headers["X-Total-Count"] == str(len(ids))
    return sorted(ids)


def test_a_run_file_is_served_with_its_job(client: TestClient, metrics_dir: Path) -> None:
    start_run(
        metrics_dir, "lr-3e-6", project="math-grpo", name="lr 3e-6", tags=["grpo", "qwen"],
        config={"actor": {"lr": 3e-6, "hub_token": "hf_x"}, "rollout": {"n": 8}},
    )  # fmt: skip
    sync(client, "lr-3e-6")
    data = job(client, "lr-3e-6")
    assert (data["project"], data["name"], data["tags"]) == (
        "math-grpo",
        "lr 3e-6",
        ["grpo", "qwen"],
    )
    assert data["config"] == {"actor": {"lr": 3e-6, "hub_token": "***"}, "rollout": {"n": 8}}
    assert data["notes"] is None
    run = data["run"]
    assert run["framework"] == default_framework() and run["host"] and run["started_at"] > 0
    assert (run["file_error"], run["file_refusals"]) == (None, 0)
    assert data["metrics_count"] == 2  # the numbers as ever
    (listed_job,) = client.get("/api/jobs").json()["jobs"]
    assert listed_job["config"] == data["config"]


def test_a_job_without_a_run_file_has_empty_metadata(client: TestClient, run1: Path) -> None:
    data = job(client, "run1")
    assert (data["project"], data["name"], data["tags"], data["config"], data["run"]) == (
        None, None, [], None, None,
    )  # fmt: skip


def test_jobs_filter_by_project_tag_status_and_text(client: TestClient, metrics_dir: Path) -> None:
    start_run(metrics_dir, "a1", project="math", name="Baseline LR", tags=["grpo", "base"])
    start_run(metrics_dir, "a2", project="math", name="high lr", tags=["grpo"])
    start_run(metrics_dir, "b1", project="code", tags=["ppo"])
    (metrics_dir / "c1_metrics.jsonl").write_bytes(b"")  # pending, no run file
    for job_id in ("a1", "a2", "b1", "c1"):
        sync(client, job_id)
    assert listed(client, "project=math") == ["a1", "a2"]
    assert listed(client, "tag=grpo") == ["a1", "a2"]
    assert listed(client, "tag=grpo&tag=base") == ["a1"]  # every tag
    assert listed(client, "status=pending") == ["c1"]
    assert listed(client, "status=pending&status=completed") == ["a1", "a2", "b1", "c1"]
    assert listed(client, "q=LR") == ["a1", "a2"]  # names, case-insensitively
    assert listed(client, "q=b1") == ["b1"]  # ids
    assert listed(client, "q=%25") == []  # a literal %, not a wildcard
    assert listed(client, "project=math&tag=base&health=ok") == ["a1"]
    assert listed(client, "project=nothing") == []
    for bad in ("status=done", "tag=", "q=", "project=" + "x" * 257, "tag=" + "t" * 65):
        assert client.get(f"/api/jobs?{bad}").status_code == 422, bad


def test_a_rewritten_run_file_replaces_what_it_said(client: TestClient, metrics_dir: Path) -> None:
    start_run(metrics_dir, "re", project="p1", tags=["old"], config={"lr": 1})
    sync(client, "re")
    assert listed(client, "tag=old") == ["re"]
    start_run(metrics_dir, "re", project="p2", tags=["new"], config={"lr": 2})  # a restarted run
    sync(client, "re")
    data = job(client, "re")
    assert (data["project"], data["tags"], data["config"]) == ("p2", ["new"], {"lr": 2})
    assert listed(client, "tag=old") == [] and listed(client, "tag=new") == ["re"]


def test_bad_run_files_are_refused_counted_once_and_the_job_still_works(
    client: TestClient, metrics_dir: Path
) -> None:
    start_run(metrics_dir, "bad", project="kept", config={"lr": 1})
    sync(client, "bad")
    path = metrics_dir / "bad_run.json"
    for content, reason in (
        (b"{not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (json.dumps({"job_id": "other", "project": "x"}).encode(), "names another job"),
        (b'{"config": "' + b"x" * RUN_MAX_BYTES + b'"}', "over 1048576 bytes"),
    ):
        refusals = job(client, "bad")["run"]["file_refusals"]
        path.write_bytes(content)
        sync(client, "bad")
        sync(client, "bad")  # the same version again: not counted twice
        data = job(client, "bad")
        assert data["run"]["file_error"].startswith(reason), data["run"]["file_error"]
        assert data["run"]["file_refusals"] == refusals + 1
        assert (data["project"], data["config"]) == ("kept", {"lr": 1})  # the last good one
        assert data["metrics_count"] == 2
    path.write_text(json.dumps({"project": "fixed"}))
    sync(client, "bad")
    data = job(client, "bad")
    assert (data["project"], data["run"]["file_error"], data["run"]["file_refusals"]) == (
        "fixed", None, 4,
    )  # fmt: skip


def test_non_finite_numbers_and_odd_values_in_a_run_file_are_served_as_json(
    client: TestClient, metrics_dir: Path
) -> None:
    (metrics_dir / "odd_metrics.jsonl").write_bytes(b"")
    (metrics_dir / "odd_run.json").write_text(
        '{"project": 7, "name": "  ", "tags": ["a", 3, "a", "b,c", ""],'
        ' "config": {"lr": NaN, "clip": Infinity, "big": 123456789012345678901234567890,'
        ' "nul": "a\\u0000b", "deep": ' + "[" * 100 + "]" * 100 + "},"
        ' "started_at": "yesterday", "git": {"commit": "abc", "dirty": true}}'
    )
    sync(client, "odd")
    answer = client.get("/api/jobs/odd")
    assert answer.status_code == 200
    data = json.loads(answer.text, parse_constant=lambda token: math.nan)  # strict JSON only
    assert (data["project"], data["name"], data["tags"]) == (None, None, ["a", "b c"])
    config = data["config"]
    assert (config["lr"], config["clip"], config["big"]) == (
        "NaN", "Infinity", "123456789012345678901234567890",
    )  # fmt: skip
    assert "nested deeper" in json.dumps(config["deep"])
    assert data["run"]["started_at"] is None and data["run"]["git"]["dirty"] is True


def test_patch_sets_name_tags_and_notes_on_the_platform_side(
    client: TestClient, metrics_dir: Path
) -> None:
    start_run(metrics_dir, "p", name="from file", tags=["file-tag"])
    sync(client, "p")
    run_file = (metrics_dir / "p_run.json").read_bytes()
    answer = client.patch(
        "/api/jobs/p", json={"name": "baseline", "tags": ["keep", "best", "keep"], "notes": "ok"}
    )
    assert answer.status_code == 200, answer.text
    assert (answer.json()["name"], answer.json()["tags"], answer.json()["notes"]) == (
        "baseline", ["keep", "best"], "ok",
    )  # fmt: skip
    assert listed(client, "tag=best") == ["p"] and listed(client, "tag=file-tag") == []
    assert listed(client, "q=baseline") == ["p"]
    # A field left out is unchanged; the run's own file is never edited.
    assert client.patch("/api/jobs/p", json={"notes": "reward hacking at 4k"}).status_code == 200
    data = job(client, "p")
    assert (data["name"], data["notes"]) == ("baseline", "reward hacking at 4k")
    assert (metrics_dir / "p_run.json").read_bytes() == run_file
    # A new version of the run file does not overwrite what was set here.
    start_run(metrics_dir, "p", name="file again", tags=["file-tag-2"])
    sync(client, "p")
    assert job(client, "p")["name"] == "baseline"
    # null gives name and tags back to the run file, and clears notes.
    answer = client.patch("/api/jobs/p", json={"name": None, "tags": None, "notes": None})
    data = answer.json()
    assert (data["name"], data["tags"], data["notes"]) == ("file again", ["file-tag-2"], None)
    assert listed(client, "tag=file-tag-2") == ["p"] and listed(client, "tag=best") == []
    assert (
        client.patch("/api/jobs/p", json={"tags": []}).json()["tags"] == []
    )  # none, not the file's


def test_bad_patches_are_422_and_unknown_jobs_404(client: TestClient, run1: Path) -> None:
    for body in (
        {"name": ""},
        {"name": "x" * 257},
        {"tags": ["a,b"]},
        {"tags": [""]},
        {"tags": ["t"] * 65},
        {"tags": "grpo"},
        {"notes": "n" * 65_537},
        {"project": "p"},
        {"name": 5},
    ):
        assert client.patch("/api/jobs/run1", json=body).status_code == 422, body
    assert client.patch("/api/jobs/nope", json={"name": "x"}).status_code == 404
    assert client.patch("/api/jobs/run1", json={}).status_code == 200  # nothing to change


def test_deleting_a_job_forgets_its_metadata(client: TestClient, metrics_dir: Path) -> None:
    start_run(metrics_dir, "gone", project="p", tags=["t"])
    sync(client, "gone")
    client.patch("/api/jobs/gone", json={"tags": ["mine"]})
    assert client.delete("/api/jobs/gone").status_code == 204
    assert listed(client, "project=p") == [] and listed(client, "tag=mine") == []
    created = client.post("/api/jobs", json={"job_id": "gone", "metrics_dir": str(metrics_dir)})
    assert created.status_code == 201
    sync(client, "gone")
    data = job(client, "gone")  # read again from its file; what was set by PATCH is gone
    assert (data["project"], data["tags"]) == ("p", ["t"])
