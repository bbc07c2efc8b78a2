"""Fixtures shared by the API tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def run1(metrics_dir: Path) -> Path:
    """Job `run1`, discovered from an empty metrics file before any line is written."""
    path = metrics_dir / "run1_metrics.jsonl"
    path.write_bytes(b"")
    return path
