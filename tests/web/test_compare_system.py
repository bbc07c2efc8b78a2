"""The Compare view's System group in real headless Chromium: runs with different GPU
counts, a System series picked from the picker, one line per run that has samples.

One server for the module (SQLite; tests/api/test_compare_system.py covers both
databases and the values). Screenshots land in test-artifacts/web/.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.system_support import append_system, gpu, system_line
from tests.web.conftest import ARTIFACTS, LiveServer, module_server
from tests.web.test_compare_view import chart_data, legend, open_compare, wait_chart
from training_platform.callbacks.wire.records import build_record

STEPS = 20
KEY = "system.gpu_utilization"


@pytest.fixture(scope="module")
def system_server(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[LiveServer]:
    """`sys-a`: one host, 2 GPUs; `sys-b`: two hosts, 1 + 3 GPUs; `sys-c`: no samples."""
    root = tmp_path_factory.mktemp("compare-system")
    start = time.time() - 600
    with module_server(root, _sqlite_template) as server:
        for job_id in ("sys-a", "sys-b", "sys-c"):
            server.write_records(
                job_id,
                [
                    build_record(s, {"reward": {"mean": 0.1 * s}}, timestamp=start + 10 * s)
                    for s in range(STEPS)
                ],
            )
        metrics_dir = server.metrics_dir
        append_system(
            metrics_dir / "sys-a_system.jsonl",
            *(
                system_line(start + 10 * s, "node-a", s, gpus=[gpu(0, 20.0 + s), gpu(1, 40.0 + s)])
                for s in range(STEPS)
            ),
        )
        append_system(
            metrics_dir / "sys-b_system.jsonl",
            *(system_line(start + 10 * s, "h1", s, gpus=[gpu(0, 90.0)]) for s in range(STEPS)),
        )
        append_system(
            metrics_dir / "sys-b_system.h2.jsonl",
            *(
                system_line(start + 10 * s, "h2", gpus=[gpu(0, 70.0), gpu(1, 70.0), gpu(2, 70.0)])
                for s in range(STEPS)
            ),
        )
        for job_id in ("sys-a", "sys-b", "sys-c"):
            server.sync(job_id)
        yield server


def test_a_system_series_is_picked_and_drawn_one_line_per_run(
    system_server: LiveServer, page: Any
) -> None:
    open_compare(page, system_server, "jobs=sys-a,sys-b,sys-c&fields=reward.mean")
    wait_chart(page, "reward.mean", 3)
    # The picker offers a System group (the runs have samples); no System chart yet.
    groups = page.locator("#compare-metric optgroup").evaluate_all(
        "(groups) => groups.map((g) => [g.label, [...g.children].map((o) => o.value)])"
    )
    system = dict(groups)["System"]
    assert KEY in system and "system.gpu_power_w" in system and "system.cpu_percent" in system

    page.select_option("#compare-metric", KEY)
    page.click("#compare-add")
    wait_chart(page, KEY, 2)
    assert set(legend(page, KEY)) == {"sys-a", "sys-b"}
    note = page.locator(f'.cmp-chart[data-key="{KEY}"] .chart-note').inner_text()
    assert "Not logged by sys-c" in note
    assert f"fields=reward.mean,{KEY}" in page.evaluate("() => location.hash")
    data = chart_data(page, KEY)
    assert data[0] == list(range(STEPS))  # x: the samples' steps
    lines = data[1 + 2 * 3 :]  # after each run's min and max: the lines
    assert lines[0] == [30.0 + s for s in range(STEPS)]  # mean of 20+s and 40+s
    assert lines[1] == [75.0] * STEPS  # (90 + 3 x 70) / 4 GPUs
    assert all(value is None for value in lines[2])
    page.screenshot(path=str(ARTIFACTS / "compare_system.png"), full_page=True)

    # The time axis: the same points, at seconds since each run's first record.
    page.select_option("#compare-x", "time")
    page.wait_for_function(
        """(key) => { const el = document.querySelector(`.cmp-chart[data-key="${key}"]`);
            const plot = el && el.chart.plot;
            return plot && plot.data[0].length && plot.data[0][1] === 10; }""",
        arg=KEY,
    )
    assert chart_data(page, KEY)[0] == pytest.approx([10.0 * s for s in range(STEPS)])

    # Log scale and CSV work as on any Compare chart.
    chart = page.locator(f'.cmp-chart[data-key="{KEY}"]')
    chart.locator(".chart-log").click()
    with page.expect_download() as download:
        chart.locator(".chart-csv").click()
    text = Path(download.value.path()).read_text()
    assert text.splitlines()[0].startswith("seconds_since_start,sys-a")
    page.screenshot(path=str(ARTIFACTS / "compare_system_time_log.png"), full_page=True)

    # From a link, smoothed: the System chart is drawn at once, its values raw.
    open_compare(page, system_server, f"jobs=sys-a,sys-b&smoothing=0.6&fields={KEY}")
    wait_chart(page, KEY, 2)
    assert legend(page, KEY) == {"sys-a": "49", "sys-b": "75"}
