"""Chart controls in headless Chromium: folding, log scale, wall-clock axis, CSV, playback.

SQLite only, like test_dashboard.py. Every test also fails on any browser
console error (conftest.py) and leaves a screenshot in test-artifacts/web/.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.conftest import LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

# 2026-01-01 12:00:00 UTC, one record a minute: a wall-clock axis over an hour.
START_TIME = 1_767_268_800.0
SECONDS_PER_STEP = 60.0

CHART_STATE = """(id) => {
  const chart = document.querySelector(`.chart[data-chart="${id}"]`).chart;
  return {
    distr: chart.plot ? chart.plot.scales.y.distr : null,
    xTime: chart.plot ? chart.plot.scales.x.time : null,
    xMin: chart.plot ? chart.plot.scales.x.min : null,
    xMax: chart.plot ? chart.plot.scales.x.max : null,
    ticks: chart.xTickLabels || [],
    note: chart.note.hidden ? "" : chart.note.textContent,
  };
}"""


def _timed_records(steps: range, **overrides: Any) -> list[dict[str, Any]]:
    records = []
    for step in steps:
        record = make_record(step, **overrides)
        record["timestamp"] = START_TIME + step * SECONDS_PER_STEP
        records.append(record)
    return records


def _store(server: LiveServer, job_id: str, records: list[dict[str, Any]]) -> None:
    server.write_records(job_id, records)
    last = records[-1]["step"]
    server.write_status(job_id, "completed", last, last + 1)
    server.sync(job_id)


def _open_run(
    page: Any, server: LiveServer, job_id: str, last_step: int, chart: str = "losses"
) -> None:
    """The run page, once `chart`'s legend has reached `last_step`."""
    page.goto(f"{server.url}/#/run/{job_id}")
    page.wait_for_function(
        """([chart, text]) => document.querySelector(`.chart[data-chart="${chart}"] .legend-step`)
            ?.textContent.startsWith(text)""",
        arg=[chart, f"step {last_step:,}"],
    )


def _wait_distr(page: Any, chart: str, distr: int) -> None:
    """Until the chart's y scale has uPlot's `distr` (1 linear, 3 log)."""
    page.wait_for_function(
        """([id, distr]) => document.querySelector(`.chart[data-chart="${id}"]`)
            .chart.plot?.scales.y.distr === distr""",
        arg=[chart, distr],
    )


def _state(page: Any, chart: str) -> dict[str, Any]:
    result: dict[str, Any] = page.evaluate(CHART_STATE, chart)
    return result


def test_a_chart_with_no_data_in_the_run_folds_away(live_server: LiveServer, page: Any) -> None:
    cpu = {"tokens_per_second": 900.0, "step_time": 0.4}  # no gpu_memory_allocated
    _store(live_server, "cpu-run", _timed_records(range(40), performance=cpu))
    _open_run(page, live_server, "cpu-run", 39)

    page.wait_for_selector('.chart[data-chart="gpu_memory"]', state="hidden")
    assert page.locator('.chart[data-chart="throughput"]').is_visible()
    assert page.locator('.chart[data-chart="losses"]').is_visible()
    assert "GPU memory allocated" in page.inner_text(".folded-note")
    # No frame left behind: the section still shows its other charts, no empty placeholder.
    assert page.locator(".chart:visible .chart-empty:visible").count() == 0


def test_a_section_whose_charts_all_fold_away_disappears(
    live_server: LiveServer, page: Any
) -> None:
    records = _timed_records(range(20))
    for record in records:
        del record["timing"]
    _store(live_server, "no-timing", records)
    _open_run(page, live_server, "no-timing", 19)

    page.wait_for_selector('.board-section[data-section="timing"]', state="hidden")
    assert page.locator('.board-section[data-section="overview"]').is_visible()


def test_the_log_toggle_switches_the_y_scale_and_is_remembered(
    live_server: LiveServer, page: Any
) -> None:
    _store(live_server, "logrun", _timed_records(range(50)))
    _open_run(page, live_server, "logrun", 49)
    assert _state(page, "losses")["distr"] == 1  # linear

    button = page.locator('.chart[data-chart="losses"] .chart-log')
    button.click()
    _wait_distr(page, "losses", 3)
    assert button.get_attribute("aria-pressed") == "true"
    assert _state(page, "kl")["distr"] == 1  # per chart

    # The reward band's minimum is -0.5: not drawable on a log axis, and the chart says so.
    page.locator('.chart[data-chart="reward"] .chart-log').click()
    _wait_distr(page, "reward", 3)
    assert "values ≤ 0 at 50 points are not drawn" in _state(page, "reward")["note"]

    page.reload()
    _open_run(page, live_server, "logrun", 49)
    assert _state(page, "losses")["distr"] == 3
    page.locator('.chart[data-chart="losses"] .chart-log').click()
    _wait_distr(page, "losses", 1)


