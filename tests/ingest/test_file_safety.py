"""Symlinks and FIFOs in place of a job's files (issue 12 §4), locally and over SSH.

A trainer (or anyone who can write the metrics directory) may leave a symlink
where the metrics or status file should be, pointing at a file the server can
read and the caller should not; or a FIFO, which blocks whoever opens it. The
readers refuse both, quickly and with a reason that ends up on the job.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fixtures_sshd import SSHD
from training_platform.api.main import create_app
from training_platform.callbacks.wire.lines import encode_record
from training_platform.errors import MetricsSourceError
from training_platform.ingest.readers import LocalMetricsReader
from training_platform.ingest.safe_paths import (
    NotServableError,
    check_path_text,
    open_regular_beneath,
)
from training_platform.ingest.ssh_reader import SSHMetricsReader
from training_platform.settings import Settings

LINE = encode_record({"step": 0, "timestamp": 1.0})


def secret_metrics(tmp_path: Path) -> Path:
    secret = tmp_path / "secret.jsonl"
    secret.write_bytes(encode_record({"step": 7, "timestamp": 1.0, "secret": {"value": 42}}))
    return secret


# --- open_regular_beneath ------------------------------------------------------------


def test_a_regular_file_beneath_is_opened(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "f.txt").write_bytes(b"data")
    fd = open_regular_beneath(tmp_path, "a/b/f.txt")
    try:
        assert os.read(fd, 10) == b"data"
    finally:
        os.close(fd)


@pytest.mark.parametrize("link", ["a", "a/b", "a/b/f.txt"])
def test_a_symlink_at_any_component_is_refused(tmp_path: Path, link: str) -> None:
    outside = tmp_path / "outside"
    (outside / "b").mkdir(parents=True)
    (outside / "f.txt").write_bytes(b"secret")
    (outside / "b" / "f.txt").write_bytes(b"secret")
    base = tmp_path / "base"
    (base / "a" / "b").mkdir(parents=True)
    real = base / link
    if real.is_dir():
        real.rename(tmp_path / "moved")
        real.symlink_to(outside if link == "a" else outside / "b", target_is_directory=True)
    else:
        real.symlink_to(outside / "f.txt")
    with pytest.raises(OSError):
        open_regular_beneath(base, "a/b/f.txt")


def test_a_fifo_is_refused_without_waiting(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    started = time.monotonic()
    with pytest.raises(NotServableError):
        open_regular_beneath(tmp_path, "pipe")
    assert time.monotonic() - started < 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("/tmp/a\x00b", "NUL"),
        ("/tmp/" + "n" * 256, "component of 256 bytes"),
        ("/t" * 2100, "limit is 4095"),
        ("~no_such_user_tp/x", "no home directory"),
        ("/tmp/\ud800", "not valid Unicode"),
    ],
)
def test_impossible_path_text_is_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(ValueError, match=reason):
        check_path_text(text, "metrics_dir")


def test_ordinary_path_text_passes(tmp_path: Path) -> None:
    assert check_path_text(str(tmp_path), "metrics_dir") == str(tmp_path)
    assert check_path_text("~/runs", "metrics_dir") == "~/runs"


# --- local reader --------------------------------------------------------------------


def test_a_symlinked_local_metrics_file_is_refused_unless_allowed(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    directory.mkdir()
    (directory / "leak_metrics.jsonl").symlink_to(secret_metrics(tmp_path))

    with pytest.raises(MetricsSourceError, match=r"symbolic link.*PLATFORM_FOLLOW_SYMLINKS"):
        LocalMetricsReader("leak", directory).read_metrics_incremental(0)
    allowed = LocalMetricsReader("leak", directory, follow_symlinks=True)
    assert [r["step"] for r in allowed.read_metrics_incremental(0).records] == [7]


def test_a_symlinked_local_status_file_is_refused_unless_allowed(tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text('{"status": "running", "current_step": 5}')
    (tmp_path / "job_status.json").symlink_to(secret)

    with pytest.raises(MetricsSourceError, match="symbolic link"):
        LocalMetricsReader("job", tmp_path).read_status()
    assert LocalMetricsReader("job", tmp_path, follow_symlinks=True).read_status() == {
        "status": "running",
        "current_step": 5,
    }


def test_a_symlinked_metrics_file_is_refused_and_said_on_the_job(
    client: TestClient, metrics_dir: Path, tmp_path: Path
) -> None:
    (metrics_dir / "leak_metrics.jsonl").symlink_to(secret_metrics(tmp_path))

    sync = client.post("/api/monitoring/leak/metrics/sync")

    # A refusal by policy is permanent (until the file or the setting changes):
    # a 4xx with the reason, not "unavailable, try again" (issue 23 §4).
    assert sync.status_code == 409
    assert sync.json()["code"] == "source_refused"
    assert "PLATFORM_FOLLOW_SYMLINKS" in sync.json()["detail"]
    job = client.get("/api/jobs/leak").json()
    assert "symbolic link" in job["last_sync_error"]
    assert "PLATFORM_FOLLOW_SYMLINKS" in job["last_sync_error"]
    assert job["metrics_count"] == 0
    assert b"secret" not in client.get("/api/monitoring/leak/metrics").content


def _plant(runs: Path, tmp_path: Path, what: str) -> None:
    """Job `leak`'s files in `runs`, with `what` refused in place of one of them."""
    runs.mkdir()
    metrics = runs / "leak_metrics.jsonl"
    if what == "metrics symlink":
        metrics.symlink_to(secret_metrics(tmp_path))
        return
    if what == "metrics fifo":
        os.mkfifo(metrics)
        return
    metrics.write_bytes(LINE)
    if what == "status symlink":
        secret = tmp_path / "secret.json"
        secret.write_text('{"status": "running", "current_step": 5}')
        (runs / "leak_status.json").symlink_to(secret)
    elif what == "samples symlink":
        (runs / "leak_samples.jsonl").symlink_to(secret_metrics(tmp_path))
    elif what == "rollouts symlink":
        outside = tmp_path / "outside_rollouts"
        outside.mkdir()
        (runs / "leak_rollouts").symlink_to(outside, target_is_directory=True)


