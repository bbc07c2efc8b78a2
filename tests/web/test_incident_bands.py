"""Incidents in headless Chromium: a shaded band per incident with one marker at
its onset, episodes in the anomalies panel, no anomaly text in a legend at rest.

SQLite only, like the other dashboard tests; each leaves a screenshot in
test-artifacts/web/ (conftest.py), looked at when the view changed.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from tests.web.conftest import LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

LAST = 299

CHART_INCIDENTS = """(id) => {
  const chart = document.querySelector(`.chart[data-chart="${id}"]`);
  return {
    bands: [...chart.querySelectorAll(".incident-band")].map((b) => ({
      step: Number(b.dataset.step), end: Number(b.dataset.end), type: b.dataset.type,
      ongoing: b.classList.contains("ongoing"), width: b.getBoundingClientRect().width,
    })),
    markers: [...chart.querySelectorAll(".anomaly-marker")].map((m) => Number(m.dataset.step)),
    legend: chart.querySelectorAll(".legend-anomaly").length,
  };
}"""


def blown_up_run(server: LiveServer, job_id: str, status: str) -> None:
    """KL over the threshold from step 100 to 249, a NaN loss at 103, a lone grad spike at 200."""
    records = []
    for step in range(LAST + 1):
        overrides: dict[str, Any] = {}
        if 100 <= step < 250:
            overrides["kl"] = {"mean": 3.0, "max": 3.5}
        if step == 103:
            overrides["loss"] = {"actor_loss": math.nan, "critic_loss": 1.0, "total_loss": 3.0}
        if step == 200:
            overrides["gradient"] = {"actor_norm": 90.0, "critic_norm": 0.7}
        records.append(make_record(step, **overrides))
    server.write_records(job_id, records)
    server.write_status(job_id, status, LAST, 1000)
    server.sync(job_id)


def open_run(page: Any, server: LiveServer, job_id: str) -> None:
    page.goto(f"{server.url}/#/run/{job_id}")
    page.wait_for_function(
        """(text) => document.querySelector('.chart[data-chart="kl"] .legend-step')
            ?.textContent.startsWith(text)""",
        arg=f"step {LAST}",
    )
    page.wait_for_selector("#anomalies-panel tr.incident")
    page.wait_for_selector('.chart[data-chart="kl"] .incident-band')


def test_an_incident_is_a_band_with_one_marker_and_an_episode_groups_its_parts(
    live_server: LiveServer, page: Any
) -> None:
    blown_up_run(live_server, "blown", "completed")
    open_run(page, live_server, "blown")

    kl = page.evaluate(CHART_INCIDENTS, "kl")
    bands = {band["type"]: band for band in kl["bands"]}
    assert (bands["kl_explosion"]["step"], bands["kl_explosion"]["end"]) == (100, 249)
    assert bands["kl_explosion"]["width"] > 100  # half the chart, not a hairline
    assert not bands["kl_explosion"]["ongoing"]  # the run has completed
    # One marker per incident (onsets 100, 103, 200), not one per step it lasted.
    assert sorted(kl["markers"]) == [100, 103, 200]
    assert kl["legend"] == 0  # at rest the legend shows values, not the latest incident

    episode = page.locator("#anomalies-panel tr.episode")
    assert episode.count() == 1
    assert "Episode at step 100" in episode.inner_text()
    assert "2 incidents that started together" in episode.inner_text()
    parts = page.locator("#anomalies-panel tbody.episode-group tr.part")
    assert sorted(parts.evaluate_all("rows => rows.map(r => r.dataset.type)")) == [
        "kl_explosion",
        "nan_inf",
    ]
    kl_row = page.locator('#anomalies-panel tr.incident[data-type="kl_explosion"]')
    assert "to 249" in kl_row.inner_text()
    assert page.locator("#anomaly-count").inner_text() == "3"

    # Under the cursor at the onset, the legend names what happened there.
    page.locator('.chart[data-chart="kl"] .u-over').hover(position={"x": 5, "y": 20})
    page.evaluate(
        """() => {
          const chart = document.querySelector('.chart[data-chart="kl"]').chart;
          const i = chart.columns.steps.indexOf(100);
          chart.showLegend(i);
        }"""
    )
    assert page.evaluate(CHART_INCIDENTS, "kl")["legend"] >= 1


def test_an_ongoing_incident_stays_open_to_the_latest_step(
    live_server: LiveServer, page: Any
) -> None:
    blown_up_run(live_server, "running", "running")
    open_run(page, live_server, "running")

    bands = page.evaluate(CHART_INCIDENTS, "kl")["bands"]
    kl = next(band for band in bands if band["type"] == "kl_explosion")
    # Clear since step 250 for 49 steps, after lasting 150: the detectors hold it
    # open, so the band reaches the data's end and fades there.
    assert kl["ongoing"] is True
    assert (kl["step"], kl["end"]) == (100, LAST)
    assert (
        "ongoing"
        in page.locator('#anomalies-panel tr.incident[data-type="kl_explosion"]').inner_text()
    )
