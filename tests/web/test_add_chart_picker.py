"""The run page's "Add chart" picker in headless Chromium: nothing chosen to start,
the run's metrics listed by group, narrowed as one types, picked with the keyboard
or the mouse, and the chart it adds drawn under a readable title.

SQLite only, like test_dashboard_charts.py; console errors fail the test
(conftest.py). A screenshot of the open picker lands in test-artifacts/web/.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record
from tests.web.test_dashboard_charts import _open_run, _store

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

PICKER = ".board-controls .metric-picker"
LISTED = """() => [...document.querySelectorAll(".board-controls .metric-option")]
    .map((option) => option.dataset.key)"""
GROUPS = """() => [...document.querySelectorAll(".board-controls .metric-group-title")]
    .map((title) => title.textContent)"""


def _wait_chart(page: Any, chart_id: str) -> None:
    page.wait_for_function(
        """(id) => document.querySelector(`.chart[data-chart="${id}"]`)?.chart.plot""",
        arg=chart_id,
    )


def _shoot(page: Any, name: str) -> None:
    """The controls with the open list below them (an element shot would cut it off)."""
    box = page.locator(".board-controls").bounding_box()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    clip = {"x": box["x"], "y": box["y"], "width": box["width"], "height": box["height"] + 380}
    page.screenshot(path=str(ARTIFACTS / name), clip=clip)


def test_the_picker_lists_metrics_by_group_and_adds_what_is_searched_for(
    live_server: LiveServer, page: Any
) -> None:
    records = [
        make_record(step, mytool={"score": step / 10}, extra={"response_length/mean": 200.0 + step})
        for step in range(20)
    ]
    _store(live_server, "picker", records)
    _open_run(page, live_server, "picker", 19)

    search = page.locator(f"{PICKER} input[role=combobox]")
    # Nothing chosen to start: an empty search box and a closed list.
    assert search.input_value() == ""
    assert search.get_attribute("aria-expanded") == "false"
    assert search.get_attribute("aria-activedescendant") is None

    page.locator(f"{PICKER} .metric-add").click()  # "Add chart" opens the list
    assert search.get_attribute("aria-expanded") == "true"
    # Grouped, the record's groups in their usual order; the fixed charts' series are
    # not offered again (reward.mean has its chart), reward.std is.
    assert page.evaluate(GROUPS) == ["Reward", "Timing", "Extra", "mytool"]
    listed = page.evaluate(LISTED)
    assert "reward.std" in listed and "reward.mean" not in listed
    assert "mytool.score" in listed
    _shoot(page, "add_chart_picker_open.png")
    assert (
        page.locator(f'{PICKER} .metric-option[data-key="reward.std"] .metric-title').inner_text()
        == "Reward: std"
    )

    # Typing narrows the list; nothing is active until an arrow key says so.
    search.type("resp len")
    assert page.evaluate(LISTED) == ["extra.response_length/mean"]
    _shoot(page, "add_chart_picker_search.png")
    search.press("ArrowDown")
    assert page.locator(f"{PICKER} .metric-option[aria-selected=true]").get_attribute(
        "data-key"
    ) == ("extra.response_length/mean")
    search.press("Enter")
    _wait_chart(page, "custom:extra.response_length/mean")
    added = page.locator('.chart[data-chart="custom:extra.response_length/mean"]')
    assert added.locator("h3").inner_text() == "response length/mean"
    assert search.input_value() == "" and search.get_attribute("aria-expanded") == "false"
    search.click()  # still focused: a click opens the list again, without the added one
    assert search.get_attribute("aria-expanded") == "true"
    assert "extra.response_length/mean" not in page.evaluate(LISTED)

    # A click picks too; the choice is remembered for the job.
    search.fill("std")
    page.locator(f'{PICKER} .metric-option[data-key="reward.std"]').click()
    _wait_chart(page, "custom:reward.std")
    assert page.locator('.chart[data-chart="custom:reward.std"] h3').inner_text() == "Reward: std"
    saved = page.evaluate("() => Object.entries(localStorage).find(([k]) => k.includes('picker'))")
    assert saved and "reward.std" in saved[1] and "extra.response_length/mean" in saved[1]

    # A search that matches nothing says so, and Enter adds nothing.
    search.fill("no such metric")
    assert "No metric matches" in page.locator(f"{PICKER} .metric-list").inner_text()
    search.press("Enter")
    search.press("Escape")
    assert search.get_attribute("aria-expanded") == "false"
    assert page.locator('.chart[data-chart^="custom:"]').count() == 2
