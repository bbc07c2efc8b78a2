"""The run page from a run's first second, progress from status messages, one row per
anomaly incident, full progress for a completed run: real server, real headless Chromium.

SQLite only, like test_dashboard.py: the databases are covered by the API tests.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.web.conftest import LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _wait_step(page: Any, chart: str, step: int, timeout_ms: float = 15_000) -> None:
    page.wait_for_function(
        """([chart, text]) => {
            const el = document.querySelector(`.chart[data-chart="${chart}"] .legend-step`);
            return el !== null && el.textContent === text;
        }""",
        arg=[chart, f"step {step:,}"],
        timeout=timeout_ms,
    )


def _fill_percent(fill: Any) -> float:
    """The bar's width in percent, however the browser serialises the style."""
    return float(fill.evaluate("element => element.style.width").removesuffix("%"))


def _wait_text(page: Any, selector: str, text: str, timeout_ms: float = 10_000) -> None:
    page.wait_for_function(
        """([selector, text]) => {
            const el = document.querySelector(selector);
            return el !== null && el.textContent === text;
        }""",
        arg=[selector, text],
        timeout=timeout_ms,
    )


def _kl_spike(step: int, *, reported: bool) -> dict[str, Any]:
    """A KL spike the platform flags; `reported`: the trainer's callback flagged it too."""
    record = make_record(step, kl={"mean": 7.0, "max": 7.5})
    if reported:
        record["anomalies"] = [
            {"type": "kl_explosion", "severity": "warning", "message": f"KL 7.0 at step {step}"}
        ]
    return record


def test_a_run_page_opened_before_the_first_line_waits_then_goes_live(
    live_server: LiveServer, page: Any
) -> None:
    page.goto(f"{live_server.url}/#/run/fresh")
    note = page.locator("#waiting-note")
    note.wait_for(state="visible")
    assert "Waiting for the first step" in note.inner_text()
    page.wait_for_selector("#connection[data-state=waiting]")
    page.evaluate("() => { window.sameDocument = true; }")  # gone if the page reloads

    live_server.write_status("fresh", "running", 0, 100)
    live_server.write_records("fresh", [make_record(step) for step in range(3)])
    _wait_step(page, "losses", 2)
    note.wait_for(state="hidden")
    page.wait_for_selector("#connection[data-state=live]")

    live_server.write_records("fresh", [make_record(step) for step in range(3, 6)])
    _wait_step(page, "losses", 5)  # and then it streams
    assert page.evaluate("() => window.sameDocument === true")


def test_the_progress_bar_moves_with_status_messages_alone(
    live_server: LiveServer, page: Any
) -> None:
    live_server.write_records("prog", [make_record(step) for step in range(5)])
    live_server.write_status("prog", "running", 4, 100)
    live_server.sync("prog")
    frozen = httpx.get(f"{live_server.url}/api/jobs/prog", timeout=10).text
    # The page's periodic REST refresh keeps answering the old job: only the live
    # stream's status messages can move the bar.
    page.route(
        "**/api/jobs/prog",
        lambda route: route.fulfill(status=200, content_type="application/json", body=frozen),
    )
    page.goto(f"{live_server.url}/#/run/prog")
    label = ".run-header .progress-label"
    _wait_text(page, label, "4 / 100")
    page.wait_for_selector("#connection[data-state=live]")

    for step in (30, 60):  # no metric line: the status file alone says where the run is
        live_server.write_status("prog", "running", step, 100)
        _wait_text(page, label, f"{step} / 100", timeout_ms=4_000)
    assert _fill_percent(page.locator(".run-header .progress-fill")) == 60.0


def test_the_anomaly_table_lists_one_row_per_incident(live_server: LiveServer, page: Any) -> None:
    # Spikes more than the detectors' cooldown (50 steps) apart: separate incidents.
    records = [make_record(step) for step in range(80)]
    records[5] = _kl_spike(5, reported=True)  # found by both
    records[70] = _kl_spike(70, reported=False)  # found by the platform only
    live_server.write_records("inc", records)
    live_server.sync("inc")
    api = f"{live_server.url}/api/monitoring/inc/metrics/anomalies"
    incidents = httpx.get(api, timeout=10).json()["anomalies"]
    rows = httpx.get(f"{api}?raw=true", timeout=10).json()["anomalies"]
    assert len(rows) > len(incidents)  # the page must not show the raw rows

    page.goto(f"{live_server.url}/#/run/inc")
    table = page.locator("#anomalies-panel tbody tr.incident")
    page.wait_for_selector('#anomalies-panel tr[data-step="5"]')
    assert table.count() == len(incidents)
    both = page.locator('#anomalies-panel tr[data-step="5"][data-type="kl_explosion"]')
    assert both.count() == 1
    assert "callback + platform" in both.inner_text()
    assert "KL 7.0 at step 5" in both.locator("td.message").inner_text()
    assert "critical" in both.inner_text()  # the higher of the two severities
    assert page.locator('#anomalies-panel tr[data-step="70"] .sources').inner_text() == "platform"
    assert page.locator("#anomaly-count").inner_text() == str(len(incidents))
    # A type wraps after its underscore, never mid-word ("gradient_explo sion").
    assert both.locator(".type").inner_text() == "kl_explosion"
    assert both.locator(".type wbr").count() == 1
    badge = page.locator(".anomaly-badge").inner_text()
    count = int(badge.split()[0])
    assert badge == (f"{count} anomaly" if count == 1 else f"{count} anomalies")
    # The message has most of the row, not a sliver of it.
    message_box = both.locator("td.message").bounding_box()
    row_box = both.bounding_box()
    assert message_box is not None and row_box is not None
    assert message_box["width"] >= 0.5 * row_box["width"]

    # Live: the record's own anomaly and the platform's finding arrive separately,
    # and still make one row.
    page.wait_for_selector("#connection[data-state=live]")
    live_server.write_records("inc", [_kl_spike(140, reported=True)])
    page.wait_for_selector('#anomalies-panel tr[data-step="140"]')
    live = page.locator('#anomalies-panel tr[data-step="140"][data-type="kl_explosion"]')
    page.wait_for_function(
        """() => {
            const row = document.querySelector(
                '#anomalies-panel tr[data-step="140"][data-type="kl_explosion"]');
            return row !== null && row.textContent.includes("callback + platform");
        }"""
    )
    assert live.count() == 1
    final = httpx.get(api, timeout=10).json()["anomalies"]
    assert table.count() == len(final)
    assert page.locator("#anomaly-count").inner_text() == str(len(final))


def test_a_completed_run_shows_its_full_progress(live_server: LiveServer, page: Any) -> None:
    # A 0-based step loop: the last step of a 10-step run is 9.
    live_server.write_records("done", [make_record(step) for step in range(10)])
    live_server.write_status("done", "completed", 9, 10)
    live_server.sync("done")
    job = httpx.get(f"{live_server.url}/api/jobs/done", timeout=10).json()
    assert (job["status"], job["current_step"]) == ("completed", 9)

    page.goto(f"{live_server.url}/#/")
    row = page.locator('tr[data-job="done"]')
    row.locator('[data-status="completed"]').wait_for()
    assert row.locator(".progress-label").inner_text() == "10 / 10"
    assert _fill_percent(row.locator(".progress-fill")) == 100.0
    assert "(100 %)" in (row.locator(".progress").get_attribute("title") or "")

    page.goto(f"{live_server.url}/#/run/done")
    _wait_text(page, ".run-header .progress-label", "10 / 10")
    assert page.locator("#status-panel .progress-label").inner_text() == "10 / 10"