@pytest.mark.parametrize(
    ("what", "reason"),
    [
        ("metrics symlink", "symbolic link"),
        ("metrics fifo", "not a regular file"),
        ("status symlink", "symbolic link"),
        ("samples symlink", "symbolic link"),
        ("rollouts symlink", "symbolic link"),
    ],
)
def test_every_refused_file_of_a_job_is_409_with_the_reason_on_sync(
    client: TestClient, tmp_path: Path, what: str, reason: str
) -> None:
    _plant(tmp_path / "runs", tmp_path, what)  # registered: a FIFO is never discovered
    body = {"job_id": "leak", "metrics_dir": str(tmp_path / "runs")}
    assert client.post("/api/jobs", json=body).status_code == 201

    sync = client.post("/api/monitoring/leak/metrics/sync")

    assert (sync.status_code, sync.json()["code"]) == (409, "source_refused"), sync.text
    assert reason in sync.json()["detail"]
    assert reason in client.get("/api/jobs/leak").json()["last_sync_error"]


def test_the_setting_lets_a_symlinked_metrics_file_be_read(
    settings: Settings, metrics_dir: Path, tmp_path: Path
) -> None:
    (metrics_dir / "leak_metrics.jsonl").symlink_to(secret_metrics(tmp_path))
    following = settings.model_copy(update={"follow_symlinks": True})
    with TestClient(create_app(following)) as client:
        assert client.post("/api/monitoring/leak/metrics/sync").json()["new_metrics"] == 1
        assert client.get("/api/jobs/leak").json()["last_sync_error"] is None


