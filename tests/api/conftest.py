"""Fixtures shared by the API tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from tests.fixtures_sshd import SSHD
from training_platform.api.main import create_app
from training_platform.settings import Settings


@pytest.fixture
def run1(metrics_dir: Path) -> Path:
    """Job `run1`, discovered from an empty metrics file before any line is written."""
    path = metrics_dir / "run1_metrics.jsonl"
    path.write_bytes(b"")
    return path


@pytest.fixture
def ssh_client(settings: Settings, sshd: SSHD) -> Iterator[TestClient]:
    """An app that trusts the test sshd's host key and may use its client keys."""
    trusting = settings.model_copy(
        update={
            "ssh_key_dir": sshd.key_dir,
            "ssh_known_hosts": sshd.known_hosts_path,
            "ssh_timeout": 5.0,
        }
    )
    with TestClient(create_app(trusting)) as client:
        yield client
