"""With an API token set, the dashboard renders, goes live and plays back with the token in
no URL it requests, and under the server's CSP nothing is refused: real server, real Chromium.

SQLite only, like the other browser tests: the databases are covered by the API tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.conftest import LiveServer, make_record, serve_in_thread
from training_platform.api.security import DASHBOARD_CSP
from training_platform.settings import Settings

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

TOKEN = "br0wser/t0ken+=="
# Runs before the page's own scripts: the token is already stored (as if the
# user had typed it at the prompt), and every CSP violation is recorded.
INIT_SCRIPT = f"""
localStorage.setItem("training_platform.token", {json.dumps(TOKEN)});
window.cspViolations = [];
document.addEventListener("securitypolicyviolation", (event) => {{
  window.cspViolations.push(`${{event.violatedDirective}} ${{event.blockedURI}}`);
}});
"""


@pytest.fixture
def secured_server(settings: Settings, metrics_dir: Path) -> Iterator[LiveServer]:
    """The app with an API token, served by uvicorn in a thread, background sync on."""
    secured = settings.model_copy(update={"poll_interval": 0.25, "api_token": TOKEN})
    with serve_in_thread(secured, metrics_dir) as server:
        yield server


def _sync(server: LiveServer, job_id: str) -> None:
    response = httpx.post(
        f"{server.url}/api/monitoring/{job_id}/metrics/sync",
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=30,
    )
    response.raise_for_status()


def _watch_urls(page: Any) -> list[str]:
    """Every URL the page requests, WebSockets included."""
    urls: list[str] = []
    page.on("request", lambda request: urls.append(request.url))
    page.on("websocket", lambda socket: urls.append(socket.url))
    page.add_init_script(INIT_SCRIPT)
    return urls


def _wait_step(page: Any, chart: str, step: int) -> None:
    page.wait_for_function(
        """([chart, text]) => {
            const el = document.querySelector(`.chart[data-chart="${chart}"] .legend-step`);
            return el !== null && el.textContent === text;
        }""",
        arg=[chart, f"step {step:,}"],
        timeout=15_000,
    )


def _assert_no_token_in(urls: list[str]) -> None:
    leaked = [url for url in urls if "token" in url.lower() or "t0ken" in url]
    assert not leaked, leaked


def test_the_dashboard_goes_live_with_a_token_kept_out_of_every_url(
    secured_server: LiveServer, page: Any
) -> None:
    secured_server.write_status("run1", "running", 4, 100)
    secured_server.write_records("run1", [make_record(step) for step in range(5)])
    _sync(secured_server, "run1")
    urls = _watch_urls(page)

    response = page.goto(f"{secured_server.url}/#/run/run1")
    assert response.headers["content-security-policy"] == DASHBOARD_CSP
    _wait_step(page, "losses", 4)
    page.wait_for_selector("#connection[data-state=live]")
    secured_server.write_records("run1", [make_record(step) for step in range(5, 8)])
    _wait_step(page, "losses", 7)  # streamed over the socket the token opened

    assert any(url.startswith("ws://") and "/live" in url for url in urls), urls
    _assert_no_token_in(urls)
    assert page.evaluate("() => window.cspViolations") == []


def test_playback_with_a_token_and_no_csp_violation(secured_server: LiveServer, page: Any) -> None:
    secured_server.write_records("replay", [make_record(step) for step in range(30)])
    secured_server.write_status("replay", "completed", 29, 30)
    _sync(secured_server, "replay")
    urls = _watch_urls(page)

    page.goto(f"{secured_server.url}/#/playback/replay")
    page.fill("#playback-speed", "10")
    page.click("#playback-play")
    page.wait_for_selector("#playback-state[data-state=complete]")

    assert any(url.startswith("ws://") and "/playback" in url for url in urls), urls
    _assert_no_token_in(urls)
    assert page.evaluate("() => window.cspViolations") == []
