"""Fixtures of the platform-side diagnosis tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from training_platform.ingest.registry import discover_jobs


@pytest.fixture
def run1(metrics_dir: Path, session_factory: sessionmaker[Session]) -> Path:
    """An empty metrics file of job "run1", registered."""
    path = metrics_dir / "run1_metrics.jsonl"
    path.write_bytes(b"")
    with session_factory.begin() as session:
        discover_jobs(session, metrics_dir)
    return path
