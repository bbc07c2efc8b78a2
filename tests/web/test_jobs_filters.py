"""The jobs list in real headless Chromium: runs grouped by project, filtered by text,
status, health and tag (all in the URL), picked for a comparison (at most 20), and
named, tagged and annotated from the list.

One server and one set of tiny runs for the module (SQLite). Console errors fail a
test; screenshots land in test-artifacts/web/ (see conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.web.conftest import ARTIFACTS, LiveServer, make_record, module_server


def write_run_file(metrics_dir: Path, job_id: str, **fields: Any) -> None:
    (metrics_dir / f"{job_id}_run.json").write_text(json.dumps({"job_id": job_id, **fields}))


def critical_record(step: int) -> dict[str, Any]:
    record = make_record(step)
    record["anomalies"] = [
        {"type": "nan_loss", "severity": "critical", "message": "loss.actor_loss is NaN"}
    ]
    return record


@pytest.fixture(scope="module")
def jobs_server(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[LiveServer]:
    root = tmp_path_factory.mktemp("jobs-filters")
    with module_server(root, _sqlite_template) as server:
        metrics_dir = server.metrics_dir
        write_run_file(metrics_dir, "grpo-a", project="math", name="baseline",
                       tags=["grpo", "baseline"])  # fmt: skip
        write_run_file(metrics_dir, "grpo-b", project="math", tags=["grpo"])
        write_run_file(metrics_dir, "ppo-c", project="code", tags=["ppo"])
        for job_id in ("grpo-a", "grpo-b", "loose-d"):
            server.write_records(job_id, [make_record(step) for step in range(3)])
        server.write_records("ppo-c", [make_record(0), critical_record(1)])
        server.write_status("grpo-a", "running", 2, 10)
        server.write_status("grpo-b", "completed", 2, 3)
        for job_id in ("grpo-a", "grpo-b", "ppo-c", "loose-d"):
            server.sync(job_id)
        yield server


def listed(page: Any) -> list[str]:
    return page.locator("#jobs-body tr[data-job]").evaluate_all(
        "(rows) => rows.map((row) => row.dataset.job)"
    )


def wait_listed(page: Any, jobs: set[str]) -> None:
    """Until the list shows exactly `jobs` (it refreshes itself)."""
    page.wait_for_function(
        """(jobs) => {
            const shown = [...document.querySelectorAll("#jobs-body tr[data-job]")]
                .map((row) => row.dataset.job).sort();
            return JSON.stringify(shown) === JSON.stringify(jobs);
        }""",
        arg=sorted(jobs),
    )


def test_runs_are_grouped_by_project_and_filtered_from_the_url(
    jobs_server: LiveServer, page: Any
) -> None:
    page.goto(f"{jobs_server.url}/#/")
    wait_listed(page, {"grpo-a", "grpo-b", "ppo-c", "loose-d"})
    groups = page.locator("#jobs-body tr.project-row .project-name").all_inner_texts()
    assert groups == ["code", "math", "no project"]
    # Rows follow their project's heading; a run is shown by its name, else its id.
    order = page.locator("#jobs-body tr").evaluate_all(
        "(rows) => rows.map((row) => row.dataset.job || `[${row.dataset.project}]`)"
    )
    assert order.index("[math]") < order.index("grpo-a") < order.index("[]")
    assert page.locator('tr[data-job="grpo-a"] a.job-link').inner_text() == "baseline"
    assert page.locator('tr[data-job="grpo-b"] a.job-link').inner_text() == "grpo-b"
    page.screenshot(path=str(ARTIFACTS / "jobs_grouped.png"), full_page=True)

    # A tag chip filters by that tag; the URL says so.
    page.click('tr[data-job="grpo-a"] .tag-chip[data-tag="baseline"]')
    wait_listed(page, {"grpo-a"})
    assert "tag=baseline" in page.evaluate("() => location.hash")
    assert page.locator("#jobs-tags").input_value() == "baseline"
    page.click("#jobs-clear")
    wait_listed(page, {"grpo-a", "grpo-b", "ppo-c", "loose-d"})

    page.check('.status-filter input[value="completed"]')
    wait_listed(page, {"grpo-b"})
    page.uncheck('.status-filter input[value="completed"]')
    page.select_option("#jobs-health", "critical")
    wait_listed(page, {"ppo-c"})
    page.select_option("#jobs-health", "")
    page.fill("#jobs-q", "GRPO")  # id or name, any case
    wait_listed(page, {"grpo-a", "grpo-b"})
    page.click('tr.project-row[data-project="math"] .project-only')
    page.wait_for_function("() => location.hash.includes('project=math')")
    wait_listed(page, {"grpo-a", "grpo-b"})
    page.fill("#jobs-q", "base")  # the name "baseline"
    wait_listed(page, {"grpo-a"})

    # The filtered list is a link: opened afresh, the same filters and rows.
    hash_ = page.evaluate("() => location.hash")
    assert "q=base" in hash_ and "project=math" in hash_
    page.goto("about:blank")
    page.goto(f"{jobs_server.url}/{hash_}")
    wait_listed(page, {"grpo-a"})
    assert page.locator("#jobs-q").input_value() == "base"
    assert "math" in page.locator("#jobs-project").inner_text()
    page.screenshot(path=str(ARTIFACTS / "jobs_filtered.png"), full_page=True)


def test_picked_runs_make_a_comparison_link_and_stop_at_20(
    jobs_server: LiveServer, page: Any
) -> None:
    page.goto(f"{jobs_server.url}/#/")
    wait_listed(page, {"grpo-a", "grpo-b", "ppo-c", "loose-d"})
    page.check('tr[data-job="grpo-a"] input.select-job')
    page.check('tr[data-job="ppo-c"] input.select-job')
    page.wait_for_function("() => location.hash.includes('sel=grpo-a,ppo-c')")
    assert page.locator("#jobs-compare").inner_text() == "Compare 2 runs"

    page.click("#jobs-compare")
    page.wait_for_selector('#compare-runs tr[data-job="ppo-c"]')
    assert (
        page.locator('#compare-runs tr[data-job="ppo-c"] .health-badge').inner_text() == "critical"
    )
    # Back: the list, with the same runs still ticked.
    page.go_back()
    page.wait_for_selector('tr[data-job="grpo-a"] input.select-job:checked')
    assert page.locator("input.select-job:checked").count() == 2

    # Twenty already picked (not all in this list): a 21st is refused, and why is said.
    ghosts = ",".join(f"ghost-{i}" for i in range(20))
    page.goto(f"{jobs_server.url}/#/?sel={ghosts}")
    wait_listed(page, {"grpo-a", "grpo-b", "ppo-c", "loose-d"})
    assert "20 / 20 selected" in page.locator("#jobs-selected-count").inner_text()
    page.click('tr[data-job="grpo-b"] input.select-job')
    note = page.locator("#jobs-select-note")
    note.wait_for()
    assert "At most 20 runs" in note.inner_text()
    assert not page.locator('tr[data-job="grpo-b"] input.select-job').is_checked()
    assert "grpo-b" not in page.evaluate("() => location.hash")
    page.screenshot(path=str(ARTIFACTS / "jobs_selection_full.png"))


def test_a_runs_name_tags_and_notes_are_set_from_the_list(
    jobs_server: LiveServer, page: Any
) -> None:
    page.goto(f"{jobs_server.url}/#/")
    page.click('tr[data-job="loose-d"] button.edit-job')
    dialog = page.locator("#meta-dialog")
    assert dialog.is_visible()
    page.fill("#meta-name", "my loose run")
    page.fill("#meta-tags", "sweep, lr, sweep")
    page.fill("#meta-notes", "reward hacking from step 2")
    page.screenshot(path=str(ARTIFACTS / "jobs_edit_dialog.png"))
    page.click("#meta-save")
    dialog.wait_for(state="hidden")
    page.wait_for_function(
        """() => document.querySelector('tr[data-job="loose-d"] a.job-link')
            .textContent === "my loose run" """
    )
    assert page.locator('tr[data-job="loose-d"] .tag-chip').all_inner_texts() == ["sweep", "lr"]
    assert "reward hacking" in page.locator('tr[data-job="loose-d"] .job-notes').inner_text()
    job = httpx.get(f"{jobs_server.url}/api/jobs/loose-d", timeout=10).json()
    assert (job["name"], job["tags"], job["notes"]) == (
        "my loose run",
        ["sweep", "lr"],
        "reward hacking from step 2",
    )

    # An emptied name is the run file's again (none here: the job id).
    page.click('tr[data-job="loose-d"] button.edit-job')
    page.fill("#meta-name", "")
    page.click("#meta-save")
    dialog.wait_for(state="hidden")
    page.wait_for_function(
        """() => document.querySelector('tr[data-job="loose-d"] a.job-link')
            .textContent === "loose-d" """
    )
    assert httpx.get(f"{jobs_server.url}/api/jobs/loose-d", timeout=10).json()["name"] is None
