"""A TensorBoard run in real headless Chromium: discovered under the metrics directory,
opened in the run view while its writer goes on (the new steps stream in without a
reload), and compared with a run of the platform's own callback on one chart."""

from __future__ import annotations

from typing import Any

import pytest

from tests.web.conftest import LiveServer, make_record
from tests.web.test_compare_view import legend, wait_chart
from tests.web.test_dashboard_live import _wait_step

torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def log_steps(writer: Any, steps: range) -> None:
    for step in steps:
        writer.add_scalar("actor/pg_loss", 2.0 - 0.01 * step, step)
        writer.add_scalar("critic/score/mean", 0.4 + 0.01 * step, step)
        writer.add_scalar("response_length/mean", 200.0 + step, step)
    writer.flush()


def test_a_tensorboard_run_streams_in_the_run_view_and_compares_with_ours(
    live_server: LiveServer, page: Any
) -> None:
    writer = torch_tensorboard.SummaryWriter(str(live_server.metrics_dir / "tb" / "grpo"))
    try:
        log_steps(writer, range(10))
        live_server.write_records("ours", [make_record(step) for step in range(10)])
        page.goto(f"{live_server.url}/")
        page.wait_for_selector('tr[data-job="tb.grpo"]')  # discovered, no call
        live_server.sync("tb.grpo")
        live_server.sync("ours")

        page.goto(f"{live_server.url}/#/run/tb.grpo")
        _wait_step(page, "losses", 9)
        page.wait_for_selector("#connection[data-state=live]")
        page.evaluate("() => { window.sameDocument = true; }")  # gone if the page reloads
        log_steps(writer, range(10, 13))
        _wait_step(page, "losses", 12)
        assert page.evaluate("() => window.sameDocument === true")
    finally:
        writer.close()

    page.goto(f"{live_server.url}/#/compare?jobs=tb.grpo,ours&fields=reward.mean,loss.actor_loss")
    wait_chart(page, "reward.mean", 2)
    wait_chart(page, "loss.actor_loss", 2)
    assert set(legend(page, "reward.mean")) == {"tb.grpo", "ours"}
    name = page.locator('#compare-runs tr[data-job="tb.grpo"] .run-name').inner_text()
    assert name == "tb/grpo"  # named by its path under the metrics directory
