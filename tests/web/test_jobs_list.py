"""The jobs list in real headless Chromium: health badges that change live, deleting a run.

SQLite only, for speed (the API tests cover both databases). Console errors
fail the test; screenshots land in test-artifacts/web/ (see conftest.py).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def critical_record(step: int) -> dict[str, Any]:
    record = make_record(step)
    record["anomalies"] = [
        {"type": "nan_loss", "severity": "critical", "message": "loss.actor_loss is NaN"}
    ]
    return record


def badge(page: Any, job_id: str) -> Any:
    return page.locator(f'tr[data-job="{job_id}"] .health-badge')


def test_health_badges_show_and_change_without_a_reload(live_server: LiveServer, page: Any) -> None:
    live_server.write_records("calm", [make_record(step) for step in range(5)])
    live_server.write_records("doomed", [make_record(step) for step in range(5)])
    live_server.sync("calm")
    live_server.sync("doomed")
    page.goto(live_server.url + "/")

    page.wait_for_selector('tr[data-job="doomed"] .health-badge[data-health="ok"]')
    assert badge(page, "calm").inner_text() == "ok"

    live_server.write_records("doomed", [critical_record(5)])
    live_server.sync("doomed")

    # The list refreshes itself: the same page, no navigation.
    page.wait_for_selector('tr[data-job="doomed"] .health-badge[data-health="critical"]')
    assert badge(page, "doomed").inner_text() == "critical"
    assert badge(page, "calm").get_attribute("data-health") == "ok"


def test_deleting_a_run_asks_first_then_removes_it(live_server: LiveServer, page: Any) -> None:
    live_server.write_records("keep", [make_record(step) for step in range(3)])
    live_server.write_records("drop", [make_record(step) for step in range(3)])
    live_server.sync("keep")
    live_server.sync("drop")
    page.goto(live_server.url + "/")
    page.wait_for_selector('tr[data-job="drop"]')

    page.click('tr[data-job="drop"] button.delete-job')
    dialog = page.locator("#delete-dialog")
    assert dialog.is_visible()
    assert "drop" in dialog.inner_text()
    page.click("#delete-cancel")  # changing one's mind deletes nothing
    assert not dialog.is_visible()
    assert httpx.get(f"{live_server.url}/api/jobs/drop").status_code == 200

    page.click('tr[data-job="drop"] button.delete-job')
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "jobs_list_delete_dialog.png"))
    page.click("#delete-confirm")

    page.wait_for_selector('tr[data-job="drop"]', state="detached")
    assert not dialog.is_visible()
    assert page.locator('tr[data-job="keep"]').count() == 1
    assert httpx.get(f"{live_server.url}/api/jobs/drop").status_code == 404
    # Its file is still there, and the background discovery does not bring it back.
    assert (live_server.metrics_dir / "drop_metrics.jsonl").exists()
    page.wait_for_timeout(1500)  # several background rounds and list refreshes
    assert page.locator('tr[data-job="drop"]').count() == 0
