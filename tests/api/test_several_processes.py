"""Three server processes on one PostgreSQL database and one metrics directory
(DESIGN.md §9): every live client, whichever process it is connected to,
receives every step exactly once and in order, whichever process ingested it;
and still does after the process that was ingesting is killed with SIGKILL.

Real processes (`training-platform serve`), each polling the directory, so
all three race to ingest every append; real WebSocket clients.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection

from tests.api.live_support import append_steps, metric_steps, open_ws, receive_until, wait_for
from training_platform.settings import Settings

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)

LIVE = "/api/monitoring/run1/live"
PROCESSES = 3


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


class Server:
    def __init__(
        self, settings: Settings, metrics_dir: Path, log: Path, *, lease_seconds: float = 2.0
    ) -> None:
        self.port = free_port()
        self.log = log
        env = {
            **os.environ,
            "DATABASE_URL": settings.database_url,
            "PLATFORM_METRICS_DIR": str(metrics_dir),
            "PLATFORM_HOST": "127.0.0.1",
            "PLATFORM_PORT": str(self.port),
            "PLATFORM_POLL_INTERVAL": "0.2",
            "PLATFORM_LEASE_SECONDS": str(lease_seconds),
        }
        env.pop("PLATFORM_API_TOKEN", None)
        self.process = subprocess.Popen(
            [str(Path(sys.executable).parent / "training-platform"), "serve", "--log-level",
             "warning"],
            env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
        )  # fmt: skip

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ws(self, path: str) -> str:
        return f"ws://127.0.0.1:{self.port}{path}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def servers(settings: Settings, metrics_dir: Path, tmp_path: Path) -> Iterator[list[Server]]:
    started = [Server(settings, metrics_dir, tmp_path / f"server{i}.log") for i in range(3)]
    try:
        for server in started:
            assert wait_for(lambda s=server: answers(s.base + "/healthz"), timeout=60), (
                server.log.read_text(errors="replace")[-2000:]
            )
        yield started
    finally:
        for server in started:
            server.stop()


def steps_until(ws: ClientConnection, last: int, timeout: float = 60.0) -> list[int]:
    """The metric steps a client receives until it has seen `last` (or the time is up)."""
    messages: list[dict[str, Any]] = receive_until(
        ws, lambda got: last in metric_steps(got), timeout=timeout
    )
    return metric_steps(messages)


def append_slowly(path: Path, steps: range) -> None:
    """Ten steps every 50 ms: appends land between the processes' rounds."""
    for start in range(steps.start, steps.stop, 10):
        append_steps(path, range(start, min(start + 10, steps.stop)))
        time.sleep(0.05)


def test_every_client_of_every_process_gets_every_step_once_in_order_through_a_kill(
    servers: list[Server], metrics_dir: Path
) -> None:
    run1 = metrics_dir / "run1_metrics.jsonl"
    run1.write_bytes(b"")
    assert httpx.post(servers[0].base + "/api/monitoring/run1/metrics/sync", timeout=30).is_success
    with ExitStack() as stack:
        clients = [stack.enter_context(open_ws(server.ws(LIVE))) for server in servers]
        for ws in clients:  # subscribed once the first (status) message arrives
            receive_until(ws, lambda got: bool(got), timeout=20)

        append_slowly(run1, range(0, 300))
        for index, ws in enumerate(clients):
            assert steps_until(ws, 299) == list(range(300)), f"client of process {index}"

        # Kill the process that ingested the last batch... any of them, without
        # a chance to clean up: the others go on, and so do their clients.
        servers[0].process.kill()
        servers[0].process.wait(timeout=10)
        append_slowly(run1, range(300, 400))
        for index, ws in list(enumerate(clients))[1:]:
            assert steps_until(ws, 399) == list(range(300, 400)), f"client of process {index}"

    # Stored exactly once whatever raced.
    history = httpx.get(
        servers[1].base + "/api/monitoring/run1/metrics", params={"limit": 1000}, timeout=30
    ).json()
    assert [record["step"] for record in history["metrics"]] == list(range(400))
