"""The jobs view's "Register a run" dialog in real headless Chromium: a run logged by
verl's file logger, registered from the dashboard, is listed and its records stored;
a directory that does not exist is refused with the server's reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.conftest import LiveServer

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_a_verl_file_run_registered_from_the_dashboard_is_ingested(
    live_server: LiveServer, page: Any, tmp_path: Path
) -> None:
    runs = tmp_path / "verl-runs"
    runs.mkdir()
    lines = [json.dumps({"step": step, "data": {"actor/pg_loss": 1.0 / step}}) for step in (1, 2)]
    (runs / "grpo-a.jsonl").write_text("\n".join(lines) + "\n")
    page.expected_console_errors.append("status of 422")  # the refusal shown below
    page.goto(live_server.url + "/")
    page.click("#jobs-register")
    page.fill("#register-job-id", "grpo-a")
    page.fill("#register-dir", str(tmp_path / "missing"))
    page.select_option("#register-format", "verl_file")
    page.click("#register-save")
    error = page.locator("#register-error")
    error.wait_for()
    page.wait_for_selector("#register-error:has-text('Not registered: 422')")
    assert "not a directory" in error.inner_text()

    page.fill("#register-dir", str(runs))
    page.click("#register-save")
    page.locator("#register-dialog").wait_for(state="hidden")
    page.wait_for_selector('tr[data-job="grpo-a"]')
    job = httpx.get(live_server.url + "/api/jobs/grpo-a", timeout=10).json()
    assert job["format"] == "verl_file" and job["metrics_dir"] == str(runs)

    def stored() -> list[int]:
        answer = httpx.get(live_server.url + "/api/monitoring/grpo-a/metrics", timeout=10)
        return [record["step"] for record in answer.json()["metrics"]]

    page.wait_for_selector('tr[data-job="grpo-a"] .stored-cell:has-text("2 records")')
    assert stored() == [1, 2]


def test_an_mlflow_run_registered_from_the_dashboard_is_ingested(
    live_server: LiveServer, page: Any, tmp_path: Path
) -> None:
    pytest.importorskip("mlflow")
    from tests.api.test_mlflow_runs import logged

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    run_id = logged(uri, range(3))
    page.goto(live_server.url + "/")
    page.click("#jobs-register")
    page.select_option("#register-format", "mlflow")
    assert not page.locator("#register-dir").is_visible()  # no directory for MLflow
    page.fill("#register-job-id", "ml-form")
    page.fill("#register-tracking-uri", uri)
    page.fill("#register-run-id", run_id)
    page.click("#register-save")
    page.locator("#register-dialog").wait_for(state="hidden")
    page.wait_for_selector('tr[data-job="ml-form"] .source-cell:has-text("MLflow")')
    page.wait_for_selector('tr[data-job="ml-form"] .stored-cell:has-text("3 records")')
    job = httpx.get(live_server.url + "/api/jobs/ml-form", timeout=10).json()
    assert (job["format"], job["source_run"], job["status"]) == ("mlflow", run_id, "completed")
