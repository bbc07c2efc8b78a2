"""The Compare view in real headless Chromium: runs side by side, named and coloured,
hover, smoothing, the x axis, the metric picker, the config diff, a live run that keeps
drawing, and the bad cases (an unknown run in the link, more than 20 runs, a run with
disjoint metrics and no run file).

One server and one set of tiny runs for the whole module (SQLite; the API tests cover
both databases). Console errors fail a test; screenshots land in test-artifacts/web/.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record, module_server
from training_platform.callbacks.wire.records import build_record

STEPS = 30
LIVE_STEPS = 10
RUNS = "cmp-a,cmp-b,cmp-c,cmp-live"


def write_run_file(metrics_dir: Path, job_id: str, **fields: Any) -> None:
    """`{job_id}_run.json` as PlatformCallback writes it (docs/contract.md, run file)."""
    path = metrics_dir / f"{job_id}_run.json"
    temporary = path.with_suffix(".tmp")
    temporary.write_text(json.dumps({"job_id": job_id, **fields}))
    temporary.replace(path)


def reward_record(step: int, reward: float) -> dict[str, Any]:
    return make_record(step, reward={"mean": reward, "min": reward - 0.5, "max": reward + 0.5})


@pytest.fixture(scope="module")
def compare_server(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[LiveServer]:
    """Four runs: two named ones in a project with configs that differ, one with no
    run file and only a metric of its own, one still running (fed by the tests)."""
    root = tmp_path_factory.mktemp("compare")
    with module_server(root, _sqlite_template) as server:
        metrics_dir = server.metrics_dir
        config = {"actor": {"lr": 3e-6, "clip": 0.2}, "rollout": {"n": 8}}
        write_run_file(metrics_dir, "cmp-a", project="math-grpo", name="lr 3e-6",
                       tags=["grpo", "baseline"], config=config)  # fmt: skip
        write_run_file(metrics_dir, "cmp-b", project="math-grpo", name="lr 1e-6",
                       config={**config, "actor": {"lr": 1e-6, "clip": 0.2}})  # fmt: skip
        server.write_records("cmp-a", [reward_record(s, 0.1 + s * 0.02) for s in range(STEPS)])
        # A noisy run: smoothing visibly changes its line.
        server.write_records(
            "cmp-b", [reward_record(s, 0.5 + (0.3 if s % 2 else -0.3)) for s in range(STEPS)]
        )
        # No run file, and a metric no other run logs: absent from the others' charts.
        server.write_records(
            "cmp-c",
            [
                build_record(s, {"extra": {"custom/score": float(s)}}, timestamp=time.time())
                for s in range(STEPS)
            ],
        )
        write_run_file(metrics_dir, "cmp-live", project="math-grpo", name="live one")
        server.write_status("cmp-live", "running", LIVE_STEPS - 1, 100)
        server.write_records("cmp-live", [reward_record(s, 0.3) for s in range(LIVE_STEPS)])
        for job_id in RUNS.split(","):
            server.sync(job_id)
        yield server


def open_compare(page: Any, server: LiveServer, query: str) -> None:
    page.goto(f"{server.url}/#/compare?{query}")


def legend(page: Any, key: str) -> dict[str, str]:
    """Run → legend value of the chart of `key`."""
    return page.evaluate(
        """(key) => Object.fromEntries([...document.querySelectorAll(
            `.cmp-chart[data-key="${key}"] .cmp-legend-item`)].map((item) =>
            [item.dataset.job, item.querySelector(".cmp-legend-value").textContent]))""",
        key,
    )


def chart_data(page: Any, key: str) -> Any:
    return page.evaluate(
        """(key) => {
            const chart = document.querySelector(`.cmp-chart[data-key="${key}"]`).chart;
            return chart.plot ? chart.plot.data : null;
        }""",
        key,
    )


def wait_chart(page: Any, key: str, runs: int) -> None:
    """Until the chart of `key` has a plot and a legend entry for `runs` runs."""
    page.wait_for_function(
        """([key, runs]) => {
            const el = document.querySelector(`.cmp-chart[data-key="${key}"]`);
            return el && el.chart.plot && el.querySelectorAll(".cmp-legend-item").length === runs;
        }""",
        arg=[key, runs],
    )


def drag_across(page: Any, key: str, start: float, end: float) -> None:
    """A mouse drag over the chart of `key`, from and to these fractions of its width."""
    box = page.locator(f'.cmp-chart[data-key="{key}"] .u-over').bounding_box()
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * start, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * end, y, steps=5)
    page.mouse.up()


def swatches(page: Any) -> dict[str, str]:
    return page.evaluate(
        """() => Object.fromEntries([...document.querySelectorAll("#compare-runs tr")].map(
            (row) => [row.dataset.job, row.querySelector(".run-swatch").style.background]))"""
    )


def test_runs_side_by_side_named_coloured_with_config_diff(
    compare_server: LiveServer, page: Any
) -> None:
    fields = "reward.mean,extra.custom/score,loss.actor_loss"
    open_compare(page, compare_server, f"jobs={RUNS}&fields={fields}")
    wait_chart(page, "reward.mean", 3)
    page.wait_for_selector('#compare-runs tr[data-job="cmp-live"] .live-state[data-state="live"]')

    rows = page.locator("#compare-runs tr")
    assert rows.count() == 4
    # Named by name, else (no run file) by job id; health badges shown.
    assert page.locator('#compare-runs tr[data-job="cmp-a"] .run-name').inner_text() == "lr 3e-6"
    assert page.locator('#compare-runs tr[data-job="cmp-c"] .run-name').inner_text() == "cmp-c"
    assert page.locator('#compare-runs tr[data-job="cmp-b"] .health-badge').inner_text() == "ok"

    # A line per run that logs the metric; the run with disjoint metrics is absent, said so.
    assert set(legend(page, "reward.mean")) == {"cmp-a", "cmp-b", "cmp-live"}
    assert (
        "Not logged by cmp-c"
        in page.locator('.cmp-chart[data-key="reward.mean"] .chart-note').inner_text()
    )
    wait_chart(page, "extra.custom/score", 1)
    assert set(legend(page, "extra.custom/score")) == {"cmp-c"}
    data = chart_data(page, "reward.mean")
    assert data[0] == list(range(STEPS))  # x: the steps
    lines = data[1 + 2 * 4 :]  # after each run's min and max: the lines, in the runs' order
    assert lines[0][STEPS - 1] == pytest.approx(0.1 + (STEPS - 1) * 0.02)
    assert all(value is None for value in lines[2])  # cmp-c

    # The config diff: the key that differs, with a dash where a run has no config.
    page.wait_for_selector('#config-diff tr[data-key="actor.lr"]')
    cells = page.locator('#config-diff tr[data-key="actor.lr"] td.config-value')
    assert [cells.nth(i).inner_text() for i in range(3)] == ["0.000003", "0.000001", "—"]
    assert page.locator('#config-diff td.missing[data-job="cmp-c"]').count() >= 1
    assert "the same in every run" in page.locator("#config-same").inner_text()
    page.screenshot(path=str(ARTIFACTS / "compare_four_runs.png"), full_page=True)

    # Colours come from the job id: the same in another comparison and after a reload.
    colours = swatches(page)
    assert len(set(colours.values())) == 4
    open_compare(page, compare_server, "jobs=cmp-b,cmp-a")
    page.wait_for_selector('#compare-runs tr[data-job="cmp-a"]')
    page.reload()
    page.wait_for_selector('#compare-runs tr[data-job="cmp-a"]')
    again = swatches(page)
    assert again == {"cmp-a": colours["cmp-a"], "cmp-b": colours["cmp-b"]}


def test_hover_smoothing_x_axis_and_picker_follow_the_url(
    compare_server: LiveServer, page: Any
) -> None:
    open_compare(page, compare_server, "jobs=cmp-a,cmp-b&fields=reward.mean")
    wait_chart(page, "reward.mean", 2)
    assert page.locator('.cmp-chart[data-key="reward.mean"] .cmp-legend-x').inner_text() == "latest"

    # Hover: every run's value at the x under the mouse.
    over = page.locator('.cmp-chart[data-key="reward.mean"] .u-over')
    box = over.bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + box["height"] * 0.5)
    page.wait_for_function(
        """() => document.querySelector('.cmp-chart[data-key="reward.mean"] .cmp-legend-x')
            .textContent.startsWith("step ")"""
    )
    step = int(page.locator('.cmp-chart[data-key="reward.mean"] .cmp-legend-x').inner_text()[5:])
    values = legend(page, "reward.mean")
    assert float(values["cmp-a"]) == pytest.approx(0.1 + step * 0.02, abs=1e-3)
    assert float(values["cmp-b"]) == pytest.approx(0.2 if step % 2 == 0 else 0.8, abs=1e-3)
    page.screenshot(path=str(ARTIFACTS / "compare_hover.png"))
    page.mouse.move(0, 0)

    # Smoothing: asked from the server, written in the URL; the raw band stays.
    page.evaluate(
        """() => { const s = document.querySelector("#compare-smoothing");
                   s.value = "0.6"; s.dispatchEvent(new Event("input")); }"""
    )
    page.wait_for_function(
        """() => location.hash.includes("smoothing=0.6")
            && document.querySelector('.cmp-chart[data-key="reward.mean"] .cmp-legend-value')
                .textContent.includes("raw")"""
    )
    data = chart_data(page, "reward.mean")
    raw_b, smoothed_b = data[3], data[6]  # b's min (exact points: the raw value), b's line
    assert raw_b[-2:] == pytest.approx([0.2, 0.8])
    assert 0.35 < smoothed_b[-1] < 0.65  # the EMA lies between the two alternating values
    page.screenshot(path=str(ARTIFACTS / "compare_smoothed.png"))

    # Or the mean of the last n values (here 2: b's alternating values average out).
    page.select_option("#compare-method", "window")
    page.fill("#compare-window", "2")
    page.press("#compare-window", "Enter")
    page.wait_for_function(
        """() => location.hash.includes("window=2") && !location.hash.includes("smoothing")
            && document.querySelector('.cmp-chart[data-key="reward.mean"]').chart.plot
                .data[6].slice(-1)[0] === 0.5"""
    )

    # The x axis: time since the run's first record.
    page.select_option("#compare-x", "time")
    page.wait_for_function("() => location.hash.includes('x=time')")
    wait_chart(page, "reward.mean", 2)
    page.wait_for_function(
        """() => document.querySelector('.cmp-chart[data-key="reward.mean"]').chart.plot
            .data[0].every((x) => x < 3600)"""
    )

    # The metric picker offers the union of the runs' metrics; a chart can go again.
    options = page.locator("#compare-metric option").all_inner_texts()
    assert "loss.actor_loss" in options and "reward.mean" not in options
    page.select_option("#compare-metric", "loss.actor_loss")
    page.click("#compare-add")
    wait_chart(page, "loss.actor_loss", 2)
    assert "fields=reward.mean,loss.actor_loss" in page.evaluate("() => location.hash")

    # A drag across one chart zooms both; a double-click shows everything again.
    drag_across(page, "loss.actor_loss", 0.2, 0.5)
    spans = """() => [...document.querySelectorAll(".cmp-chart")].map((el) => {
        const x = el.chart.plot.scales.x; const d = el.chart.plot.data[0];
        return (x.max - x.min) / (d[d.length - 1] - d[0]); })"""
    page.wait_for_function(f"() => ({spans})().every((f) => f < 0.5)")
    assert page.locator("#compare-zoom").inner_text() == "zoomed"
    page.dblclick('.cmp-chart[data-key="reward.mean"] .u-over')
    page.wait_for_function(f"() => ({spans})().every((f) => f > 0.99)")
    page.click('.cmp-chart[data-key="reward.mean"] .chart-remove')
    page.wait_for_selector('.cmp-chart[data-key="reward.mean"]', state="detached")

    # The link holds it all: opened afresh, the same view.
    hash_ = page.evaluate("() => location.hash")
    page.goto("about:blank")
    page.goto(f"{compare_server.url}/{hash_}")
    wait_chart(page, "loss.actor_loss", 2)
    assert page.locator("#compare-x").input_value() == "time"
    assert page.locator("#compare-window").input_value() == "2"
    assert page.locator("#compare-method").input_value() == "window"
    assert page.locator(".cmp-chart").count() == 1


def test_a_zoom_on_steps_asks_for_that_range_at_full_detail(
    compare_server: LiveServer, page: Any
) -> None:
    """Downsampled whole runs; a drag over a few hundred steps draws every step of
    them (the server's exact answer for that range), a double-click goes back."""
    compare_server.write_records("cmp-long", [reward_record(s, float(s)) for s in range(3_000)])
    compare_server.sync("cmp-long")
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    open_compare(page, compare_server, "jobs=cmp-long,cmp-a&fields=reward.mean&smoothing=0.5")
    wait_chart(page, "reward.mean", 2)
    whole = chart_data(page, "reward.mean")[0]
    assert len(whole) < 3_000  # points of several steps each

    drag_across(page, "reward.mean", 0.40, 0.45)
    page.wait_for_function(
        "() => document.querySelector('#compare-zoom').textContent.endsWith('every step')"
    )
    assert any("/api/compare?" in url and "start_step=" in url for url in asked)
    data = chart_data(page, "reward.mean")
    xs, raw_long, smoothed_long = data[0], data[1], data[5]  # cmp-long's min, its line
    lo, hi = xs[0], xs[-1]
    assert 1_000 <= lo < hi <= 1_500 and xs == list(range(lo, hi + 1))
    assert raw_long == pytest.approx(xs)  # each step's own value, no bucket of several
    # The smoothing continues the whole run's (EMA 0.5 of s: s - 1 once settled),
    # not started again at the zoom's left edge (which would give lo there).
    assert smoothed_long[0] == pytest.approx(lo - 1, abs=1e-6)
    page.screenshot(path=str(ARTIFACTS / "compare_zoom_detail.png"))

    page.dblclick('.cmp-chart[data-key="reward.mean"] .u-over')
    page.wait_for_function(
        "() => document.querySelector('#compare-zoom').textContent === 'whole runs'"
    )
    page.wait_for_function(
        """(n) => document.querySelector('.cmp-chart[data-key="reward.mean"]').chart.plot
            .data[0].length === n""",
        arg=len(whole),
    )


def test_a_running_run_keeps_drawing(compare_server: LiveServer, page: Any) -> None:
    open_compare(page, compare_server, "jobs=cmp-a,cmp-live&smoothing=0.5&fields=reward.mean")
    wait_chart(page, "reward.mean", 2)
    page.wait_for_selector('#compare-runs tr[data-job="cmp-live"] .live-state[data-state="live"]')
    page.wait_for_selector("#connection[data-state=live]")
    first = page.locator('#compare-runs tr[data-job="cmp-live"] .latest-step').inner_text()
    last = int(first)

    new = [reward_record(s, 2.0) for s in range(last + 1, last + 6)]
    compare_server.write_records("cmp-live", new)
    target = f"{last + 5:,}"
    page.wait_for_function(
        """(target) => document.querySelector(
            '#compare-runs tr[data-job="cmp-live"] .latest-step').textContent === target""",
        arg=target,
    )
    page.wait_for_function(
        """(n) => document.querySelector('.cmp-chart[data-key="reward.mean"]').chart.plot
            .data[0].length >= n""",
        arg=last + 6,
    )
    data = chart_data(page, "reward.mean")
    xs, raw_live, smoothed_live = data[0], data[3], data[6]  # cmp-live's min (raw) and line
    at = xs.index(last + 5)
    # The new raw points, and the EMA continued towards them from 0.3 (weight 0.5).
    assert raw_live[at] == pytest.approx(2.0)
    assert smoothed_live[xs.index(last)] == pytest.approx(0.3, abs=1e-6)
    expected = 0.3
    for _ in range(5):
        expected = 0.5 * expected + 0.5 * 2.0
    assert smoothed_live[at] == pytest.approx(expected, rel=1e-3)
    page.screenshot(path=str(ARTIFACTS / "compare_live.png"))


def test_an_unknown_run_is_named_and_can_be_removed(compare_server: LiveServer, page: Any) -> None:
    open_compare(page, compare_server, "jobs=cmp-a,no-such-run,cmp-b")
    error = page.locator("#compare-error")
    error.wait_for(state="visible")
    assert error.locator(".compare-error-message").inner_text() == "job 'no-such-run' not found."
    page.screenshot(path=str(ARTIFACTS / "compare_unknown_run.png"))
    page.click('button.remove-unknown[data-job="no-such-run"]')
    page.wait_for_selector('#compare-runs tr[data-job="cmp-b"]')
    assert not error.is_visible()
    assert "jobs=cmp-a,cmp-b&" in page.evaluate("() => location.hash")


def test_a_link_with_more_than_20_runs_keeps_the_first_20(
    compare_server: LiveServer, page: Any
) -> None:
    extra = ",".join(f"ghost-{i}" for i in range(20))
    open_compare(page, compare_server, f"jobs=cmp-a,{extra}")
    notice = page.locator("#compare-notice")
    notice.wait_for(state="visible")
    assert "at most 20" in notice.inner_text()
    jobs = page.evaluate("() => location.hash.split('jobs=')[1].split('&')[0].split(',')")
    assert len(jobs) == 20 and jobs[0] == "cmp-a"
    # The ghosts are unknown: all named at once, each offered for removal.
    page.locator("#compare-error").wait_for(state="visible")
    assert page.locator("button.remove-unknown").count() == 19
    assert "job 'ghost-18' not found" in page.locator(".compare-error-message").inner_text()
    assert httpx.get(f"{compare_server.url}/api/jobs/cmp-a", timeout=10).status_code == 200
