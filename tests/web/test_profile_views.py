"""The run's Timing, Memory and Artifacts tabs in headless Chromium, on the demo's profiled run.

A real `demo-train --profile` run (shared with the report tests) is served
locally and over SSH; each tab is reached by URL, checked, and photographed
into test-artifacts/web/.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.fixtures_sshd import SSHD
from tests.profile_report.demo_profile import DEMO_STAGES, JOB, copy_demo_run
from tests.web.conftest import ARTIFACTS, LiveServer, serve_in_thread
from training_platform.settings import Settings

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def _open_tab(page: Any, server: LiveServer, tab: str, job_id: str = JOB) -> None:
    page.goto(f"{server.url}/#/run/{job_id}/{tab}")
    page.wait_for_selector(f'.run-tab.active[data-tab="{tab}"]')
    page.wait_for_selector(f'.profile-pane[data-tab="{tab}"]:not([hidden])')


def _shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"profile_views_{name}.png"), full_page=True)


@pytest.fixture
def demo_server(live_server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> LiveServer:
    copy_demo_run(tmp_path_factory, live_server.metrics_dir)
    live_server.sync(JOB)
    return live_server


def _check_timing(page: Any) -> None:
    page.wait_for_selector('#profile-stage-table tr[data-stage="rollout"]')
    stages = page.eval_on_selector_all(
        "#profile-stage-table tr[data-stage]", "rows => rows.map(r => r.dataset.stage)"
    )
    assert set(stages) >= DEMO_STAGES
    # Parents first; the nested stages come right after theirs.
    assert stages.index("update_actor/optimizer") > stages.index("update_actor")
    page.wait_for_function(
        """() => document.querySelector('.chart[data-chart="profile-timing"]')
            ?.chart?.plot?.series.length === 6"""
    )  # x + the five top-level stages stacked (nested ones are inside their parent)
    slow = page.eval_on_selector_all("#profile-slowest tr[data-step]", "rows => rows.length")
    assert slow == 10


def test_timing_tab_shows_stacked_stages_the_stage_table_and_the_slowest_steps(
    demo_server: LiveServer, page: Any
) -> None:
    _open_tab(page, demo_server, "timing")
    _check_timing(page)
    assert page.is_hidden(".run-layout")  # the overview's charts are another tab
    share = page.text_content('#profile-stage-table tr[data-stage="rollout"] td.share') or ""
    assert share.endswith("%") and 10 < float(share.split()[0]) < 90
    _shot(page, "timing")
    # A click on a tab switches in place: the Overview is back without a reload.
    page.evaluate("window.__same_page = 1")
    page.click('.run-tab[data-tab=""]')
    page.wait_for_selector(".run-layout:not([hidden])")
    assert page.evaluate("window.__same_page") == 1


def test_memory_tab_draws_rss_with_baseline_and_trend_and_the_leak_verdict(
    demo_server: LiveServer, page: Any
) -> None:
    _open_tab(page, demo_server, "memory")
    page.wait_for_selector("#leak-verdict")
    assert page.text_content("#leak-verdict") in ("Leak detector: no leak", "Leak detector: leak")
    page.wait_for_function(
        """() => {
            const plot = document.querySelector('.chart[data-chart="profile-rss"]')?.chart?.plot;
            return plot && plot.series.map((s) => s.label).join('|').includes('baseline');
        }"""
    )
    labels = page.evaluate(
        """() => document.querySelector('.chart[data-chart="profile-rss"]')
            .chart.lines.map((l) => l.label)"""
    )
    assert labels[0] == "RSS" and "baseline" in labels and "trend" in labels
    assert page.is_hidden('.chart[data-chart="profile-gpu-memory"]')  # a CPU run: folded away
    assert "baseline" in (page.text_content("#profile-memory-facts") or "")
    _shot(page, "memory")


def test_artifacts_tab_renders_the_op_table_sortable_and_filterable_and_the_report(
    demo_server: LiveServer, page: Any
) -> None:
    _open_tab(page, demo_server, "artifacts")
    page.wait_for_selector(".op-table tbody tr")
    section = '.profile-step[data-step="4"]'
    link = page.get_attribute(f"{section} .trace-download a.artifact-link", "href")
    assert link == f"/api/jobs/{JOB}/artifacts/step_4/trace.json"
    assert "Perfetto" in (page.text_content(f"{section} .trace-download") or "")
    assert httpx.get(demo_server.url + link).status_code == 200

    def column(name: str) -> list[str]:
        index = page.eval_on_selector_all(
            f"{section} .op-table th", f"ths => ths.findIndex(th => th.dataset.column === '{name}')"
        )
        return page.eval_on_selector_all(
            f"{section} .op-table tbody tr",
            f"rows => rows.map(r => r.children[{index}].textContent)",
        )

    self_times = [float(v.replace(",", "")) for v in column("self_time_ms")]
    assert self_times == sorted(self_times, reverse=True)  # heaviest first
    page.click(f'{section} .op-table th[data-column="calls"]')
    calls = [int(v.replace(",", "")) for v in column("calls")]
    assert calls == sorted(calls, reverse=True)
    page.click(f'{section} .op-table th[data-column="calls"]')
    calls = [int(v.replace(",", "")) for v in column("calls")]
    assert calls == sorted(calls)
    page.fill(f"{section} .op-filter", "aten::mm")
    page.wait_for_function(
        """(s) => [...document.querySelectorAll(s + ' .op-table tbody td.op')]
            .every((td) => td.textContent.includes('aten::mm'))""",
        arg=section,
    )
    assert column("op_name")
    page.wait_for_selector("#profile-checks")
    assert page.text_content("#profile-checks") == "Checks: the profile's files are sound."
    assert page.eval_on_selector_all(".recommendation", "items => items.length") >= 1
    # The evidence is a small key / value table, never JSON.
    rows = page.eval_on_selector_all(
        ".recommendation .evidence tr",
        "rows => rows.map((r) => [r.cells[0].textContent, r.cells[1].textContent])",
    )
    assert rows, "no evidence rows"
    for key, text in rows:
        assert key and text and not any(c in key + text for c in '{}"'), rows
    page.locator(".recommendations").screenshot(path=str(ARTIFACTS / "profile_recommendations.png"))
    _shot(page, "artifacts")


@pytest.fixture
def ssh_server(
    settings: Settings, metrics_dir: Path, sshd: SSHD, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LiveServer]:
    trusting = settings.model_copy(
        update={
            "ssh_key_dir": sshd.key_dir,
            "ssh_known_hosts": sshd.known_hosts_path,
            "ssh_timeout": 5.0,
            "poll_interval": 0.25,
        }
    )
    copy_demo_run(tmp_path_factory, sshd.remote_dir)
    with serve_in_thread(trusting, metrics_dir) as server:
        response = httpx.post(f"{server.url}/api/jobs", json=sshd.job_body(JOB), timeout=30)
        assert response.status_code == 201, response.text
        server.sync(JOB)
        yield server


def test_an_ssh_jobs_profile_shows_in_the_same_views(ssh_server: LiveServer, page: Any) -> None:
    # The server is asked for first: the page closes before it stops.
    _open_tab(page, ssh_server, "timing")
    _check_timing(page)
    _open_tab(page, ssh_server, "artifacts")
    page.wait_for_selector('.profile-step[data-step="4"] .op-table tbody tr')
    page.wait_for_selector(".recommendation")
    _shot(page, "ssh_artifacts")
