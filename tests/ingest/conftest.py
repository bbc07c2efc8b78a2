"""Fixtures shared by the ingestion tests."""

from __future__ import annotations

import pytest

from tests.ingest.listener import Heard


@pytest.fixture
def heard() -> Heard:
    return Heard()
