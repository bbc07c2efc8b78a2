"""The run page's System tab in headless Chromium: per-host GPU/CPU/memory/disk/network
charts on a wall-clock axis with the run's stage timing, the host picker, live samples,
and the empty state of a job without samples.

Every test also fails on any browser console error (conftest.py) and leaves a
screenshot in test-artifacts/web/.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.system_support import T0, append_system, gpu, system_line
from tests.web.conftest import ARTIFACTS, LiveServer, make_record
from training_platform.callbacks.wire.records import build_record

pytestmark = pytest.mark.parametrize("database_url", ["sqlite", "postgresql"], indirect=True)

JOB = "run1"
TRAINER = "gpu-node-1"  # sorts first: the host shown by default
OTHER = "node-2"
STEPS = 20


def _record(step: int) -> dict[str, Any]:
    """A step every 10 s from T0, its stages `gen` (GPUs idle) then `update_actor`."""
    groups = {
        "loss": {"actor_loss": 2.0 - step * 0.01},
        "timing": {"gen": 6.0, "update_actor": 3.0, "update_actor/optimizer": 0.5},
    }
    return build_record(step, groups, timestamp=T0 + 10 * step)


def _trainer_line(i: int) -> bytes:
    busy = i % 2 == 1
    gpus = [gpu(0, 95.0 if busy else 5.0), gpu(1, 90.0 if busy else 3.0, temperature_c=70.0)]
    return system_line(T0 + 5 * i, TRAINER, i // 2, gpus=gpus, cpu_percent=100.0 + i)


def _store_run(server: LiveServer) -> None:
    server.write_records(JOB, [_record(step) for step in range(STEPS)])
    append_system(server.metrics_dir / f"{JOB}_system.jsonl", *map(_trainer_line, range(2 * STEPS)))
    append_system(
        server.metrics_dir / f"{JOB}_system.{OTHER}.jsonl",
        *(system_line(T0 + 10 * i, OTHER, gpus=[gpu(0, 50.0)]) for i in range(STEPS)),
    )
    server.write_status(JOB, "running", STEPS - 1, 100)
    server.sync(JOB)


def _chart(page: Any, chart_id: str, expression: str) -> Any:
    return page.evaluate(
        f"""() => {{
            const chart = document.querySelector('.chart[data-chart="{chart_id}"]')?.chart;
            return chart ? {expression} : null;
        }}"""
    )


def _wait_points(page: Any, count: int) -> None:
    page.wait_for_function(
        """(count) => {
            const chart = document.querySelector('.chart[data-chart="sys-gpu-util"]')?.chart;
            return chart?.plot && chart.points === count && chart.plot.data[0].length === count;
        }""",
        arg=count,
        timeout=20_000,
    )


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"system_tab_{name}.png"), full_page=True)


def test_system_tab_draws_each_gpu_the_host_picker_and_live_samples(
    live_server: LiveServer, page: Any
) -> None:
    _store_run(live_server)
    page.goto(f"{live_server.url}/#/run/{JOB}/system")
    page.wait_for_selector('.run-tab.active[data-tab="system"]')
    page.wait_for_selector('.system-pane[data-tab="system"]:not([hidden])')
    assert page.is_hidden(".run-layout")  # the overview is another tab
    _wait_points(page, 2 * STEPS)

    # The host picker lists both hosts, the first on show.
    options = page.eval_on_selector_all("#system-host option", "os => os.map(o => o.value)")
    assert options == [TRAINER, OTHER]
    assert page.input_value("#system-host") == TRAINER

    # One line per GPU; memory and power with their shared total / limit, dashed.
    assert _chart(page, "sys-gpu-util", "chart.plot.series.length") == 3  # x + 2 GPUs
    assert _chart(page, "sys-gpu-util", "chart.lines.map(l => l.label)") == ["GPU 0", "GPU 1"]
    memory = _chart(page, "sys-gpu-memory", "chart.lines.map(l => [l.label, l.ref])")
    assert memory == [["GPU 0", False], ["GPU 1", False], ["total", True]]
    assert _chart(page, "sys-gpu-power", "chart.lines.length") == 3
    assert _chart(page, "sys-gpu-temp", "chart.lines.length") == 2
    assert _chart(page, "sys-cpu", "chart.lines.map(l => l.label)") == ["CPU", "all cores"]
    assert _chart(page, "sys-memory", "chart.lines.map(l => l.label)") == ["used", "total"]
    assert _chart(page, "sys-disk", "chart.lines.length") == 1
    assert _chart(page, "sys-network", "chart.lines.map(l => l.label)") == ["recv", "sent"]
    assert page.is_hidden('.chart[data-chart="sys-disk-io"]')  # no such series sampled

    # The stage timing on the same wall-clock axis: two top-level stages stacked.
    page.wait_for_function(
        """() => document.querySelector('.chart[data-chart="sys-timing"]')
            ?.chart?.plot?.series.length === 3"""
    )
    assert _chart(page, "sys-timing", "chart.lines.map(l => l.label)") == ["gen", "update_actor"]
    scales = page.evaluate(
        """() => ['sys-timing', 'sys-gpu-util', 'sys-network'].map((id) => {
            const x = document.querySelector(`.chart[data-chart="${id}"]`).chart.plot.scales.x;
            return [x.min, x.max];
        })"""
    )
    assert scales[0] == scales[1] == scales[2]
    # The union of both: the samples run 5 s past the last step.
    assert scales[0] == pytest.approx([T0, T0 + 5 * (2 * STEPS - 1)], abs=0.01)

    # The legend says the time and the training step of the point under the cursor.
    box = page.locator('.chart[data-chart="sys-gpu-util"] .u-over').bounding_box()
    assert box is not None
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    legend = page.text_content('.chart[data-chart="sys-gpu-util"] .legend-step') or ""
    assert " · step " in legend, legend
    _shot(page, "trainer")

    # Live: a sample appended while the page is open is drawn.
    append_system(live_server.metrics_dir / f"{JOB}_system.jsonl", _trainer_line(2 * STEPS))
    _wait_points(page, 2 * STEPS + 1)
    assert _chart(page, "sys-gpu-util", "chart.plot.data[1].at(-1)") == 5.0

    # A drag zooms every chart to the same time range, read again for that range only.
    box = page.locator('.chart[data-chart="sys-gpu-util"] .u-over').bounding_box()
    assert box is not None
    y = box["y"] + box["height"] / 2
    page.mouse.move(box["x"] + box["width"] * 0.25, y)
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.75, y, steps=5)
    page.mouse.up()
    page.wait_for_function(
        """() => {
            const util = document.querySelector('.chart[data-chart="sys-gpu-util"]').chart;
            const cpu = document.querySelector('.chart[data-chart="sys-cpu"]').chart;
            return util.points > 0 && util.points < 30
                && cpu.plot.scales.x.min === util.plot.scales.x.min;
        }"""
    )
    page.click(".system-toolbar button:has-text('Reset zoom')")
    _wait_points(page, 2 * STEPS + 1)

    # Another host: its own lines (one GPU), points and legend.
    page.select_option("#system-host", OTHER)
    page.wait_for_function(
        """() => {
            const chart = document.querySelector('.chart[data-chart="sys-gpu-util"]')?.chart;
            return chart?.plot?.series.length === 2 && chart.points === 20;
        }"""
    )
    assert _chart(page, "sys-gpu-util", "chart.lines.map(l => l.label)") == ["GPU 0"]
    legend = page.text_content('.chart[data-chart="sys-gpu-util"] .legend-step') or ""
    assert "no step yet" in legend, legend
    _shot(page, "node_2")

    # A click on the Overview tab and back: switched in place, the samples read again.
    page.evaluate("window.__same_page = 1")
    page.click('.run-tab[data-tab=""]')
    page.wait_for_selector(".run-layout:not([hidden])")
    assert page.is_hidden(".system-pane")
    page.click('.run-tab[data-tab="system"]')
    page.wait_for_selector(".system-pane:not([hidden])")
    page.wait_for_function(
        """() => document.querySelector('.chart[data-chart="sys-gpu-util"]')
            ?.chart?.points === 20"""
    )
    assert page.evaluate("window.__same_page") == 1
    assert page.input_value("#system-host") == OTHER


def test_a_job_without_system_samples_says_how_to_get_them(
    live_server: LiveServer, page: Any
) -> None:
    live_server.write_records("nosys", [make_record(step) for step in range(5)])
    live_server.write_status("nosys", "running", 4, 10)
    live_server.sync("nosys")
    page.goto(f"{live_server.url}/#/run/nosys/system")
    page.wait_for_selector("#system-empty:not([hidden])")
    text = page.text_content("#system-empty") or ""
    assert "nosys_system.jsonl" in text
    assert "system_metrics_interval" in text
    assert "training-platform sysmon nosys --output-dir DIR" in text
    assert page.is_hidden(".system-charts")
    assert page.is_hidden("#system-host")
    _shot(page, "empty")

    # The first sample, live: the empty state gives way to the charts.
    append_system(live_server.metrics_dir / "nosys_system.jsonl", system_line(T0, "solo"))
    page.wait_for_selector('.chart[data-chart="sys-memory"]:not([hidden]) canvas', timeout=20_000)
    assert page.is_hidden("#system-empty")
    assert page.is_hidden('.chart[data-chart="sys-gpu-util"]')  # a host without GPUs
