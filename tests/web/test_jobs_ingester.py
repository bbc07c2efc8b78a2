"""The jobs view, with several processes possible (PostgreSQL), says which server
process ingests each run, in real headless Chromium."""

from __future__ import annotations

import os
import socket
from typing import Any

import httpx
import pytest

from tests.web.conftest import LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["postgresql"], indirect=True)


def test_the_source_column_names_the_ingesting_process(live_server: LiveServer, page: Any) -> None:
    live_server.write_records("run1", [make_record(0)])
    httpx.post(live_server.url + "/api/monitoring/run1/metrics/sync", timeout=30)
    page.goto(live_server.url + "/")
    ingester = page.locator('tr[data-job="run1"] .source-cell .ingester')
    ingester.wait_for()
    assert ingester.inner_text() == f"via {socket.gethostname()}:{os.getpid()}"
    assert "holds this run's lease" in (ingester.get_attribute("title") or "")
