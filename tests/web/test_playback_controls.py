"""The playback view's controls in headless Chromium: speed limits, seeks while paused,
and what the page says before Play (charts the run never records left out).

SQLite only, like test_dashboard.py; every test fails on a browser console error
(conftest.py). Screenshots go to test-artifacts/web/ (and /tmp/shots2/ when it exists).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

# Every WebSocket the page opens, reachable from the test (to send what the page
# itself would refuse to, as an older page or a script might).
KEEP_SOCKETS = """(() => {
  const Native = window.WebSocket;
  window.sockets = [];
  window.WebSocket = class extends Native {
    constructor(...args) { super(...args); window.sockets.push(this); }
  };
})();"""
LOSSES_STEPS = (
    """() => document.querySelector('.chart[data-chart="losses"]').chart.plot?.data[0] ?? []"""
)


def _store(server: LiveServer, job_id: str, records: list[dict[str, Any]]) -> None:
    server.write_records(job_id, records)
    last = records[-1]["step"]
    server.write_status(job_id, "completed", last, last + 1)
    server.sync(job_id)


def _shot(page: Any, name: str) -> None:
    for folder in (ARTIFACTS, Path("/tmp/shots2")):
        if folder.is_dir():
            page.screenshot(path=str(folder / name), full_page=True)


def _sent_controls(page: Any) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    def on_socket(socket: Any) -> None:
        socket.on("framesent", lambda payload: sent.append(json.loads(payload)))

    page.on("websocket", on_socket)
    return sent


def _play(page: Any, server: LiveServer, job_id: str, speed: str) -> None:
    page.goto(f"{server.url}/#/playback/{job_id}")
    page.fill("#playback-speed", speed)
    page.click("#playback-play")
    page.wait_for_function(
        "() => /^[1-9]/.test(document.querySelector('#playback-position').textContent)"
    )


def test_an_out_of_range_speed_is_refused_before_it_is_sent(
    live_server: LiveServer, page: Any
) -> None:
    _store(live_server, "speeds", [make_record(step) for step in range(400)])
    page.add_init_script(KEEP_SOCKETS)
    sent = _sent_controls(page)

    # Play at 20x: refused on the page, no socket opened.
    page.goto(f"{live_server.url}/#/playback/speeds")
    page.fill("#playback-speed", "20")
    page.click("#playback-play")
    assert "out of range: choose from 0.1× to 10×" in page.inner_text("#playback-message")
    assert page.inner_text("#playback-state") == "ready"
    assert page.evaluate("() => window.sockets.length") == 0

    page.fill("#playback-speed", "1")
    page.click("#playback-play")
    page.wait_for_selector("#playback-state[data-state=playing]")
    assert page.is_hidden("#playback-message")

    # Set 20x while it plays: not sent; the box goes back to the speed played, and
    # the line says so; the playback carries on, which the state agrees with.
    page.fill("#playback-speed", "20")
    page.click("#playback-speed-set")
    message = page.inner_text("#playback-message")
    assert "Speed 20× is out of range" in message
    assert "The playback goes on at 1×." in message
    assert page.input_value("#playback-speed") == "1"
    assert page.inner_text("#playback-state") == "playing"
    assert not [control for control in sent if control.get("action") == "speed"]

    # Should the server refuse one anyway (sent past the page), the page says the
    # speed kept, and its state stays the server's: still playing.
    page.evaluate(
        """() => window.sockets.at(-1).send(JSON.stringify({ action: "speed", value: 50 }))"""
    )
    page.wait_for_function(
        "() => document.querySelector('#playback-message').textContent.startsWith('Not applied')"
    )
    message = page.inner_text("#playback-message")
    assert "speed 'value' must be a number from 0.1 to 10" in message
    assert message.endswith("The playback goes on at 1×.")
    assert page.inner_text("#playback-state") == "playing"
    held = page.inner_text("#playback-position")
    page.wait_for_function(  # it does go on
        "(held) => document.querySelector('#playback-position').textContent !== held", arg=held
    )

    # A speed in range is sent and applied.
    page.fill("#playback-speed", "10")
    page.click("#playback-speed-set")
    page.wait_for_function(
        "() => document.querySelector('#playback-speed').value === '10'"
        " && document.querySelector('#playback-message').hidden"
    )
    # The page sent only the speed in range (50 was the test's own).
    assert [c["value"] for c in sent if c.get("action") == "speed"] == [50, 10]


def test_a_seek_while_paused_redraws_the_charts_at_once(live_server: LiveServer, page: Any) -> None:
    _store(live_server, "paused-seek", [make_record(step) for step in range(200)])
    _play(page, live_server, "paused-seek", "1")  # 10 records a second
    page.click("#playback-pause")
    page.wait_for_selector("#playback-state[data-state=paused]")
    reached = page.evaluate(LOSSES_STEPS)[-1]
    assert reached < 150

    # Forward: the charts reach step 150 without a resume, every step before it drawn.
    page.fill("#playback-seek", "150")
    page.click("#playback-seek-go")
    page.wait_for_function(f"() => ({LOSSES_STEPS})().at(-1) === 150")
    assert page.evaluate(LOSSES_STEPS) == list(range(151))
    assert page.inner_text("#playback-position") == "151 / 200 · step 150"
    assert page.inner_text("#playback-state") == "paused"
    _shot(page, "playback_paused_seek.png")

    # Backward, still paused: cut back at once.
    page.fill("#playback-seek", "40")
    page.press("#playback-seek", "Enter")
    page.wait_for_function(f"() => ({LOSSES_STEPS})().at(-1) === 40")
    page.wait_for_function(
        "() => document.querySelector('#playback-position').textContent === '41 / 200 · step 40'"
    )
    time.sleep(0.3)  # paused: nothing more arrives
    assert page.evaluate(LOSSES_STEPS)[-1] == 40

    # Resumed, it plays on from there, with no gap and no step twice.
    page.click("#playback-pause")
    page.wait_for_function(f"() => ({LOSSES_STEPS})().at(-1) >= 43")
    steps = page.evaluate(LOSSES_STEPS)
    assert steps == list(range(len(steps)))

    # A step outside the playback is refused on the page, with the range.
    page.fill("#playback-seek", "999")
    page.click("#playback-seek-go")
    assert "seek from 0 to 199" in page.inner_text("#playback-message")


def test_a_cpu_runs_playback_shows_no_gpu_chart_and_says_press_play(
    live_server: LiveServer, page: Any
) -> None:
    cpu = {"tokens_per_second": 900.0, "step_time": 0.4}  # no gpu_memory_allocated
    _store(live_server, "cpu-replay", [make_record(step, performance=cpu) for step in range(40)])

    page.goto(f"{live_server.url}/#/playback/cpu-replay")
    note = page.locator("#playback-not-started")
    note.wait_for()
    assert note.inner_text() == (
        "Playback has not started. Press Play to replay this run (40 records, steps 0–39);"
        " the charts fill in as it plays."
    )
    assert page.inner_text("#playback-not-recorded") == (
        "Not recorded by this run, so not shown: GPU memory allocated (GiB)."
    )
    # No chart stands there saying "No data for this chart yet".
    assert page.locator(".chart-empty:visible").count() == 0
    assert page.locator(".chart:visible").count() == 0
    _shot(page, "playback_before_play.png")

    page.fill("#playback-speed", "10")
    page.click("#playback-play")
    page.wait_for_selector("#playback-state[data-state=complete]")
    page.wait_for_function(f"() => ({LOSSES_STEPS})().at(-1) === 39")
    assert page.is_hidden("#playback-not-started")
    assert page.is_hidden('.chart[data-chart="gpu_memory"]')
    assert page.is_hidden("#playback-not-recorded")  # the board's folded line says it now
    assert "GPU memory" in page.inner_text(".folded-note:visible")
    assert page.is_visible('.chart[data-chart="throughput"]')
    assert page.locator(".chart-empty:visible").count() == 0
    _shot(page, "playback_cpu_complete.png")
