"""The jobs list in real headless Chromium shows a page of runs and "more" adds one.

SQLite only, for speed (tests/api/test_jobs_paging.py covers both databases).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_the_list_shows_100_runs_then_more_on_request(live_server: LiveServer, page: Any) -> None:
    for index in range(105):
        live_server.write_records(f"run{index:03d}", [make_record(0)])
    page.goto(live_server.url + "/")

    page.wait_for_selector("#jobs-body tr[data-job]")
    assert page.locator("#jobs-body tr[data-job]").count() == 100
    assert page.locator("#jobs-more").is_visible()

    page.click("#jobs-more")
    page.locator("#jobs-more").wait_for(state="hidden")  # the page CSP forbids wait_for_function
    rows = page.locator("#jobs-body tr[data-job]")
    assert len({rows.nth(i).get_attribute("data-job") for i in range(105)}) == 105
