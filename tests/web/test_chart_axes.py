"""Y-axis ticks in headless Chromium: complete labels, axes wide enough, light log grids.

uPlot draws the tick labels on a canvas, so the tests read what it drew from the
axis (`_values`, the labels; `_size`, the width; the grid's filter over `_splits`)
and measure the labels in the axis font. Screenshots of the charts go to
test-artifacts/web/ (chart_axes_*.png) besides the conftest's full-page one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import LiveServer, make_record
from tests.web.test_dashboard_charts import _open_run, _store

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

ARTIFACTS = Path("test-artifacts/web")

Y_AXIS = """(id) => {
  const u = document.querySelector(`.chart[data-chart="${id}"]`).chart.plot;
  const axis = u.axes[1];
  const canvas = document.createElement("canvas").getContext("2d");
  canvas.font = '12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, '
    + 'sans-serif';
  const labels = (axis._values || []).filter((v) => v !== null && v !== undefined);
  const grid = axis.grid.filter(u, axis._splits, 1, axis._space, 0).filter((v) => v !== null);
  return {
    labels,
    splits: axis._splits.length,
    grid: grid.length,
    size: axis._size,
    widest: Math.max(0, ...labels.map((l) => canvas.measureText(String(l)).width)),
  };
}"""


def _assert_readable(axis: dict[str, Any]) -> None:
    assert axis["labels"], axis
    for label in axis["labels"]:
        assert label and not label.startswith(".") and not label.startswith("-."), axis
    # The axis holds its widest label, the tick (10px) and the gap (5px).
    assert axis["size"] >= axis["widest"] + 15, axis


def test_a_log_axis_over_four_decades_labels_its_decades_in_full(
    live_server: LiveServer, page: Any
) -> None:
    # KL from 1e-6 to 1e-2 (max ten times the mean): several decades on a log axis.
    records = [
        make_record(step, kl={"mean": 10 ** (-6 + 4 * s), "max": 10 ** (-5 + 3 * s)})
        for step, s in ((step, step / 49) for step in range(50))
    ]
    _store(live_server, "decades", records)
    _open_run(page, live_server, "decades", 49, chart="kl")
    page.locator('.chart[data-chart="kl"] .chart-log').click()
    page.wait_for_function(
        """() => document.querySelector('.chart[data-chart="kl"]')
            .chart.plot?.scales.y.distr === 3"""
    )
    axis = page.evaluate(Y_AXIS, "kl")
    _assert_readable(axis)
    assert {"1e-6", "1e-5", "1e-4", "0.001", "0.01"} <= set(axis["labels"]), axis
    # Decades only: no label between them, one grid line per decade (no grey bands).
    assert len(axis["labels"]) <= 6, axis
    assert axis["grid"] == len(axis["labels"]), axis
    assert axis["splits"] > axis["grid"]  # the minor ticks are still there, unlined
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chart = page.locator('.chart[data-chart="kl"]')
    chart.screenshot(path=str(ARTIFACTS / "chart_axes_log.png"))


def test_a_linear_axis_of_small_values_writes_them_in_full(
    live_server: LiveServer, page: Any
) -> None:
    records = [
        make_record(step, kl={"mean": 1e-5 + step * 2e-6, "max": 2e-5 + step * 4e-6})
        for step in range(50)
    ]
    _store(live_server, "small", records)
    _open_run(page, live_server, "small", 49, chart="kl")
    axis = page.evaluate(Y_AXIS, "kl")
    _assert_readable(axis)
    # Under 0.001: written 2.5e-4, each label a distinct number (not ".000e-4" twice).
    assert all("e-" in label or label == "0" for label in axis["labels"]), axis
    values = [float(label) for label in axis["labels"]]
    assert len(set(values)) == len(values) and values == sorted(values), axis
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chart = page.locator('.chart[data-chart="kl"]')
    chart.screenshot(path=str(ARTIFACTS / "chart_axes_linear.png"))
