"""The run page in real headless Chromium: the header names the run (its name, the
job id beside it, its project and tags, its notes) and a "Config" section lists the
run file's config as dotted keys, searchable, with the command, git state, host and
framework below it, and never a secret (the server masks them; the page shows what
it is given). Screenshots land in test-artifacts/web/ (see conftest.py).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.callbacks.wire.test_secrets import HF, assert_no_secret, secret_argv, secret_config
from tests.web.conftest import LiveServer, make_record, module_server
from training_platform.callbacks.wire.secrets import MASK

STEPS = 5
JOB = "cfg-run"


def config_keys(page: Any) -> list[str]:
    return page.locator("#run-config-table tr[data-key]").evaluate_all(
        "(rows) => rows.map((row) => row.dataset.key)"
    )


@pytest.fixture(scope="module")
def config_server(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path
) -> Iterator[LiveServer]:
    """One server for the module: it outlives the page, whose live socket would
    otherwise fail to reconnect (a console error) once the server is gone."""
    root = tmp_path_factory.mktemp("run-config")
    with module_server(root, _sqlite_template) as server:
        run_file = {
            "job_id": JOB,
            "project": "math-rl",
            "name": "grpo baseline",
            "tags": ["grpo", "baseline"],
            "config": {
                **secret_config(),
                "hub_token": HF,
                "optimizer": {"lr": 0.001, "name": "AdamW", "betas": [0.9, 0.99]},
                "model": {"name": "Qwen2.5-0.5B", "layers": {"n": 24}},
                "data": {"path": "/data/" + "very_long_dataset_directory_name_" * 6},
            },
            "command": ["train.py", *secret_argv()],
            "git": {"commit": "1234abcd" * 5, "dirty": True},
            "host": "gpu-node-7",
            "framework": {"name": "trl", "version": "0.20.0"},
        }
        (server.metrics_dir / f"{JOB}_run.json").write_text(json.dumps(run_file))
        server.write_records(JOB, [make_record(step) for step in range(STEPS)])
        server.write_records("bare-run", [make_record(step) for step in range(STEPS)])
        server.sync(JOB)
        server.sync("bare-run")
        answer = httpx.patch(f"{server.url}/api/jobs/{JOB}",
                             json={"notes": "lr sweep, 2nd try\nsee the wiki"})  # fmt: skip
        assert answer.status_code == 200, answer.text
        yield server


def test_the_run_page_shows_the_name_tags_notes_and_a_searchable_masked_config(
    config_server: LiveServer, page: Any
) -> None:
    server = config_server
    page.goto(f"{server.url}/#/run/{JOB}")
    page.wait_for_selector("#run-config-table tr[data-key='optimizer.lr']", state="attached")
    header = page.locator(".run-header")
    assert header.locator("h1").inner_text() == "grpo baseline"
    assert page.locator("#run-job-id").inner_text() == JOB
    assert page.locator("#run-project").inner_text() == "math-rl"
    chips = page.locator("#run-tags .tag-chip")
    assert chips.evaluate_all("(c) => c.map((e) => e.textContent)") == ["grpo", "baseline"]
    assert page.locator("#run-notes").inner_text() == "lr sweep, 2nd try\nsee the wiki"

    # A large config starts closed; opened, it lists every key, dotted.
    details = page.locator("details#run-config")
    assert details.evaluate("(d) => d.open") is False
    page.locator("#run-config > summary").click()
    assert details.evaluate("(d) => d.open") is True
    keys = config_keys(page)
    assert keys == sorted(keys)
    for key in ("optimizer.lr", "optimizer.name", "optimizer.betas", "model.layers.n",
                "hub_token", "secrets.db.pw", "HF_TOKEN"):  # fmt: skip
        assert key in keys

    def value(key: str) -> str:
        cell = page.locator(f'#run-config-table tr[data-key="{key}"] td.config-value')
        return str(cell.inner_text())

    assert value("optimizer.lr") == "0.001"
    assert value("optimizer.betas") == "[0.9,0.99]"
    assert value("hub_token") == MASK
    assert value("HF_TOKEN") == MASK
    assert value("db_url") == f"postgresql://u:{MASK}@db/x"

    # The run file's other facts below the config.
    facts = page.locator("#run-facts")
    assert facts.locator('dd[data-fact="Host"]').inner_text() == "gpu-node-7"
    assert facts.locator('dd[data-fact="Framework"]').inner_text() == "trl 0.20.0"
    assert "(dirty" in facts.locator('dd[data-fact="Git commit"]').inner_text()
    command = facts.locator('dd[data-fact="Command"]').inner_text()
    assert command.startswith("train.py ") and MASK in command

    # A long value wraps inside the page instead of widening it.
    wrap = page.locator('#run-config-table tr[data-key="data.path"] td.config-value')
    assert wrap.evaluate("(td) => td.scrollWidth <= td.clientWidth + 1")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # The search narrows the rows, by key or by value, whatever the case.
    search = page.locator("#run-config-search")
    search.fill("OPTIMIZER")
    page.wait_for_function("document.querySelectorAll('#run-config-table tr').length === 3")
    assert config_keys(page) == ["optimizer.betas", "optimizer.lr", "optimizer.name"]
    assert "3 of" in page.locator("#run-config-count").inner_text()
    search.fill("qwen2.5")
    page.wait_for_function("document.querySelectorAll('#run-config-table tr').length === 1")
    assert config_keys(page) == ["model.name"]
    search.fill("no such thing")
    page.wait_for_selector("#run-config-empty:not([hidden])")
    assert config_keys(page) == []
    search.fill("opt")
    page.wait_for_function("document.querySelectorAll('#run-config-table tr').length === 3")

    # The refresh every 5 s keeps the search and the open section as they were.
    page.wait_for_timeout(5_500)
    assert details.evaluate("(d) => d.open") is True
    assert len(config_keys(page)) == 3

    # Never a secret: not in a cell, an attribute, a title or a hidden element.
    search.fill("")
    page.wait_for_function("document.querySelectorAll('#run-config-table tr').length > 30")
    assert_no_secret(page.content())
    assert_no_secret(page.locator("body").inner_text())
    assert HF not in page.content()
    page.locator("#run-config").scroll_into_view_if_needed()

    # A run without a run file: its job id as the title, and no config to show.
    page.goto(f"{server.url}/#/run/bare-run")
    page.wait_for_selector("#run-config-empty:not([hidden])", state="attached")
    assert page.locator(".run-header h1").inner_text() == "bare-run"
    assert page.locator("#run-job-id").count() == 0
    assert page.locator("#run-project").count() == 0
    assert page.locator("details#run-config").evaluate("(d) => d.open") is False
    assert page.locator("#run-config-empty").text_content() == "This run has no config."
    # Back to the configured run for the screenshot, opened and searched.
    page.goto(f"{server.url}/#/run/{JOB}")
    page.wait_for_selector("#run-config-table tr[data-key='optimizer.lr']", state="attached")
    page.locator("#run-config > summary").click()
    page.locator("#run-config-search").fill("o")
    page.wait_for_timeout(300)
