"""A job's files that the server may not read (issue 23 §5): a clear error, never a 500.

The suite runs as root, which reads a mode-000 file anyway; so the server runs
here in a subprocess as `nobody`, or, where `nobody` cannot run this
checkout's Python (an interpreter under /root), as root without the
capabilities that bypass file permissions (CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH), for which mode 000 means unreadable just the same. A
non-root suite runs it as itself, where chmod 000 is enough.

One job's files are made unreadable one kind at a time (metrics, samples,
run file, status file, a rollout step file, the rollout directory) while its
lines keep coming: each sync of it is an error naming the file (503, as for
any file that cannot be read now, and the reason on the job), the other job
is ingested meanwhile, reads keep working, and once the permissions are fixed
everything lands exactly once. An unreadable profile trace or folder is not
found (as a refused one is), never a 500.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.engine import make_url

from tests.api.test_artifacts_api import TRACE, make_profiles
from tests.api.test_rollout_jobs import dump
from training_platform.callbacks.wire.lines import encode_record
from training_platform.callbacks.wire.records import build_record
from training_platform.callbacks.wire.samples import build_sample

pytestmark = pytest.mark.slow  # a server subprocess per backend

SERVER = Path(sys.executable).parent / "training-platform"


@dataclass(frozen=True)
class Account:
    """Whom the server runs as, and how the child becomes it before its exec."""

    name: str
    uid: int
    gid: int
    preexec: Callable[[], None] | None


def _become(uid: int, gid: int) -> Callable[[], None]:
    def drop() -> None:  # in the child, before exec: groups first, the user last
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)

    return drop


_PR_CAPBSET_DROP = 24
_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH = 1, 2


def _without_file_capabilities() -> Callable[[], None]:
    """A preexec that takes both capabilities out of the bounding set, so that root's
    exec does not get them back. libc is loaded here, in the parent: between fork
    and exec the child must not take locks (a dlopen could wait for ever)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def drop() -> None:
        for capability in (_CAP_DAC_OVERRIDE, _CAP_DAC_READ_SEARCH):
            if prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")

    return drop


def _candidates() -> list[Account]:
    if os.geteuid() != 0:
        return [Account("this user", os.getuid(), os.getgid(), None)]
    found = []
    with contextlib.suppress(KeyError):
        nobody = pwd.getpwnam("nobody")
        found.append(
            Account("nobody", nobody.pw_uid, nobody.pw_gid, _become(nobody.pw_uid, nobody.pw_gid))
        )
    found.append(Account("root without CAP_DAC_*", 0, 0, _without_file_capabilities()))
    return found