def test_the_wall_clock_axis_shows_times(live_server: LiveServer, page: Any) -> None:
    _store(live_server, "clock", _timed_records(range(61)))
    _open_run(page, live_server, "clock", 60)
    assert _state(page, "losses")["xTime"] is False

    page.select_option(".x-axis-picker", "time")
    page.wait_for_function(
        "() => document.querySelector('.chart[data-chart=\"losses\"]').chart.plot.scales.x.time"
    )
    state = _state(page, "losses")
    # The x scale spans the records' timestamps, one hour, not steps 0..60.
    assert state["xMin"] == pytest.approx(START_TIME, abs=1)
    assert state["xMax"] == pytest.approx(START_TIME + 3600, abs=1)
    assert state["ticks"] and all(
        label is None or (len(label) == 5 and label[2] == ":") for label in state["ticks"]
    ), state["ticks"]
    expected = page.evaluate(  # the browser's own time zone decides the hour
        """(t) => { const d = new Date(t * 1000); const pad = (n) => String(n).padStart(2, "0");
            return `${pad(d.getHours())}:${pad(d.getMinutes())}:00`; }""",
        START_TIME + 3600,
    )
    legend = page.inner_text('.chart[data-chart="losses"] .legend-step')
    assert legend == f"step 60 · {expected}"

    page.reload()  # remembered in this browser
    _open_run(page, live_server, "clock", 60)
    assert _state(page, "losses")["xTime"] is True
    assert page.input_value(".x-axis-picker") == "time"


def test_the_history_answer_carries_each_points_timestamp(live_server: LiveServer) -> None:
    _store(live_server, "stamps", _timed_records(range(300)))
    url = f"{live_server.url}/api/monitoring/stamps/metrics"

    exact = httpx.get(url, params={"max_points": 1000}).json()
    assert exact["downsampled"] is False
    assert exact["timestamps"] == [START_TIME + step * SECONDS_PER_STEP for step in range(300)]

    bucketed = httpx.get(url, params={"max_points": 20}).json()
    assert bucketed["downsampled"] is True
    assert len(bucketed["timestamps"]) == len(bucketed["steps"])
    for step, stamp in zip(bucketed["steps"], bucketed["timestamps"], strict=True):
        assert stamp == START_TIME + step * SECONDS_PER_STEP


def test_the_csv_download_holds_the_charts_points(
    live_server: LiveServer, page: Any, tmp_path: Path
) -> None:
    records = _timed_records(range(30))
    records[12]["loss"]["actor_loss"] = math.nan
    records[13]["loss"]["critic_loss"] = math.inf
    _store(live_server, "csvrun", records)
    _open_run(page, live_server, "csvrun", 29)

    with page.expect_download() as info:
        page.locator('.chart[data-chart="losses"] .chart-csv').click()
    download = info.value
    assert download.suggested_filename == "run_csvrun_losses.csv"
    target = tmp_path / "losses.csv"
    download.save_as(target)
    rows = list(csv.reader(io.StringIO(target.read_text())))
    assert rows[0] == [
        "step",
        "timestamp",
        "loss.actor_loss",
        "loss.critic_loss",
        "loss.total_loss",
    ]
    assert len(rows) == 31
    assert [float(rows[1][0]), float(rows[1][1])] == [0, START_TIME]
    assert float(rows[6][2]) == 2.0 - 5 * 0.001
    assert rows[13][2] == "NaN"
    assert rows[14][3] == "Infinity"


CSV_OF_BUCKETS = """async () => {
  const { Columns, toCsv } = await import("/static/js/series.js");
  const columns = Columns.fromHistory({
    downsampled: true, steps: [0, 100], last_steps: [99, 150], timestamps: [1000.5, null],
    series: {
      "extra.a,b": { mean: [1.5, null], min: [0, null], max: [3, null], nonfinite: [0, 4] },
    },
  });
  const exact = Columns.fromHistory({
    downsampled: false, steps: [7], timestamps: [5],
    series: { "loss.x": { values: ["-Infinity"] } },
  });
  return [toCsv(columns, ["extra.a,b", "loss.missing"]), toCsv(exact, ["loss.x"])];
}"""


