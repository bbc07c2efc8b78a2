"""`/api/jobs/{job_id}/artifacts`: listing, download, and path-traversal refusals."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fixtures_sshd import SSHD

TRACE = b'{"traceEvents": [{"name": "aten::mm", "ph": "X", "ts": 1, "dur": 5}]}'
OP_STATS = b"op_name,self_time_ms,total_time_ms,calls\naten::mm,0.005,0.005,1\n"


def make_profiles(directory: Path, job_id: str) -> Path:
    (directory / f"{job_id}_metrics.jsonl").write_bytes(b'{"step": 0, "timestamp": 1.0}\n')
    root = directory / f"{job_id}_profiles"
    for step in (10, 2):
        (root / f"step_{step}").mkdir(parents=True)
        (root / f"step_{step}" / "trace.json").write_bytes(TRACE)
        (root / f"step_{step}" / "op_stats.csv").write_bytes(OP_STATS)
    (root / "stage_times.json").write_bytes(b'{"rollout": {"count": 3}}')
    return root


def test_profiles_are_listed_by_step_and_downloadable(
    client: TestClient, metrics_dir: Path
) -> None:
    make_profiles(metrics_dir, "run1")

    listing = client.get("/api/jobs/run1/artifacts").json()

    assert listing["root"] == "run1_profiles" and listing["truncated"] is False
    assert [run["name"] for run in listing["profiles"]] == ["step_2", "step_10"]
    assert {f["path"] for f in listing["profiles"][1]["files"]} == {
        "step_10/op_stats.csv",
        "step_10/trace.json",
    }
    assert "stage_times.json" in {f["path"] for f in listing["files"]}
    download = client.get("/api/jobs/run1/artifacts/step_10/trace.json")
    assert download.status_code == 200 and download.content == TRACE
    assert download.headers["content-type"].startswith("application/json")
    assert 'filename="trace.json"' in download.headers["content-disposition"]


def test_a_job_without_profiles_lists_nothing(client: TestClient, metrics_dir: Path) -> None:
    (metrics_dir / "bare_metrics.jsonl").write_bytes(b"")
    listing = client.get("/api/jobs/bare/artifacts").json()
    assert (listing["profiles"], listing["files"]) == ([], [])
    assert client.get("/api/jobs/bare/artifacts/step_1/trace.json").status_code == 404


@pytest.mark.parametrize(
    "path",
    [
        "..%2Frun1_metrics.jsonl",
        "step_10/..%2F..%2Frun1_metrics.jsonl",
        "%2Fetc%2Fpasswd",
        "step_10/%00trace.json",
        "step_10%5C..%5C..%5Csecret.txt",
        ".%2Fstage_times.json",
        "step_10%2F%2Ftrace.json",
    ],
)
def test_paths_leaving_the_profiles_folder_are_refused(
    client: TestClient, metrics_dir: Path, path: str
) -> None:
    make_profiles(metrics_dir, "run1")
    (metrics_dir.parent / "secret.txt").write_text("top secret")

    response = client.get(f"/api/jobs/run1/artifacts/{path}")

    assert 400 <= response.status_code < 500, path
    assert b"top secret" not in response.content and b'"step": 0' not in response.content


def test_symlinks_out_of_the_folder_are_neither_listed_nor_served(
    client: TestClient, metrics_dir: Path
) -> None:
    root = make_profiles(metrics_dir, "run1")
    secret = metrics_dir.parent / "secret.txt"
    secret.write_text("top secret")
    os.symlink(secret, root / "step_10" / "leak.txt")
    os.symlink(metrics_dir.parent, root / "escape")

    listing = client.get("/api/jobs/run1/artifacts").json()

    assert not any("leak" in f["path"] or "escape" in f["path"] for f in listing["files"])
    assert client.get("/api/jobs/run1/artifacts/step_10/leak.txt").status_code == 404
    assert client.get("/api/jobs/run1/artifacts/escape/secret.txt").status_code == 404


def test_unknown_job_is_404(client: TestClient) -> None:
    assert client.get("/api/jobs/ghost/artifacts").status_code == 404


def test_artifacts_of_an_ssh_job_are_listed_and_streamed(
    ssh_client: TestClient, sshd: SSHD
) -> None:
    root = make_profiles(sshd.remote_dir, "remote1")
    big = os.urandom(700_000)  # several chunks
    (root / "step_2" / "big.bin").write_bytes(big)
    os.symlink("/etc/passwd", root / "step_2" / "passwd")
    body = sshd.job_body()
    assert ssh_client.post("/api/jobs", json=body).status_code == 201

    listing = ssh_client.get("/api/jobs/remote1/artifacts").json()

    assert [run["step"] for run in listing["profiles"]] == [2, 10]
    assert "step_2/passwd" not in {f["path"] for f in listing["files"]}
    download = ssh_client.get("/api/jobs/remote1/artifacts/step_2/big.bin")
    assert download.status_code == 200 and download.content == big
    assert ssh_client.get("/api/jobs/remote1/artifacts/step_2/passwd").status_code == 404
    assert ssh_client.get("/api/jobs/remote1/artifacts/step_2/..%2F..%2Fx").status_code == 422
