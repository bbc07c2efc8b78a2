"""`GET /api/jobs/{job_id}/profile/report`: the same report as the CLI, for local and SSH jobs;
cached until a file changes, computed once for concurrent clients, a few at once, and stopped
when its clients go away (issue 23, section 3).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anyio
import paramiko
import pytest
from fastapi.testclient import TestClient
from starlette.types import Message

from tests.fixtures_sshd import SSHD
from tests.profile_report.demo_profile import JOB, copy_demo_run, stage_times
from training_platform.api.main import create_app
from training_platform.api.routers import profile_report as route
from training_platform.profile_report import LocalProfileSource, build_report
from training_platform.profile_report import report as report_module
from training_platform.profile_report.report_cache import ReportCache
from training_platform.settings import Settings

# The demo-run tests read the same files on either database: SQLite is enough there.
sqlite_only = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
WAIT = 10.0  # seconds a condition may take before a test fails (never slept)

COMPARED = ("ok", "problems", "breakdown", "throughput", "memory", "operators", "recommendations")


@sqlite_only
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


@sqlite_only
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


@sqlite_only
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


@sqlite_only
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


def write_profile(metrics_dir: Path, job: str = "synth", steps: int = 2) -> Path:
    """A small profile of `steps` traces next to an (empty) metrics file: the job is known."""
    profiles = metrics_dir / f"{job}_profiles"
    names = [f"step_{step}" for step in range(1, steps + 1)]
    for step, name in enumerate(names, start=1):
        (profiles / name).mkdir(parents=True)
        events = [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1,
             "tid": 1, "ts": 0, "dur": 100},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1,
             "dur": 50},
        ]  # fmt: skip
        (profiles / name / "trace.json").write_text(json.dumps({"traceEvents": events}))
        (profiles / name / "op_stats.csv").write_text(
            "op_name,self_time_ms,total_time_ms,calls\naten::mm,0.05,0.05,1\n"
        )
    (profiles / "stage_times.json").write_text(json.dumps(stage_times(traces=names)))
    (metrics_dir / f"{job}_metrics.jsonl").write_bytes(b"")
    return profiles


def counting(monkeypatch: pytest.MonkeyPatch, hold: Callable[[], None] | None = None) -> list[int]:
    """Count the reports built (and the traces scanned, in the second list item)."""
    counts = [0, 0]
    build, scan = route.build_report, report_module.scan_trace

    def built(*args: Any, **kwargs: Any) -> dict[str, Any]:
        counts[0] += 1
        if hold is not None:
            hold()
        return build(*args, **kwargs)

    def scanned(*args: Any, **kwargs: Any) -> Any:
        counts[1] += 1
        return scan(*args, **kwargs)

    monkeypatch.setattr(route, "build_report", built)
    monkeypatch.setattr(report_module, "scan_trace", scanned)
    return counts


def reports_of(client: TestClient) -> ReportCache[bytes]:
    cache: ReportCache[bytes] = client.app.state.profile_reports  # type: ignore[attr-defined]
    return cache


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.002)


def test_a_second_request_is_answered_from_the_cache(
    client: TestClient, metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(metrics_dir)
    counts = counting(monkeypatch)

    first = client.get("/api/jobs/synth/profile/report")
    second = client.get("/api/jobs/synth/profile/report")

    assert first.status_code == second.status_code == 200
    assert first.json()["ok"], first.json()["problems"]
    assert second.content == first.content  # generated_at included: the same report
    assert counts == [1, 2]  # one report, its two traces scanned once


def test_a_changed_file_makes_a_new_report_reading_only_what_changed(
    client: TestClient, metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles = write_profile(metrics_dir)
    counts = counting(monkeypatch)
    first = client.get("/api/jobs/synth/profile/report").json()

    # The profiler rewrites stage_times.json every 30 s: a new report, no trace read again.
    (profiles / "stage_times.json").write_text(json.dumps(stage_times(traces=[], steps=200)))
    second = client.get("/api/jobs/synth/profile/report").json()
    assert counts == [2, 2] and second["generated_at"] > first["generated_at"]
    assert second["traces"] == first["traces"]

    # A trace rewritten (same size, a new mtime): read again, alone.
    trace = profiles / "step_2" / "trace.json"
    os.utime(trace, (time.time() + 5, time.time() + 5))
    client.get("/api/jobs/synth/profile/report")
    assert counts == [3, 3]

    # A new step's profile: one more trace read.
    (profiles / "step_3").mkdir()
    (profiles / "step_3" / "trace.json").write_bytes(trace.read_bytes())
    third = client.get("/api/jobs/synth/profile/report").json()
    assert counts == [4, 4] and [t["name"] for t in third["traces"]] == [
        "step_1", "step_2", "step_3"
    ]  # fmt: skip


def test_concurrent_requests_share_one_computation(
    client: TestClient, metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(metrics_dir)
    # The first computation holds until all three requests wait on it.
    counts = counting(monkeypatch, hold=lambda: wait_until(lambda: reports_of(client).waiting == 3))

    with ThreadPoolExecutor(3) as pool:
        answers = list(pool.map(lambda _: client.get("/api/jobs/synth/profile/report"), range(3)))

    assert [answer.status_code for answer in answers] == [200] * 3
    assert len({answer.content for answer in answers}) == 1
    assert counts == [1, 2]


def test_reports_are_computed_at_most_n_at_once(
    settings: Settings, metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for job in ("one", "two", "three"):
        write_profile(metrics_dir, job)
    active = [0, 0]  # now, most
    lock = threading.Lock()

    with TestClient(
        create_app(settings.model_copy(update={"profile_reports_at_once": 1}))
    ) as client:

        def hold() -> None:
            with lock:
                active[0] += 1
                active[1] = max(active)
            # The first holds until the other two wait for their turn.
            wait_until(lambda: reports_of(client).waiting == 3 or active[1] > 1 or counts[0] > 1)
            with lock:
                active[0] -= 1

        counts = counting(monkeypatch, hold=hold)
        with ThreadPoolExecutor(3) as pool:
            answers = list(
                pool.map(
                    lambda job: client.get(f"/api/jobs/{job}/profile/report"),
                    ("one", "two", "three"),
                )
            )

    assert [answer.status_code for answer in answers] == [200] * 3
    assert [answer.json()["traces"][0]["name"] for answer in answers] == ["step_1"] * 3
    assert counts[0] == 3 and active[1] == 1


def test_a_client_that_goes_away_stops_its_report(
    client: TestClient, metrics_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_profile(metrics_dir)
    started, stopped = threading.Event(), threading.Event()

    def build(*args: Any, should_stop: Callable[[], bool], **kwargs: Any) -> dict[str, Any]:
        started.set()
        deadline = time.monotonic() + WAIT
        while not should_stop():  # as the scan asks between chunks
            assert time.monotonic() < deadline, "never told to stop"
            time.sleep(0.002)
        stopped.set()
        raise report_module.ScanCancelled("stopped")

    monkeypatch.setattr(route, "build_report", build)
    gone = threading.Event()
    sent: list[Message] = []

    async def request() -> None:
        received = False

        async def receive() -> Message:
            nonlocal received
            if not received:
                received = True
                return {"type": "http.request", "body": b"", "more_body": False}
            if not gone.is_set():
                # `is_disconnected()` asks with its scope already cancelled: "not yet".
                await anyio.sleep_forever()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
            "scheme": "http", "path": "/api/jobs/synth/profile/report",
            "raw_path": b"/api/jobs/synth/profile/report", "root_path": "", "query_string": b"",
            "headers": [(b"host", b"testserver")], "client": ("127.0.0.1", 50000),
            "server": ("testserver", 80),
        }  # fmt: skip
        await client.app(scope, receive, send)

    assert client.portal is not None
    answered = client.portal.start_task_soon(request)
    assert started.wait(WAIT)
    gone.set()  # the client disconnects while its report is computed
    assert stopped.wait(WAIT)
    answered.result(WAIT)
    assert sent[0]["status"] == route.CLIENT_CLOSED_REQUEST
    wait_until(lambda: reports_of(client).running == 0)


def test_an_ssh_jobs_report_is_cached_until_a_remote_file_changes(
    ssh_client: TestClient, sshd: SSHD, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles = write_profile(sshd.remote_dir)
    assert ssh_client.post("/api/jobs", json=sshd.job_body("synth")).status_code == 201
    counts = counting(monkeypatch)

    first = ssh_client.get("/api/jobs/synth/profile/report")
    again = ssh_client.get("/api/jobs/synth/profile/report")
    assert first.status_code == again.status_code == 200 and first.json()["ok"]
    assert again.content == first.content and counts == [1, 2]

    with (profiles / "step_1" / "op_stats.csv").open("a") as table:
        table.write("aten::add,0.01,0.01,1\n")  # a new size: the listing over SFTP sees it
    changed = ssh_client.get("/api/jobs/synth/profile/report").json()
    assert counts == [2, 2]  # a new report; the traces, unchanged, from memory
    assert changed["generated_at"] > first.json()["generated_at"]
