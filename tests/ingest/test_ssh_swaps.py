"""Symlinks and swaps in place of the newer files of an SSH job (issue 23 §5).

The metrics and status files and the profiles folder were checked over SSH
before (tests/ingest/test_file_safety.py, tests/api/test_artifact_safety.py).
These are the files added since: the run file, the samples file, verl's
rollout step files, and the profile report, which reads the profiles folder
through the artifact reader. A trainer (or anyone who can write the job's
remote directory) may leave a symlink to a file the SSH user can read, or swap
one in and out while the platform reads: nothing of the outside may be stored
or served, and no request may answer 500.

A symlink left in place was already refused. A swapped one was not: SFTP's
open follows links, and each of the four swap races below read the outside
file within its first second, until `ingest/sftp_open.py` compared what was
opened with what the path was around the open.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.api.test_artifact_safety import swapping
from tests.api.test_artifacts_api import TRACE, make_profiles
from tests.fixtures_sshd import SSHD
from training_platform.api.main import create_app
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.samples import build_sample
from training_platform.errors import MetricsSourceError
from training_platform.ingest.artifacts import open_artifact
from training_platform.ingest.rollout_files import SSHRolloutSource
from training_platform.ingest.run_file import RUN_MAX_BYTES, RUN_SUFFIX
from training_platform.ingest.samples_file import SAMPLES
from training_platform.ingest.ssh_reader import SSHMetricsReader
from training_platform.settings import Settings

pytestmark = pytest.mark.ssh

SECRET = "TOP-SECRET-outside-the-job"
SWAP_SECONDS = 1.0  # each swap race: long enough for every outcome, many times over
RACE_CAP = 20.0  # ... and never longer than this, whatever the load


def sample_line(step: int, prompt: str) -> bytes:
    return encode_record(build_sample(step, 0, prompt, "an answer", reward=1.0))


def write_secrets(outside: Path) -> Path:
    """Files the SSH user can read that are no part of the job, each naming SECRET."""
    outside.mkdir()
    (outside / "samples.jsonl").write_bytes(sample_line(9, SECRET) * 3)
    (outside / "run.json").write_text(json.dumps({"project": SECRET, "config": {"k": SECRET}}))
    (outside / "rollout.jsonl").write_text(
        json.dumps({"input": SECRET, "output": SECRET, "score": 1.0, "step": 5}) + "\n"
    )
    (outside / "trace.json").write_text(json.dumps({"traceEvents": [], "secret": SECRET}))
    return outside


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    return write_secrets(tmp_path / "outside")


@pytest.fixture
def ssh_client(settings: Settings, sshd: SSHD) -> Iterator[TestClient]:
    trusting = settings.model_copy(
        update={"ssh_key_dir": sshd.key_dir, "ssh_known_hosts": sshd.known_hosts_path}
    )
    with TestClient(create_app(trusting)) as client:
        yield client


@pytest.fixture
def reader(sshd: SSHD) -> Iterator[SSHMetricsReader]:
    remote = SSHMetricsReader("remote1", str(sshd.remote_dir), sshd.target(), backoff=0.1)
    yield remote
    remote.close()


# --- a symlink left in place ------------------------------------------------------------


def test_a_symlinked_remote_samples_file_is_refused_and_said_on_the_job(
    ssh_client: TestClient, sshd: SSHD, outside: Path
) -> None:
    (sshd.remote_dir / "remote1_metrics.jsonl").write_bytes(b'{"step": 0, "timestamp": 1.0}\n')
    (sshd.remote_dir / "remote1_samples.jsonl").symlink_to(outside / "samples.jsonl")
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    sync = ssh_client.post("/api/monitoring/remote1/metrics/sync")

    # A refusal by policy: 409 with the reason (issue 23 §4), as for the metrics file.
    assert sync.status_code == 409, sync.text
    assert "symbolic link" in sync.json()["detail"]
    job = ssh_client.get("/api/jobs/remote1").json()
    assert "symbolic link" in job["last_sync_error"] and job["metrics_count"] == 1
    samples = ssh_client.get("/api/monitoring/remote1/samples")
    assert samples.status_code == 200 and SECRET not in samples.text

    # Replaced by a regular file: read at the next sync, and the error is gone.
    (sshd.remote_dir / "remote1_samples.jsonl").unlink()
    (sshd.remote_dir / "remote1_samples.jsonl").write_bytes(sample_line(0, "a prompt"))
    assert ssh_client.post("/api/monitoring/remote1/metrics/sync").status_code == 200
    assert ssh_client.get("/api/jobs/remote1").json()["last_sync_error"] is None
    (sample,) = ssh_client.get("/api/monitoring/remote1/samples").json()["samples"]
    assert sample["prompt"] == "a prompt"


def test_a_symlinked_remote_run_file_is_refused_and_said_on_the_job(
    ssh_client: TestClient, sshd: SSHD, outside: Path
) -> None:
    (sshd.remote_dir / "remote1_metrics.jsonl").write_bytes(b'{"step": 0, "timestamp": 1.0}\n')
    (sshd.remote_dir / "remote1_run.json").symlink_to(outside / "run.json")
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    sync = ssh_client.post("/api/monitoring/remote1/metrics/sync")

    assert sync.status_code == 409 and "symbolic link" in sync.json()["detail"]
    job = ssh_client.get("/api/jobs/remote1")
    assert job.status_code == 200 and SECRET not in job.text
    assert "symbolic link" in job.json()["last_sync_error"]
    assert SECRET not in ssh_client.get("/api/compare/config?jobs=remote1").text


def test_a_symlinked_trace_is_left_out_of_an_ssh_jobs_profile_report(
    ssh_client: TestClient, sshd: SSHD, outside: Path
) -> None:
    root = make_profiles(sshd.remote_dir, "remote1")
    (root / "step_10" / "trace.json").unlink()
    (root / "step_10" / "trace.json").symlink_to(outside / "trace.json")
    os.symlink(outside, root / "step_20")  # a whole profile folder out of the job
    assert ssh_client.post("/api/jobs", json=sshd.job_body()).status_code == 201

    report = ssh_client.get("/api/jobs/remote1/profile/report")

    assert report.status_code == 200, report.text
    assert SECRET not in report.text
    assert "step_20" not in report.text


# --- a symlink swapped in and out while the platform reads --------------------------------


def refusal(exc: MetricsSourceError) -> str:
    """How a reader said no: a symlink seen, or a file that changed around the open."""
    if "symbolic link" in str(exc):
        return "refused"
    return "swapped" if "different file" in str(exc) else f"error: {exc}"


def race(
    attempt: Callable[[], str], wanted: tuple[str, str], seconds: float = SWAP_SECONDS
) -> dict[str, int]:
    """Run `attempt` over and over and count its outcomes: for `seconds`, and on
    until both `wanted` outcomes were seen (the swapper is a fresh interpreter,
    which a loaded machine may start late), at most RACE_CAP seconds or 20,000 times."""
    outcomes: dict[str, int] = {}
    start = time.monotonic()
    for _ in range(20_000):
        elapsed = time.monotonic() - start
        if elapsed > RACE_CAP or (elapsed > seconds and all(map(outcomes.get, wanted))):
            break
        outcome = attempt()
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def test_a_samples_file_swapped_for_a_symlink_never_yields_the_outside(
    reader: SSHMetricsReader, sshd: SSHD, outside: Path
) -> None:
    target = sshd.remote_dir / "remote1_samples.jsonl"
    target.write_bytes(sample_line(0, "a prompt") + sample_line(1, "another prompt"))

    def read() -> str:
        try:
            batch = reader.read_incremental(SAMPLES, 0)
        except MetricsSourceError as exc:
            return refusal(exc)
        assert SECRET not in repr(batch.records), "read a file outside the job"
        assert [sample["step"] for sample in batch.records] in ([0, 1], [])
        return "read"

    with swapping(target, "symlink", outside / "samples.jsonl"):
        outcomes = race(read, ("read", "refused"))

    assert set(outcomes) <= {"read", "refused", "swapped"}, outcomes
    assert outcomes.get("read") and outcomes.get("refused"), outcomes


def test_a_run_file_swapped_for_a_symlink_never_yields_the_outside(
    reader: SSHMetricsReader, sshd: SSHD, outside: Path
) -> None:
    target = sshd.remote_dir / f"remote1{RUN_SUFFIX}"
    target.write_text(json.dumps({"job_id": "remote1", "project": "mine"}))

    def read() -> str:
        try:
            data = reader.read_small_file(RUN_SUFFIX, RUN_MAX_BYTES + 1)
        except MetricsSourceError as exc:
            return refusal(exc)
        assert data is None or SECRET.encode() not in data, "read a file outside the job"
        assert data is not None
        return "read"

    with swapping(target, "symlink", outside / "run.json"):
        outcomes = race(read, ("read", "refused"))

    assert set(outcomes) <= {"read", "refused", "swapped"}, outcomes
    assert outcomes.get("read") and outcomes.get("refused"), outcomes


def test_a_rollout_step_file_swapped_for_a_symlink_never_yields_the_outside(
    reader: SSHMetricsReader, sshd: SSHD, outside: Path
) -> None:
    rollouts = sshd.remote_dir / "verl_rollouts"
    rollouts.mkdir()
    target = rollouts / "5.jsonl"
    target.write_text(json.dumps({"input": "q", "output": "a", "score": 0.0, "step": 5}) + "\n")
    source = SSHRolloutSource(reader.connection, str(rollouts), follow_symlinks=False)
    (entry,) = source.list()

    def read() -> str:
        found = source.read(entry, 1 << 20)
        assert SECRET.encode() not in found.data, "read a file outside the job"
        return found.outcome

    with swapping(target, "symlink", outside / "rollout.jsonl"):
        outcomes = race(read, ("ok", "refused"))

    assert set(outcomes) <= {"ok", "refused", "changing"}, outcomes
    assert outcomes.get("ok") and outcomes.get("refused"), outcomes


def test_a_trace_swapped_for_a_symlink_is_never_served_over_ssh(
    reader: SSHMetricsReader, sshd: SSHD, outside: Path
) -> None:
    root = make_profiles(sshd.remote_dir, "remote1")
    target = root / "step_10" / "trace.json"

    def read() -> str:
        try:
            stream = open_artifact(reader, "step_10/trace.json", keep_reader=True)
        except Exception as exc:  # the outcome is what is counted
            return type(exc).__name__
        data = b"".join(stream)
        assert SECRET.encode() not in data, "served a file outside the job"
        return "served" if data == TRACE else "short"

    with swapping(target, "symlink", outside / "trace.json"):
        outcomes = race(read, ("served", "ArtifactNotFoundError"))

    assert set(outcomes) <= {"served", "ArtifactNotFoundError"}, outcomes
    assert outcomes.get("served") and outcomes.get("ArtifactNotFoundError"), outcomes
