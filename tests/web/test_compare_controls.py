"""The Compare view's chart controls in headless Chromium: readable titles, the log
toggle with the run page's axis labels, the CSV of what a chart shows, and each
run's stored anomalies as markers coloured by severity.

SQLite only; console errors fail the test (conftest.py). A screenshot of the
view lands in test-artifacts/web/compare_controls.png.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record
from tests.web.test_chart_axes import Y_AXIS
from tests.web.test_compare_view import open_compare, wait_chart
from tests.web.test_dashboard_charts import _store

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

STEPS = 40
CHART = '.cmp-chart[data-key="kl.mean"]'
# The y axis of a Compare chart, read as test_chart_axes reads the run page's.
COMPARE_Y_AXIS = Y_AXIS.replace(
    'document.querySelector(`.chart[data-chart="${id}"]`)',
    'document.querySelector(`.cmp-chart[data-key="${id}"]`)',
)


def _records(scale: float, anomaly: tuple[int, str, str]) -> list[dict[str, Any]]:
    """KL over several decades (a log axis' case), one anomaly at its step."""
    records = [
        make_record(step, kl={"mean": scale * 10 ** (-5 + 4 * step / (STEPS - 1)), "max": 0.1})
        for step in range(STEPS)
    ]
    step, kind, severity = anomaly
    records[step]["anomalies"] = [
        {"type": kind, "severity": severity, "message": f"{kind} at {step}"}
    ]
    return records


def test_compare_charts_have_log_csv_markers_and_titles(
    live_server: LiveServer, page: Any, tmp_path: Path
) -> None:
    _store(live_server, "ctl-a", _records(1.0, (10, "kl_spike", "critical")))
    _store(live_server, "ctl-b", _records(2.0, (25, "reward_collapse", "warning")))
    open_compare(page, live_server, "jobs=ctl-a,ctl-b&fields=kl.mean,reward.mean")
    wait_chart(page, "kl.mean", 2)

    # A readable title, the raw name beside it.
    assert page.locator(f"{CHART} h3").inner_text() == "KL: mean kl.mean"
    assert (
        page.locator('.cmp-chart[data-key="reward.mean"] h3')
        .inner_text()
        .startswith("Reward: mean")
    )

    # Each run's stored anomaly is a marker at its step, coloured by its severity.
    marker_a = page.locator(f'{CHART} .anomaly-marker[data-job="ctl-a"][data-step="10"]')
    marker_b = page.locator(f'{CHART} .anomaly-marker[data-job="ctl-b"][data-step="25"]')
    marker_a.wait_for(state="attached")
    marker_b.wait_for(state="attached")
    assert "severity-critical" in (marker_a.get_attribute("class") or "")
    assert "severity-warning" in (marker_b.get_attribute("class") or "")
    assert "kl_spike at 10" in (marker_a.get_attribute("title") or "")
    # (The platform's own detector may add ctl-b's KL growth: only ctl-a's is certain.)
    assert page.locator(f'{CHART} .anomaly-marker[data-job="ctl-a"]').count() == 1

    # Linear: the axis is as wide as its labels (no fixed 62 px), labels in full.
    linear = page.evaluate(COMPARE_Y_AXIS, "kl.mean")
    assert linear["size"] >= linear["widest"] + 15, linear
    assert not any(label.startswith(".") for label in linear["labels"]), linear

    # Log: uPlot's log scale, decades labelled in full, remembered per metric.
    page.locator(f"{CHART} .chart-log").click()
    page.wait_for_function(
        """(sel) => document.querySelector(sel).chart.plot?.scales.y.distr === 3""", arg=CHART
    )
    assert page.locator(f"{CHART} .chart-log").get_attribute("aria-pressed") == "true"
    log = page.evaluate(COMPARE_Y_AXIS, "kl.mean")
    assert {"1e-5", "1e-4", "0.001", "0.01"} <= set(log["labels"]), log
    assert log["size"] >= log["widest"] + 15, log
    assert page.evaluate("() => localStorage.getItem('training_platform.log_charts')") == (
        '["compare:kl.mean"]'
    )
    # The markers are placed again on the new plot.
    marker_a.wait_for(state="attached")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "compare_controls.png"), full_page=True)
    page.locator(CHART).screenshot(path=str(ARTIFACTS / "compare_controls_log_chart.png"))

    # CSV: what the chart shows, x then a column per run.
    with page.expect_download() as info:
        page.locator(f"{CHART} .chart-csv").click()
    download = info.value
    assert download.suggested_filename == "compare_kl.mean.csv"
    target = tmp_path / "kl.csv"
    download.save_as(target)
    rows = list(csv.reader(io.StringIO(target.read_text())))
    assert rows[0] == ["step", "ctl-a", "ctl-b"]
    assert len(rows) == 1 + STEPS
    assert [int(row[0]) for row in rows[1:]] == list(range(STEPS))
    assert float(rows[-1][1]) == pytest.approx(0.1)
    assert float(rows[-1][2]) == pytest.approx(0.2)

    # Back to linear.
    page.locator(f"{CHART} .chart-log").click()
    page.wait_for_function(
        """(sel) => document.querySelector(sel).chart.plot?.scales.y.distr === 1""", arg=CHART
    )
