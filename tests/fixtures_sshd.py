"""pytest fixtures for tests that need a real OpenSSH server (see `tests.sshd_server`).

Enabled with ``pytest_plugins = ["tests.fixtures_sshd"]`` in ``tests/conftest.py``.
Without ``/usr/sbin/sshd`` the tests that use them are skipped, with the reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.sshd_server import SSHServer, sshd_unavailable_reason
from training_platform.ingest.ssh import SSHTarget


@dataclass
class SSHD:
    """One test's view of the session's sshd, with a fresh remote directory."""

    server: SSHServer
    remote_dir: Path  # on this machine, which is also "the remote host"

    @property
    def host(self) -> str:
        return self.server.host

    @property
    def port(self) -> int:
        return self.server.port

    @property
    def username(self) -> str:
        return self.server.username

    @property
    def key_path(self) -> Path:
        return self.server.client_key_path

    @property
    def key_dir(self) -> Path:
        return self.server.client_key_dir

    @property
    def known_hosts_path(self) -> Path:
        return self.server.known_hosts_path

    def target(self, **overrides: Any) -> SSHTarget:
        """An `SSHTarget` that trusts this server; short timeout so failures are quick."""
        fields: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "key_path": self.key_path,
            "known_hosts_files": (self.known_hosts_path,),
            "timeout": 5.0,
        }
        fields.update(overrides)
        return SSHTarget(**fields)

    def job_body(self, job_id: str = "remote1", **overrides: Any) -> dict[str, Any]:
        """A `POST /api/jobs` body registering `job_id` on this server's remote directory."""
        ssh: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "username": self.username,
            "key_path": str(self.key_path),
            "remote_dir": str(self.remote_dir),
        }
        ssh.update(overrides)
        return {"job_id": job_id, "ssh": ssh}

    def stop(self) -> None:
        self.server.stop()

    def start(self) -> None:
        self.server.start()

    def restart(self) -> None:
        self.server.restart()

    def drop_sessions(self) -> None:
        self.server.drop_sessions()

    def freeze_sessions(self) -> None:
        self.server.freeze_sessions()


@pytest.fixture(scope="session")
def sshd_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    """One sshd for the whole session (started lazily, by the first test that needs it)."""
    reason = sshd_unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def sshd(sshd_server: SSHServer, tmp_path: Path) -> Iterator[SSHD]:
    """The running sshd and an empty remote directory; restarted if a test stopped it."""
    sshd_server.start()
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    yield SSHD(server=sshd_server, remote_dir=remote_dir)
    sshd_server.drop_sessions()  # nothing a test froze or left open outlives it
    sshd_server.start()
