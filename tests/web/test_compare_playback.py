"""The Compare view's synced replay in headless Chromium: two stored runs of different
lengths, each with an anomaly at a known step, replayed together on one clock.

The page's clock is Playwright's (`page.clock`): paused once the view has loaded, it
moves only by `run_for`, so "1 s at 10×" is exactly that and a paused replay is seen
to stay put without sleeping. SQLite only; console errors fail a test (conftest.py);
a screenshot mid-replay lands in test-artifacts/web/compare_playback.png.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record, module_server
from tests.web.test_compare_view import open_compare, wait_chart
from training_platform.callbacks.wire.records import build_record

SHORT, LONG = "rp-short", "rp-long"  # steps 0–49 and 0–99
SHORT_ANOMALY, LONG_ANOMALY = 15, 70
LAST_STEP = 99
KEY = "reward.mean"
CHART = f'.cmp-chart[data-key="{KEY}"]'
# 1× replays the whole span in 60 s (compare_replay_logic.js): 10× moves 99/6 steps a second.
STEPS_PER_SECOND_AT_10X = LAST_STEP / 6
DAY = 86_400.0


def _records(steps: int, anomaly: tuple[int, str, str], reward: float) -> list[dict[str, Any]]:
    records = [make_record(step, reward={"mean": reward + step * 0.01}) for step in range(steps)]
    step, kind, severity = anomaly
    records[step]["anomalies"] = [
        {"type": kind, "severity": severity, "message": f"{kind} at {step}"}
    ]
    return records


def _timed(steps: int, start: float, every: float) -> list[dict[str, Any]]:
    """A run whose records are `every` seconds apart from the wall-clock `start`."""
    return [
        build_record(step, {"reward": {"mean": 0.1 * step}}, timestamp=start + step * every)
        for step in range(steps)
    ]


def _store(server: LiveServer, job_id: str, records: list[dict[str, Any]]) -> None:
    server.write_records(job_id, records)
    last = records[-1]["step"]
    server.write_status(job_id, "completed", last, last + 1)
    server.sync(job_id)


@pytest.fixture(scope="module")
def replay_server(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[LiveServer]:
    """Two runs of different lengths, an anomaly each; two more that started days apart."""
    with module_server(tmp_path_factory.mktemp("replay"), _sqlite_template) as server:
        _store(server, SHORT, _records(50, (SHORT_ANOMALY, "reward_spike", "critical"), 0.2))
        _store(server, LONG, _records(100, (LONG_ANOMALY, "kl_spike", "warning"), 0.5))
        now = time.time()
        _store(server, "rp-days-ago", _timed(30, now - 3 * DAY, 2.0))  # 0–58 s
        _store(server, "rp-recent", _timed(40, now - 3600, 3.0))  # 0–117 s
        yield server


def _replay(page: Any) -> dict[str, Any]:
    """The bar's state and position, its progress line, and each run's line in the bar."""
    result: dict[str, Any] = page.evaluate(
        """() => {
            const bar = document.querySelector("#compare-replay");
            return {
                state: bar.dataset.state,
                position: bar.dataset.position === "" ? null : Number(bar.dataset.position),
                progress: document.querySelector("#compare-replay-progress").textContent,
                runs: Object.fromEntries([...bar.querySelectorAll(".cmp-replay-run")]
                    .map((run) => [run.dataset.job, run.textContent])),
                ended: Object.fromEntries([...bar.querySelectorAll(".cmp-replay-run")]
                    .map((run) => [run.dataset.job, run.dataset.ended === "true"])),
            };
        }"""
    )
    return result


def _drawn(page: Any, key: str = KEY) -> dict[str, Any]:
    """What the chart of `key` draws: uPlot's point count, each run's last x drawn."""
    result: dict[str, Any] = page.evaluate(
        """(key) => {
            const chart = document.querySelector(`.cmp-chart[data-key="${key}"]`).chart;
            const last = {};
            chart.runs.forEach((run, r) => {
                const present = chart.shown.perRun[r].present;
                const i = present[present.length - 1];
                last[run.jobId] = present.length ? chart.shown.xs[i] : null;
            });
            return { points: chart.plot.data[0].length, last, xMax: chart.plot.scales.x.max };
        }""",
        key,
    )
    return result


def _marker(page: Any, job_id: str, step: int) -> Any:
    return page.locator(f'{CHART} .anomaly-marker[data-job="{job_id}"][data-step="{step}"]')


def _step_of(progress: str) -> int:
    """The N of "step N / 99"."""
    return int(progress.removeprefix("step ").split(" / ")[0].replace(",", ""))


def test_runs_replay_together_on_one_clock(replay_server: LiveServer, page: Any) -> None:
    page.clock.install()
    open_compare(page, replay_server, f"jobs={SHORT},{LONG}&x=step&fields={KEY}")
    wait_chart(page, KEY, 2)
    # The whole runs first: both anomalies, every point, no replay.
    _marker(page, SHORT, SHORT_ANOMALY).wait_for(state="attached")
    _marker(page, LONG, LONG_ANOMALY).wait_for(state="attached")
    assert _drawn(page)["points"] == LAST_STEP + 1
    assert _replay(page)["state"] == "off"
    assert _replay(page)["progress"] == "whole runs"
    assert page.locator("#compare-replay-exit").is_disabled()

    # From here the page's time moves only when the test says so.
    page.clock.pause_at(page.evaluate("Date.now()") + 1000)
    page.select_option("#compare-replay-speed", "10")
    page.click("#compare-replay-play")
    assert _replay(page)["state"] == "playing"
    assert page.locator("#compare-replay-play").inner_text() == "❚❚ Pause"

    # Progress advances with the clock, every run on it: one second at 10×, then two.
    page.clock.run_for(1000)
    first = _replay(page)
    assert first["state"] == "playing"
    assert first["position"] == pytest.approx(STEPS_PER_SECOND_AT_10X, abs=0.5)
    assert first["progress"] == f"step {int(first['position'])} / {LAST_STEP}"
    drawn = _drawn(page)
    assert drawn["points"] == int(first["position"]) + 1
    assert drawn["last"] == {SHORT: int(first["position"]), LONG: int(first["position"])}
    assert drawn["xMax"] == LAST_STEP  # the frame is the whole runs': the lines grow into it
    # The short run's anomaly at 15 is reached, the long run's at 70 is not.
    assert _marker(page, SHORT, SHORT_ANOMALY).count() == 1
    assert _marker(page, LONG, LONG_ANOMALY).count() == 0
    page.clock.run_for(1000)
    second = _replay(page)
    assert second["position"] == pytest.approx(2 * STEPS_PER_SECOND_AT_10X, abs=0.5)
    assert _step_of(second["progress"]) > _step_of(first["progress"])

    # Pause stops the position, however long the page's time runs on.
    page.click("#compare-replay-play")
    paused = _replay(page)
    assert paused["state"] == "paused"
    assert page.locator("#compare-replay-play").inner_text() == "▶ Resume"
    page.clock.run_for(5000)
    assert _replay(page) == paused
    assert _drawn(page)["points"] == int(paused["position"]) + 1

    # A seek before the long run's anomaly: not shown; past it: shown.
    page.locator("#compare-replay-seek").fill(str(LONG_ANOMALY - 5))
    assert _replay(page)["progress"] == f"step {LONG_ANOMALY - 5} / {LAST_STEP}"
    assert _marker(page, LONG, LONG_ANOMALY).count() == 0
    assert _marker(page, SHORT, SHORT_ANOMALY).count() == 1
    page.locator("#compare-replay-seek").fill(str(LONG_ANOMALY + 5))
    assert _marker(page, LONG, LONG_ANOMALY).count() == 1
    # The short run stopped at its end, step 49, while the long one goes on.
    at = _replay(page)
    assert at["state"] == "paused"
    assert at["ended"] == {SHORT: True, LONG: False}
    assert at["runs"][SHORT].endswith("step 49 · ended")
    assert at["runs"][LONG].endswith(f"step {LONG_ANOMALY + 5}")
    assert _drawn(page)["last"] == {SHORT: 49, LONG: LONG_ANOMALY + 5}
    assert page.locator(f"{CHART} .replay-head").is_visible()  # a line at the replay's x
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "compare_playback.png"), full_page=True)

    # Resumed, the replay plays to the end and stops there.
    page.click("#compare-replay-play")
    page.clock.run_for(3000)
    end = _replay(page)
    assert end["state"] == "ended"
    assert end["position"] == LAST_STEP
    assert end["progress"] == f"step {LAST_STEP} / {LAST_STEP} · ended"
    assert end["ended"] == {SHORT: True, LONG: True}
    assert _drawn(page)["last"] == {SHORT: 49, LONG: LAST_STEP}

    # Leaving the replay shows everything again.
    page.click("#compare-replay-exit")
    assert _replay(page)["state"] == "off"
    assert _replay(page)["progress"] == "whole runs"
    assert _drawn(page)["points"] == LAST_STEP + 1
    assert _marker(page, LONG, LONG_ANOMALY).count() == 1
    assert page.locator(f"{CHART} .cmp-legend-x").inner_text() == "latest"
    assert page.locator(f"{CHART} .replay-head").is_hidden()


def test_time_axis_lines_up_runs_started_days_apart(replay_server: LiveServer, page: Any) -> None:
    open_compare(page, replay_server, f"jobs=rp-days-ago,rp-recent&x=time&fields={KEY}")
    wait_chart(page, KEY, 2)
    page.locator("#compare-replay-seek").fill("60")
    assert _replay(page)["progress"] == "1m 00s / 1m 57s"
    # Each run up to 60 s after its own first record: the older one whole (58 s), the
    # newer one to its record at 60 s, though they started three days apart.
    assert _drawn(page)["last"] == {"rp-days-ago": 58, "rp-recent": 60}
    assert _replay(page)["ended"] == {"rp-days-ago": True, "rp-recent": False}
    # Another x axis ends the replay (its position meant seconds).
    page.select_option("#compare-x", "step")
    page.wait_for_function(
        """() => document.querySelector("#compare-replay").dataset.state === "off"
            && document.querySelector(`.cmp-chart[data-key="reward.mean"]`)
                .chart.plot?.data[0].length === 40"""
    )


def test_live_records_join_a_paused_replay(replay_server: LiveServer, page: Any) -> None:
    job = "rp-live"
    replay_server.write_status(job, "running", 19, 100)
    replay_server.write_records(job, [make_record(step) for step in range(20)])
    replay_server.sync(job)
    open_compare(page, replay_server, f"jobs={SHORT},{job}&x=step&fields={KEY}")
    wait_chart(page, KEY, 2)
    page.wait_for_function("""() => document.querySelector(`tr[data-job="rp-live"] .live-state`)
        ?.dataset.state === "live\"""")
    page.locator("#compare-replay-seek").fill("10")
    assert _drawn(page)["points"] == 11

    # Records arriving while paused: the span grows, the charts stay cut at step 10.
    replay_server.write_records(job, [make_record(step) for step in range(20, 80)])
    page.wait_for_function(
        """() => document.querySelector("#compare-replay-seek").max === "79"
            && document.querySelector(`tr[data-job="rp-live"] .latest-step`)
                .textContent === "79\""""
    )
    assert _replay(page)["state"] == "paused"
    assert _replay(page)["progress"] == "step 10 / 79"
    assert _drawn(page)["points"] == 11
    # Seeking into them shows them.
    page.locator("#compare-replay-seek").fill("70")
    assert _drawn(page)["last"] == {SHORT: 49, job: 70}
    page.click("#compare-replay-exit")
    assert _drawn(page)["last"] == {SHORT: 49, job: 79}