def test_csv_of_downsampled_points_has_min_max_and_nonfinite_columns(
    live_server: LiveServer, page: Any
) -> None:
    page.goto(f"{live_server.url}/#/")
    bucketed, exact = page.evaluate(CSV_OF_BUCKETS)
    assert bucketed.split("\r\n") == [
        'step,last_step,timestamp,"extra.a,b:mean","extra.a,b:min","extra.a,b:max",'
        '"extra.a,b:nonfinite",loss.missing:mean,loss.missing:min,loss.missing:max,'
        "loss.missing:nonfinite",
        "0,99,1000.5,1.5,0,3,0,,,,0",
        "100,150,,,,,4,,,,0",
        "",
    ]
    assert exact == "step,timestamp,loss.x\r\n7,5,-Infinity\r\n"


def test_playback_shows_the_anomalies_up_to_the_step_reached(
    live_server: LiveServer, page: Any
) -> None:
    records = _timed_records(range(80))
    for step, kind in ((5, "kl_spike"), (60, "loss_plateau")):
        records[step]["anomalies"] = [
            {"type": kind, "severity": "warning", "message": f"{kind} at {step}"}
        ]
    _store(live_server, "replay-anomalies", records)

    page.goto(f"{live_server.url}/#/playback/replay-anomalies")
    assert page.inner_text("#anomalies-panel") == "No anomalies."
    page.fill("#playback-speed", "1")  # 10 records a second
    page.click("#playback-play")
    losses = page.locator('.chart[data-chart="losses"]')
    losses.locator('.anomaly-marker[data-step="5"]').wait_for()
    page.locator('#anomalies-panel tr[data-step="5"]').wait_for()

    page.click("#playback-pause")
    page.wait_for_selector("#playback-state[data-state=paused]")
    reached = int(page.inner_text("#playback-position").rsplit("step ", 1)[1].replace(",", ""))
    assert reached < 60, "paused too late to tell"
    # At this step the live view showed step 5's anomaly and not yet step 60's.
    assert losses.locator('.anomaly-marker[data-step="60"]').count() == 0
    assert page.locator('#anomalies-panel tr[data-step="60"]').count() == 0
    assert page.inner_text("#anomaly-count") == "1"

    page.click("#playback-pause")  # Resume
    page.fill("#playback-speed", "10")
    page.click("text=Set")
    page.wait_for_selector("#playback-state[data-state=complete]")
    losses.locator('.anomaly-marker[data-step="60"]').wait_for()
    page.locator('#anomalies-panel tr[data-step="60"]').wait_for()
    assert "loss_plateau at 60" in page.inner_text("#anomalies-panel")

    # Seeking back takes away what has not been reached again (the finished stream
    # is closed, so nothing plays on and this is not a race).
    page.fill("#playback-seek", "20")
    page.click("text=Go")
    assert page.inner_text("#anomaly-count") == "1"
    assert losses.locator('.anomaly-marker[data-step="60"]').count() == 0
    assert losses.locator('.anomaly-marker[data-step="5"]').count() == 1


def test_dragging_on_the_wall_clock_axis_zooms_to_the_steps_of_that_time(
    live_server: LiveServer, page: Any
) -> None:
    _store(live_server, "clock-zoom", _timed_records(range(61)))
    _open_run(page, live_server, "clock-zoom", 60)
    page.select_option(".x-axis-picker", "time")
    page.wait_for_function(
        "() => document.querySelector('.chart[data-chart=\"losses\"]').chart.plot.scales.x.time"
    )

    plot = page.locator('.chart[data-chart="losses"] .u-over')
    box = plot.bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.5, y, steps=5)
    page.mouse.up()

    page.wait_for_function(
        "() => document.querySelector('.zoom-label').textContent.includes('every step')"
    )
    label = page.inner_text(".zoom-label")  # "steps 15–30 · every step"
    lo, hi = (int(n) for n in label.split(" ")[1].split("–"))
    assert abs(lo - 15) <= 1 and abs(hi - 30) <= 1, label
    state = _state(page, "losses")
    assert state["xMin"] == pytest.approx(START_TIME + lo * SECONDS_PER_STEP, abs=1)
    assert state["xMax"] == pytest.approx(START_TIME + hi * SECONDS_PER_STEP, abs=1)


def test_a_log_chart_with_nothing_above_zero_says_so(live_server: LiveServer, page: Any) -> None:
    records = _timed_records(range(10), kl={"mean": 0.0, "max": -1.0})
    _store(live_server, "zero-kl", records)
    _open_run(page, live_server, "zero-kl", 9)

    page.locator('.chart[data-chart="kl"] .chart-log').click()
    _wait_distr(page, "kl", 3)
    assert "values ≤ 0 at 20 points are not drawn" in _state(page, "kl")["note"]
    # The legend still gives the raw values.
    assert "mean 0" in page.inner_text('.chart[data-chart="kl"] .chart-legend')
