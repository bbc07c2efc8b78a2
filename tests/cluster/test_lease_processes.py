"""Leases between real server processes on one PostgreSQL database (DESIGN.md §9):
one ingester per job, shown by `GET /api/instances`; a holder paused past its
lease is taken over and cannot write when it resumes; a killed one's jobs move
at once; a second server on one SQLite file is refused.

Leases of 2 s (the minimum is 1): a round every 0.67 s.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy.orm import Session, sessionmaker

from tests.api.live_support import append_steps, open_ws, receive_until, wait_for
from tests.api.test_several_processes import Server, answers, free_port, steps_until
from training_platform.settings import Settings
from training_platform.store.models import SyncState

LEASE = 2.0
ROUND = LEASE / 3
LIVE = "/api/monitoring/run1/live"
ON_POSTGRESQL = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def start(settings: Settings, metrics_dir: Path, tmp_path: Path, count: int) -> list[Server]:
    servers = [
        Server(settings, metrics_dir, tmp_path / f"server{i}.log", lease_seconds=LEASE)
        for i in range(count)
    ]
    for server in servers:
        assert wait_for(lambda s=server: answers(s.base + "/healthz"), timeout=60), (
            server.log.read_text(errors="replace")[-2000:]
        )
    return servers


@pytest.fixture
def two(settings: Settings, metrics_dir: Path, tmp_path: Path) -> Iterator[list[Server]]:
    servers = start(settings, metrics_dir, tmp_path, 2)
    try:
        yield servers
    finally:
        for server in servers:
            if server.process.poll() is None:
                server.process.send_signal(signal.SIGCONT)  # a paused one must hear SIGTERM
            server.stop()


def instances(server: Server) -> dict[str, Any]:
    answer = httpx.get(server.base + "/api/instances", timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def holder_of(server: Server, job_id: str) -> str | None:
    for instance in instances(server)["instances"]:
        if instance["alive"] and any(job["job_id"] == job_id for job in instance["jobs"]):
            return str(instance["instance_id"])
    return None


def metric(server: Server, name: str, labels: str = "") -> float:
    text = httpx.get(server.base + "/metrics", timeout=10).text
    match = re.search(rf"^training_platform_{name}{re.escape(labels)} (\S+)$", text, re.M)
    return float(match.group(1)) if match else 0.0


def held_by(instance: dict[str, Any]) -> set[str]:
    return {job["job_id"] for job in instance["jobs"]}


def records_ingested(factory: sessionmaker[Session], job_id: str) -> int:
    with factory() as session:
        state = session.get(SyncState, (job_id, "metrics"))
        return state.records_ingested if state is not None else 0


@ON_POSTGRESQL
def test_each_job_has_one_ingesting_process_and_instances_say_which(
    settings: Settings, metrics_dir: Path, tmp_path: Path
) -> None:
    for index in range(6):
        append_steps(metrics_dir / f"job{index}_metrics.jsonl", range(0, 3))
    servers = start(settings, metrics_dir, tmp_path, 3)
    try:

        def fair() -> bool:
            view = instances(servers[0])
            alive = [i for i in view["instances"] if i["alive"]]
            return (
                len(alive) == 3
                and not view["unassigned"]
                and sorted(len(i["jobs"]) for i in alive) == [2, 2, 2]
            )

        assert wait_for(fair, timeout=30), instances(servers[0])
        view = instances(servers[1])
        assert view["leases"] is True and view["lease_seconds"] == LEASE
        by_pid = {i["pid"]: i for i in view["instances"]}
        assert set(by_pid) == {server.process.pid for server in servers}
        assert {instances(s)["self"] for s in servers} == {
            i["instance_id"] for i in by_pid.values()
        }

        # Every job's new lines are ingested by its holder alone (before the shares
        # settled, the first process to start ingested everyone's first lines).
        def ingested(server: Server, job: str) -> float:
            return metric(server, "ingest_records_total", f'{{job_id="{job}",kind="metrics"}}')

        jobs = [f"job{index}" for index in range(6)]
        before = {(s.process.pid, job): ingested(s, job) for s in servers for job in jobs}
        for job in jobs:
            append_steps(metrics_dir / f"{job}_metrics.jsonl", range(3, 6))
        for job in jobs:
            holder = next(s for s in servers if job in held_by(by_pid[s.process.pid]))
            assert wait_for(lambda h=holder, j=job: ingested(h, j) - before[h.process.pid, j] == 3)
        for server in servers:
            for job in set(jobs) - held_by(by_pid[server.process.pid]):
                assert ingested(server, job) == before[server.process.pid, job], (server, job)
            assert metric(server, "leases_held") == 2
    finally:
        for server in servers:
            server.stop()


@ON_POSTGRESQL
def test_a_paused_holder_is_taken_over_and_cannot_write_when_it_resumes(
    two: list[Server], metrics_dir: Path, session_factory: sessionmaker[Session]
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    append_steps(run1, range(0, 10))
    assert httpx.post(two[0].base + "/api/monitoring/run1/metrics/sync", timeout=30).is_success
    assert wait_for(lambda: holder_of(two[1], "run1") is not None, timeout=20)
    pids = {i["instance_id"]: i["pid"] for i in instances(two[1])["instances"]}
    holder = next(s for s in two if s.process.pid == pids[holder_of(two[1], "run1")])
    other = next(s for s in two if s is not holder)

    with ExitStack() as stack:
        clients = [stack.enter_context(open_ws(server.ws(LIVE))) for server in two]
        for ws in clients:  # subscribed once the first (status) message arrives
            receive_until(ws, lambda got: bool(got), timeout=20)
        holder.process.send_signal(signal.SIGSTOP)
        paused_at = time.monotonic()
        assert wait_for(lambda: holder_of(other, "run1") == instances(other)["self"], timeout=30)
        takeover = time.monotonic() - paused_at
        assert takeover <= LEASE + ROUND + 3.0, f"took {takeover:.1f} s"  # loaded-machine slack

        append_steps(run1, range(10, 40))  # the new holder ingests these
        assert steps_until(clients[two.index(other)], 39) == list(range(10, 40))
        holder.process.send_signal(signal.SIGCONT)  # its file events and its round fire now
        assert wait_for(lambda: metric(holder, "lease_changes_total", '{change="lost"}') >= 1)
        append_steps(run1, range(40, 60))
        assert steps_until(clients[two.index(other)], 59) == list(range(40, 60))
        # The paused process's client missed nothing while it slept, and got nothing twice.
        assert steps_until(clients[two.index(holder)], 59) == list(range(10, 60))

    assert records_ingested(session_factory, "run1") == 60  # each line once, whoever wrote
    history = httpx.get(other.base + "/api/monitoring/run1/metrics", params={"limit": 100}).json()
    assert [record["step"] for record in history["metrics"]] == list(range(60))


@ON_POSTGRESQL
def test_a_killed_holders_jobs_move_within_a_round(two: list[Server], metrics_dir: Path) -> None:
    append_steps(metrics_dir / "run1_metrics.jsonl", range(0, 5))
    assert wait_for(lambda: holder_of(two[1], "run1") is not None, timeout=20)
    pids = {i["instance_id"]: i["pid"] for i in instances(two[1])["instances"]}
    holder = next(s for s in two if s.process.pid == pids[holder_of(two[1], "run1")])
    other = next(s for s in two if s is not holder)
    holder.process.kill()
    holder.process.wait(timeout=10)
    killed_at = time.monotonic()
    # Same host: its pid is gone, so no need to wait for the lease to expire.
    assert wait_for(lambda: holder_of(other, "run1") == instances(other)["self"], timeout=20)
    assert time.monotonic() - killed_at <= ROUND + 3.0


def test_a_second_server_on_one_sqlite_file_is_refused(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'one.db'}"
    env = {**os.environ, "DATABASE_URL": database, "PLATFORM_METRICS_DIR": str(tmp_path)}
    command = [str(Path(sys.executable).parent / "training-platform"), "serve"]

    def serve(port: int) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [*command, "--port", str(port), "--log-level", "warning"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )  # fmt: skip

    first_port = free_port()
    first = serve(first_port)
    try:
        assert wait_for(lambda: answers(f"http://127.0.0.1:{first_port}/healthz"), timeout=60)
        second = serve(free_port())
        output, _ = second.communicate(timeout=60)
        assert second.returncode == 1
        assert f"pid {first.pid}" in output.decode() and "SQLite keeps one" in output.decode()
        first.kill()  # however it dies, the lock goes with it
        first.wait(timeout=10)
        third_port = free_port()
        third = serve(third_port)
        try:
            assert wait_for(lambda: answers(f"http://127.0.0.1:{third_port}/healthz"), timeout=60)
        finally:
            third.terminate()
            third.wait(timeout=20)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(timeout=10)
