"""The demo's own host in the System tab: a real demo GRPO run with its sampler on,
its samples growing live while the page is open (what `training-platform demo` shows)."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer
from training_platform.demo.trainer import DemoConfig, run_demo

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_the_demo_shows_its_own_host_in_the_system_tab(live_server: LiveServer, page: Any) -> None:
    stop = threading.Event()
    config = DemoConfig(steps=2_000, samples=False, step_delay=0.02)
    demo = threading.Thread(
        target=run_demo,
        args=("demo-system", live_server.metrics_dir, config),
        kwargs={"stop_event": stop, "system_metrics_interval": 0.5},
    )
    demo.start()
    try:
        metrics = live_server.metrics_dir / "demo-system_metrics.jsonl"
        deadline = time.monotonic() + 60  # torch imported, the model built
        while not metrics.exists():
            assert time.monotonic() < deadline and demo.is_alive(), "the demo wrote nothing"
            time.sleep(0.05)
        live_server.sync("demo-system")
        page.goto(f"{live_server.url}/#/run/demo-system/system")
        page.wait_for_selector('.system-pane[data-tab="system"]:not([hidden])')
        count = """() => document.querySelector('.chart[data-chart="sys-cpu"]')
            ?.chart?.points ?? 0"""
        page.wait_for_function(f"() => ({count})() >= 2", timeout=30_000)
        before = page.evaluate(count)
        # Live: the sampler's next samples arrive without a reload.
        page.wait_for_function(f"() => ({count})() >= {before} + 2", timeout=30_000)
        hosts = page.eval_on_selector_all("#system-host option", "os => os.map(o => o.value)")
        assert hosts == [socket.gethostname()]
        memory = page.evaluate(
            """() => document.querySelector('.chart[data-chart="sys-memory"]')
                .chart.lines.map((line) => line.label)"""
        )
        assert memory == ["used", "total"]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "system_tab_demo.png"), full_page=True)
    finally:
        stop.set()
        demo.join(timeout=60)