def _run_as(account: Account, *args: str) -> str | None:
    """None when `args` ran fine as `account`, else why not."""
    try:
        done = subprocess.run(
            args, preexec_fn=account.preexec, capture_output=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    if done.returncode != 0:
        return done.stderr.decode(errors="replace").strip()[-300:] or f"exit {done.returncode}"
    return None


@pytest.fixture(scope="module")
def account() -> Account:
    """An account that runs this checkout and cannot read a mode-000 file, or a skip
    saying why none could be found."""
    reasons = []
    with tempfile.TemporaryDirectory(prefix="tp-perm-probe-") as probe:
        os.chmod(probe, 0o755)
        locked = Path(probe) / "locked"
        locked.write_bytes(b"x")
        locked.chmod(0)
        for candidate in _candidates():
            why = _run_as(candidate, sys.executable, "-c", "import training_platform.api.main")
            if why is not None:
                reasons.append(f"{candidate.name} cannot run this checkout's Python: {why}")
                continue
            if _run_as(candidate, sys.executable, "-c", f"open({str(locked)!r}).read()") is None:
                reasons.append(f"{candidate.name} reads a mode-000 file")
                continue
            return candidate
    pytest.skip("no account for which a file can be unreadable: " + "; ".join(reasons))


@pytest.fixture
def workspace(account: Account) -> Iterator[Path]:
    """A directory the server's account can reach (pytest's tmp_path is root-only)."""
    root = Path(tempfile.mkdtemp(prefix="tp-perm-"))
    root.chmod(0o755)
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _server_database(database_url: str, workspace: Path, account: Account) -> str:
    """The test's database, reachable by the server's account."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite":
        return database_url  # over TCP: nothing to share on disk
    directory = workspace / "db"
    directory.mkdir()
    assert url.database is not None
    shutil.copyfile(url.database, directory / "platform.db")
    for path in (directory, directory / "platform.db"):
        os.chown(path, account.uid, account.gid)  # SQLite writes its WAL beside the file
    return f"sqlite:///{directory / 'platform.db'}"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def unprivileged_server(
    account: Account, workspace: Path, database_url: str, metrics_dir: Path
) -> Iterator[httpx.Client]:
    port = _free_port()
    env = {
        **os.environ,
        "HOME": str(workspace),
        "DATABASE_URL": _server_database(database_url, workspace, account),
        "PLATFORM_METRICS_DIR": str(metrics_dir),
        "PLATFORM_HOST": "127.0.0.1",
        "PLATFORM_PORT": str(port),
        "PLATFORM_POLL_INTERVAL": "0",  # the test syncs explicitly
    }
    env.pop("PLATFORM_API_TOKEN", None)
    log_path = workspace / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            [str(SERVER), "serve", "--log-level", "warning"],
            env=env,
            cwd=workspace,
            stdout=log,
            stderr=subprocess.STDOUT,
            preexec_fn=account.preexec,
        )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            deadline = time.monotonic() + 30
            while True:
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/healthz").status_code == 200:
                        break
                assert server.poll() is None and time.monotonic() < deadline, (
                    f"server did not start: {log_path.read_text(errors='replace')[-2000:]}"
                )
                time.sleep(0.05)
            yield http
        log_text = log_path.read_text(errors="replace")
        assert "Traceback" not in log_text, log_text[-4000:]
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)


# --- the jobs' files ----------------------------------------------------------------------


class Job:
    """A job's files in `directory`, written as a trainer writes them (by root here)."""

    def __init__(self, directory: Path, job_id: str) -> None:
        self.job_id = job_id
        self.directory = directory
        self.steps = 0
        self.samples = 0
        self.rollout_steps: list[int] = []
        self.path(f"{job_id}_metrics.jsonl").write_bytes(b"")

    def path(self, name: str) -> Path:
        return self.directory / name

    def grow(self, status: str = "running") -> None:
        """One more metrics line, sample, rollout step file; a new run and status file."""
        step = self.steps
        with self.path(f"{self.job_id}_metrics.jsonl").open("ab") as handle:
            handle.write(encode_record(build_record(step, {"loss": 1.0}, timestamp=1.0 + step)))
        with self.path(f"{self.job_id}_samples.jsonl").open("ab") as handle:
            handle.write(encode_record(build_sample(step, 0, f"prompt {step}", "answer")))
        dump(self.path(f"{self.job_id}_rollouts"), 1000 + step, 2)
        self.rollout_steps.append(1000 + step)
        self._rewrite(f"{self.job_id}_run.json", {"job_id": self.job_id, "project": f"p{step}"})
        self._rewrite(
            f"{self.job_id}_status.json",
            {"job_id": self.job_id, "status": status, "current_step": step},
        )
        self.steps += 1
        self.samples += 1

    def _rewrite(self, name: str, content: dict[str, Any]) -> None:
        """In place, keeping the file's mode (a trainer's atomic rename would reset it)."""
        with self.path(name).open("r+" if self.path(name).exists() else "w") as handle:
            handle.write(json.dumps(content))
            handle.truncate()


def stored(http: httpx.Client, job_id: str) -> dict[str, Any]:
    job = http.get(f"/api/jobs/{job_id}")
    assert job.status_code == 200, job.text
    samples = http.get(f"/api/monitoring/{job_id}/samples", params={"limit": 1000})
    assert samples.status_code == 200, samples.text
    steps = [(s["step"], s["index"]) for s in samples.json()["samples"]]
    metrics = http.get(f"/api/monitoring/{job_id}/metrics")
    assert metrics.status_code == 200, metrics.text
    body = job.json()
    return {
        "metrics": [r["step"] for r in metrics.json()["metrics"]],
        "samples": sorted(steps),
        "project": body["project"],
        "current_step": body["current_step"],
        "error": body["last_sync_error"],
    }


def everything(job: Job) -> dict[str, Any]:
    """What the platform should hold once it has read every file of `job`."""
    samples = [(step, 0) for step in range(job.steps)]
    samples += [(step, index) for step in job.rollout_steps for index in range(2)]
    return {
        "metrics": list(range(job.steps)),
        "samples": sorted(samples),
        "project": f"p{job.steps - 1}",
        "current_step": job.steps - 1,
        "error": None,
    }


# What is made unreadable, one at a time, just after the job wrote to it: its
# path relative to the directory, given the step just written.
LOCKED_FILES: list[tuple[str, Callable[[int], str]]] = [
    ("metrics file", lambda _: "locked_metrics.jsonl"),
    ("samples file", lambda _: "locked_samples.jsonl"),
    ("run file", lambda _: "locked_run.json"),
    ("status file", lambda _: "locked_status.json"),
    ("rollout step file", lambda step: f"locked_rollouts/{1000 + step}.jsonl"),
    ("rollout directory", lambda _: "locked_rollouts"),
]


def test_unreadable_files_are_a_clear_error_others_go_on_and_all_recovers(
    account: Account, workspace: Path, database_url: str
) -> None:
    runs = workspace / "runs"
    runs.mkdir()
    runs.chmod(0o755)
    locked, other = Job(runs, "locked"), Job(runs, "other")
    for job in (locked, other):
        job.grow()
    with unprivileged_server(account, workspace, database_url, runs) as http:
        for job in (locked, other):
            assert http.post(f"/api/monitoring/{job.job_id}/metrics/sync").status_code == 200
            assert stored(http, job.job_id) == everything(job)

        for what, name_at in LOCKED_FILES:
            locked.grow()
            other.grow()
            name = name_at(locked.steps - 1)
            path = runs / name
            mode = path.stat().st_mode & 0o777
            path.chmod(0)
            try:
                sync = http.post("/api/monitoring/locked/metrics/sync")
                assert sync.status_code == 503, (what, sync.text)
                assert sync.json()["code"] == "metrics_source_unavailable", (what, sync.text)
                assert "Permission denied" in sync.json()["detail"], (what, sync.text)
                assert name.split("/")[0] in sync.json()["detail"], (what, sync.text)
                now = stored(http, "locked")  # reads go on
                assert "Permission denied" in now["error"], (what, now)
                # The other job is ingested meanwhile, whole.
                assert http.post("/api/monitoring/other/metrics/sync").status_code == 200
                assert stored(http, "other") == everything(other), what
            finally:
                path.chmod(mode)
            # Readable again: everything lands, once.
            sync = http.post("/api/monitoring/locked/metrics/sync")
            assert sync.status_code == 200, (what, sync.text)
            assert stored(http, "locked") == everything(locked), what


def test_an_unreadable_profile_trace_is_not_found_and_reported_not_a_500(
    account: Account, workspace: Path, database_url: str
) -> None:
    runs = workspace / "runs"
    runs.mkdir()
    runs.chmod(0o755)
    root = make_profiles(runs, "prof")
    trace = root / "step_10" / "trace.json"
    trace.chmod(0)
    (root / "step_2").chmod(0)
    with unprivileged_server(account, workspace, database_url, runs) as http:
        download = http.get("/api/jobs/prof/artifacts/step_10/trace.json")
        assert download.status_code == 404, download.text
        assert download.json()["code"] == "artifact_not_found"
        listing = http.get("/api/jobs/prof/artifacts")
        assert listing.status_code == 200, listing.text
        report = http.get("/api/jobs/prof/profile/report")
        assert report.status_code == 200, report.text

        trace.chmod(0o644)
        (root / "step_2").chmod(0o755)
        download = http.get("/api/jobs/prof/artifacts/step_10/trace.json")
        assert download.status_code == 200 and download.content == TRACE
        listed = {f["path"] for f in http.get("/api/jobs/prof/artifacts").json()["files"]}
        assert "step_2/trace.json" in listed
