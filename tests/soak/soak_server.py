"""The soak's server: `training-platform serve` in a subprocess, and its vital signs.

Run as a real process (not uvicorn in a test thread) so that its RSS, its
threads and its open file descriptors can be read from /proc, and SIGTERM
can be sent to it, exactly as in production.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

PAGE_SIZE = 4096


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class Vitals:
    """Samples of the server process, in time order."""

    rss_mb: list[float] = field(default_factory=list)
    threads: list[int] = field(default_factory=list)
    fds: list[int] = field(default_factory=list)


class SoakServer:
    """The server process on a free loopback port, with a metrics dir and a database."""

    def __init__(self, database_url: str, metrics_dir: Path, log_path: Path) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "PLATFORM_METRICS_DIR": str(metrics_dir),
            "PLATFORM_HOST": "127.0.0.1",
            "PLATFORM_PORT": str(self.port),
            "PLATFORM_POLL_INTERVAL": "0.5",
            # Clients that never read are found within seconds, so they churn.
            "PLATFORM_LIVE_SEND_TIMEOUT": "3",
            "PLATFORM_WS_PING_INTERVAL": "3",
            "PLATFORM_WS_PING_TIMEOUT": "3",
        }
        env.pop("PLATFORM_API_TOKEN", None)
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [
                str(Path(sys.executable).parent / "training-platform"),
                "serve",
                "--log-level",
                "warning",
            ],
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited: {self.log_tail()}")
            try:
                if httpx.get(self.base + "/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"the server did not answer within {timeout} s: {self.log_tail()}")

    def sample(self, vitals: Vitals) -> None:
        """One reading of VmRSS, Threads and the fd count from /proc."""
        pid = self.process.pid
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:
            return  # exited: the caller notices
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        vitals.rss_mb.append(int(fields["VmRSS"].split()[0]) / 1024)
        vitals.threads.append(int(fields["Threads"]))
        vitals.fds.append(fds)

    def stop(self, timeout: float = 10.0) -> float:
        """SIGTERM; the seconds it took to exit (kills it and raises past `timeout`)."""
        started = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise RuntimeError(f"SIGTERM did not stop the server in {timeout} s") from None
        finally:
            self._log.close()
        return time.monotonic() - started

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()

    def log_tail(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]


def sampler(server: SoakServer, vitals: Vitals, stop: threading.Event) -> Callable[[], None]:
    def run() -> None:
        while not stop.wait(0.5):
            server.sample(vitals)

    return run
