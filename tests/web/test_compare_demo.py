"""Two real demo GRPO runs with different learning rates, compared in Chromium: named by
their run files, their config diff showing the learning rate, one of them still live.

What `training-platform demo --lr 2e-3 --lr 5e-4` gives a user, with shorter runs.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer
from tests.web.test_compare_view import wait_chart
from training_platform.demo.trainer import DemoConfig, run_demo

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_two_demo_runs_compare_with_their_learning_rates(
    live_server: LiveServer, page: Any
) -> None:
    directory = live_server.metrics_dir
    run_demo("demo-lr2e-3", directory, DemoConfig(steps=12, samples=False, grpo={"lr": 2e-3}))
    stop = threading.Event()
    slow = DemoConfig(steps=400, samples=False, step_delay=0.05, grpo={"lr": 5e-4})
    live = threading.Thread(target=run_demo, args=("demo-lr5e-4", directory, slow),
                            kwargs={"stop_event": stop})  # fmt: skip
    live.start()
    try:
        live_server.sync("demo-lr2e-3")
        page.goto(
            f"{live_server.url}/#/compare?jobs=demo-lr2e-3,demo-lr5e-4&fields=loss.actor_loss"
        )
        wait_chart(page, "loss.actor_loss", 2)
        names = page.locator("#compare-runs .run-name").all_inner_texts()
        assert names == ["GRPO lr 0.002", "GRPO lr 0.0005"]
        page.wait_for_selector('#config-diff tr[data-key="grpo.lr"]')
        cells = page.locator('#config-diff tr[data-key="grpo.lr"] td.config-value')
        assert cells.all_inner_texts() == ["0.002", "0.0005"]
        keys = page.evaluate(
            "() => [...document.querySelectorAll('#config-diff tr[data-key]')]"
            ".map((row) => row.dataset.key).sort()"
        )
        assert keys == ["demo.step_delay", "demo.steps", "grpo.lr"]  # what was set apart
        # The running one keeps drawing: its last x grows without a reload.
        last_x = """() => { const d = document.querySelector(
            '.cmp-chart[data-key="loss.actor_loss"]').chart.plot.data[0];
            return d[d.length - 1]; }"""
        before = page.evaluate(last_x)
        page.wait_for_function(f"() => ({last_x})() > {before} + 5", timeout=30_000)
        page.screenshot(path=str(ARTIFACTS / "compare_demo_runs.png"), full_page=True)
    finally:
        stop.set()
        live.join(timeout=60)
