"""Browser assets, in real headless Chromium: without the chart library the dashboard
degrades visibly (jobs list, a run's numbers and anomalies, a banner saying how to
fix it), and /docs and /redoc render with nothing fetched off the server.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import LiveServer, make_record
from training_platform.api.routers import dashboard

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

JOB = "degraded"
UPLOT_URL = "/static/vendor/uplot/"


@pytest.fixture(params=["missing", "broken"])
def without_chart_library(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """The server's vendor folders hold no uPlot, or a uPlot that is not JavaScript."""
    vendor = tmp_path / "vendor"
    if request.param == "broken":
        (vendor / "uplot").mkdir(parents=True)
        (vendor / "uplot" / "uPlot.esm.js").write_text("export default function uPlot( {\n")
        (vendor / "uplot" / "uPlot.min.css").write_text(".uplot {}\n")
    monkeypatch.setattr(dashboard, "VENDOR_SOURCES", (tmp_path / "node_modules", vendor))
    return str(request.param)


@pytest.fixture
def tolerant_page(browser: Any) -> Iterator[tuple[Any, list[str]]]:
    """A page whose console errors are collected, not fatal: the test says which it expects."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    errors: list[str] = []

    def on_console(message: Any) -> None:
        if message.type == "error":
            errors.append(f"{message.text} @ {message.location.get('url', '')}")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    try:
        yield page, errors
    finally:
        context.close()


def _store_run(server: LiveServer) -> None:
    records = [make_record(step) for step in range(40)]
    nan_loss = {"actor_loss": math.nan, "critic_loss": 1.0, "total_loss": 3.0}
    records[30] = make_record(30, loss=nan_loss)
    server.write_records(JOB, records)
    server.write_status(JOB, "completed", 39, 40)
    server.sync(JOB)


def test_without_the_chart_library_the_dashboard_says_so_and_keeps_its_numbers(
    without_chart_library: str, live_server: LiveServer, tolerant_page: tuple[Any, list[str]]
) -> None:
    page, errors = tolerant_page
    _store_run(live_server)

    page.goto(f"{live_server.url}/#/")
    page.locator(f'tr[data-job="{JOB}"] a.job-link').wait_for()
    banner = page.locator("#asset-banner")
    banner.wait_for()
    assert "chart library (uPlot) did not load" in banner.inner_text()
    assert "pip install --force-reinstall training-platform" in banner.inner_text()
    assert "npm ci --prefix training_platform/web" in banner.inner_text()

    page.locator(f'tr[data-job="{JOB}"] a.job-link').click()
    page.locator("#status-panel [data-status=completed]").wait_for()
    losses = page.locator('.chart[data-chart="losses"]')
    page.wait_for_function(
        """() => {
            const el = document.querySelector('.chart[data-chart="losses"] .legend-step');
            return el !== null && el.textContent === "step 39";
        }"""
    )
    actor = [t for t in losses.locator(".legend-item").all_inner_texts() if t.startswith("actor ")]
    assert actor == ["actor 1.961"]  # 2.0 - 39 * 0.001: the stored value, no plot needed
    assert losses.locator(".chart-missing").count() == 1
    assert page.locator(".chart canvas").count() == 0
    page.locator('#anomalies-panel tr[data-step="30"]').first.wait_for()
    assert banner.is_visible()

    # The only errors are the library's own failed loads (a missing one is a 404).
    unexpected = [e for e in errors if UPLOT_URL not in e]
    if without_chart_library == "missing":
        assert any("404" in e and UPLOT_URL in e for e in errors), errors
    assert not unexpected, unexpected


# ReDoc 2 always shows Redocly's logo from their CDN; the docs pages' CSP refuses it.
REDOC_LOGO = "https://cdn.redoc.ly/redoc/logo-mini.svg"


def assert_api_docs_render_offline(browser: Any, base_url: str) -> None:
    """/docs lists the operations and /redoc renders, with every request off the server
    aborted (and recorded) and no console error but the refused logo."""
    context = browser.new_context(viewport={"width": 1440, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(10_000)
    outside: list[str] = []
    errors: list[str] = []

    def only_local(route: Any) -> None:
        if route.request.url.startswith(base_url + "/"):
            route.continue_()
        else:
            outside.append(route.request.url)
            route.abort()

    page.route("**/*", only_local)
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    try:
        page.goto(f"{base_url}/docs")
        page.locator('.opblock-summary-path[data-path="/api/jobs"]').first.wait_for()
        assert page.locator(".opblock").count() >= 10
        page.goto(f"{base_url}/redoc")
        page.locator("h2", has_text="Liveness").first.wait_for()
    finally:
        context.close()
    assert outside == []
    unexpected = [e for e in errors if not (REDOC_LOGO in e and "Content Security Policy" in e)]
    assert unexpected == []


def test_swagger_ui_and_redoc_render_from_local_files(
    live_server: LiveServer, browser: Any
) -> None:
    if not any((source / "swagger-ui-dist").is_dir() for source in dashboard.VENDOR_SOURCES):
        pytest.fail("no Swagger UI: run npm ci --prefix training_platform/web")
    assert_api_docs_render_offline(browser, live_server.url)
