"""`GET /api/jobs/{job_id}/profile/report`: the same report as the CLI, for local and SSH jobs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import paramiko
import pytest
from fastapi.testclient import TestClient

from tests.fixtures_sshd import SSHD
from tests.profile_report.demo_profile import JOB, copy_demo_run
from training_platform.api.routers import profile_report as route
from training_platform.profile_report import LocalProfileSource, build_report

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

COMPARED = ("ok", "problems", "breakdown", "throughput", "memory", "operators", "recommendations")


def test_the_report_of_a_local_job_is_the_clis_report(
    client: TestClient, metrics_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    profiles = copy_demo_run(tmp_path_factory, metrics_dir)

    response = client.get(f"/api/jobs/{JOB}/profile/report")

    assert response.status_code == 200
    report = response.json()
    assert report["ok"] and report["job_id"] == JOB and report["profile"] == f"{JOB}_profiles"
    assert {row["stage"] for row in report["breakdown"]["stages"]} >= {"rollout", "update_actor"}
    assert report["recommendations"]
    local = json.loads(json.dumps(build_report(LocalProfileSource(profiles))))
    for key in COMPARED:
        assert report[key] == local[key], key


def test_a_job_without_a_profile_answers_with_the_problem(
    client: TestClient, metrics_dir: Path
) -> None:
    (metrics_dir / "bare_metrics.jsonl").write_bytes(b"")
    report = client.get("/api/jobs/bare/profile/report").json()
    assert report["ok"] is False
    assert report["problems"] == [
        {"path": "", "problem": "no profile here: the folder is missing or empty"}
    ]
    assert client.get("/api/jobs/ghost/profile/report").status_code == 404


def test_a_huge_trace_is_skipped_not_loaded_and_symlinks_are_not_followed(
    client: TestClient,
    metrics_dir: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profiles = copy_demo_run(tmp_path_factory, metrics_dir)
    trace = profiles / "step_4" / "trace.json"
    monkeypatch.setattr(route, "MAX_TRACE_BYTES", trace.stat().st_size - 1)
    os.symlink("/etc/passwd", profiles / "step_4" / "op_stats_link.csv")

    report = client.get(f"/api/jobs/{JOB}/profile/report").json()

    assert report["traces"][0]["trace"]["read"] is False
    assert any("step_4/trace.json" in note and "skipped" in note for note in report["notes"])
    assert report["operators"]["source"] == ["op_stats.csv"]
    assert "op_stats_link.csv" not in json.dumps(report)  # never listed, never read


def test_the_report_of_an_ssh_job_reads_the_remote_profile(
    ssh_client: TestClient,
    sshd: SSHD,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    profiles = copy_demo_run(tmp_path_factory, sshd.remote_dir)
    assert ssh_client.post("/api/jobs", json=sshd.job_body(JOB)).status_code == 201
    connects: list[str] = []
    connect = paramiko.SSHClient.connect

    def counted(self: paramiko.SSHClient, *args: Any, **kwargs: Any) -> None:
        connects.append(args[0] if args else kwargs.get("hostname", ""))
        connect(self, *args, **kwargs)

    monkeypatch.setattr(paramiko.SSHClient, "connect", counted)

    response = ssh_client.get(f"/api/jobs/{JOB}/profile/report")

    # Every file of the profile through one connection, not one per file.
    assert len([p for p in profiles.rglob("*") if p.is_file()]) >= 3
    assert len(connects) == 1

    assert response.status_code == 200, response.text
    report = response.json()
    assert report["ok"], report["problems"]
    assert report["traces"][0]["scan"]["steps"] == [4, 5]
    assert report["operators"]["top"] and report["recommendations"]