@pytest.mark.ssh
def test_a_remote_fifo_metrics_file_is_said_on_the_job_at_once(
    settings: Settings, sshd: SSHD
) -> None:
    os.mkfifo(sshd.remote_dir / "remote1_metrics.jsonl")
    trusting = settings.model_copy(
        update={"ssh_key_dir": sshd.key_dir, "ssh_known_hosts": sshd.known_hosts_path}
    )
    with TestClient(create_app(trusting)) as client:
        assert client.post("/api/jobs", json=sshd.job_body()).status_code == 201
        started = time.monotonic()
        sync = client.post("/api/monitoring/remote1/metrics/sync")
        assert time.monotonic() - started < 3
        assert (sync.status_code, sync.json()["code"]) == (409, "source_refused")
        error = client.get("/api/jobs/remote1").json()["last_sync_error"]
        assert "not a regular file" in error and "unreachable" not in error


@pytest.mark.ssh
def test_a_remote_symlinked_metrics_file_is_409_with_the_reason_on_sync(
    settings: Settings, sshd: SSHD, tmp_path: Path
) -> None:
    (sshd.remote_dir / "remote1_metrics.jsonl").symlink_to(secret_metrics(tmp_path))
    trusting = settings.model_copy(
        update={"ssh_key_dir": sshd.key_dir, "ssh_known_hosts": sshd.known_hosts_path}
    )
    with TestClient(create_app(trusting)) as client:
        assert client.post("/api/jobs", json=sshd.job_body()).status_code == 201
        sync = client.post("/api/monitoring/remote1/metrics/sync")
        assert (sync.status_code, sync.json()["code"]) == (409, "source_refused")
        assert "PLATFORM_FOLLOW_SYMLINKS" in sync.json()["detail"]


# --- SSH reader ----------------------------------------------------------------------


@pytest.mark.ssh
def test_a_remote_fifo_metrics_file_is_an_error_at_once(sshd: SSHD) -> None:
    os.mkfifo(sshd.remote_dir / "job_metrics.jsonl")
    reader = SSHMetricsReader("job", str(sshd.remote_dir), sshd.target(), backoff=0.1)
    try:
        started = time.monotonic()
        with pytest.raises(MetricsSourceError, match="not a regular file"):
            reader.read_metrics_incremental(0)
        assert time.monotonic() - started < 3  # before: timeout x attempts, "unreachable"
        # The connection is still good: nothing is stuck on the remote side.
        (sshd.remote_dir / "job_metrics.jsonl").unlink()
        (sshd.remote_dir / "job_metrics.jsonl").write_bytes(LINE)
        assert len(reader.read_metrics_incremental(0).records) == 1
    finally:
        reader.close()


@pytest.mark.ssh
def test_a_remote_fifo_status_file_is_ignored_at_once(sshd: SSHD) -> None:
    os.mkfifo(sshd.remote_dir / "job_status.json")
    reader = SSHMetricsReader("job", str(sshd.remote_dir), sshd.target(), backoff=0.1)
    try:
        started = time.monotonic()
        assert reader.read_status() is None
        assert time.monotonic() - started < 3
    finally:
        reader.close()


@pytest.mark.ssh
def test_a_remote_symlinked_metrics_file_is_refused_unless_allowed(
    sshd: SSHD, tmp_path: Path
) -> None:
    (sshd.remote_dir / "leak_metrics.jsonl").symlink_to(secret_metrics(tmp_path))
    refused = SSHMetricsReader("leak", str(sshd.remote_dir), sshd.target())
    allowed = SSHMetricsReader("leak", str(sshd.remote_dir), sshd.target(), follow_symlinks=True)
    try:
        with pytest.raises(MetricsSourceError, match="symbolic link"):
            refused.read_metrics_incremental(0)
        assert [r["step"] for r in allowed.read_metrics_incremental(0).records] == [7]
    finally:
        refused.close()
        allowed.close()
