"""The jobs list's and the status panel's progress figures in headless Chromium: one
consistent story, each figure labelled by what it counts.

The status file's step, the latest stored record's step and the count of stored
records come from different places: progress shows the furthest step either
source reached, and the stored figure says "N records, up to step S".
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _shot(page: Any, name: str, selector: str | None = None) -> None:
    for folder in (ARTIFACTS, Path("/tmp/shots2")):
        if folder.is_dir():
            target = page.locator(selector) if selector else page
            target.screenshot(path=str(folder / name))


def test_progress_and_stored_figures_tell_one_story(live_server: LiveServer, page: Any) -> None:
    # The trainer logs 81 of its first 111 steps; its status file says step 108 (it
    # lags the metrics file); a second run's status file says 251 with 253 stored.
    logged = [step for step in range(111) if step % 4 != 1][:80]
    logged.append(110)
    live_server.write_records("sparse", [make_record(step) for step in logged])
    live_server.write_status("sparse", "running", 108, 3000)
    live_server.write_records("dense", [make_record(step) for step in range(254)])
    live_server.write_status("dense", "running", 251, 3000)
    for job_id in ("sparse", "dense"):
        live_server.sync(job_id)

    page.goto(f"{live_server.url}/#/")
    dense = page.locator('tr[data-job="dense"]')
    dense.locator(".progress-label").wait_for()
    assert dense.locator(".progress-label").inner_text() == "253 / 3,000"
    assert dense.locator(".stored-cell").inner_text() == "254 records, up to step 253"
    title = dense.locator(".progress").get_attribute("title") or ""
    assert "Step 253 of 3,000: the furthest step known." in title
    assert "Trainer's status file: step 251." in title

    sparse = page.locator('tr[data-job="sparse"]')
    assert sparse.locator(".progress-label").inner_text() == "110 / 3,000"
    assert sparse.locator(".stored-cell").inner_text() == "81 records, up to step 110"
    assert "Fewer records than steps is normal" in (
        sparse.locator(".stored-cell").get_attribute("title") or ""
    )
    assert page.locator("th", has_text="stored metrics").count() == 1
    _shot(page, "jobs_list_progress.png", "table.jobs")

    page.goto(f"{live_server.url}/#/run/sparse")
    panel = page.locator("#status-panel")
    panel.locator("#status-stored").wait_for()
    assert panel.locator(".progress-label").inner_text() == "110 / 3,000"
    assert page.locator(".run-header .progress-label").inner_text() == "110 / 3,000"
    assert panel.locator("#status-trainer-step").inner_text() == "108 (status file)"
    assert panel.locator("#status-stored").inner_text() == "81 records, up to step 110"
    assert "normal when the trainer logs every few steps" in panel.inner_text()
    _shot(page, "status_panel_progress.png", "aside.run-side .panel:first-child")
