"""The Compare view in real headless Chromium never shows a secret of a run file that
was written unmasked (by another tool, or by hand): its config-difference table shows
each secret key with its value masked. The shapes: tests/callbacks/wire/test_secrets.py.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.callbacks.wire.test_secrets import HF, assert_no_secret, secret_argv, secret_config
from tests.web.conftest import make_record, module_server
from training_platform.callbacks.wire.secrets import MASK

STEPS = 5


def test_the_config_differences_never_show_a_secret(
    tmp_path_factory: pytest.TempPathFactory, _sqlite_template: Path, page: Any
) -> None:
    root = tmp_path_factory.mktemp("compare-secrets")
    with module_server(root, _sqlite_template) as server:
        runs = {
            "sec-a": {"name": f"leaky {HF}", "config": {**secret_config(), "lr": 3e-6},
                      "command": secret_argv()},
            "sec-b": {"name": "clean", "config": {"lr": 1e-6}},
        }  # fmt: skip
        for job_id, fields in runs.items():
            path = server.metrics_dir / f"{job_id}_run.json"
            path.write_text(json.dumps({"job_id": job_id, **fields}))
            server.write_records(job_id, [make_record(step) for step in range(STEPS)])
            server.sync(job_id)

        page.goto(f"{server.url}/#/compare?jobs=sec-a,sec-b&fields=reward.mean")
        page.wait_for_selector('#config-diff tr[data-key="lr"]')
        page.wait_for_selector('#compare-runs tr[data-job="sec-a"] .run-name')

        def shown(key: str) -> list[str]:
            cells = page.locator(f'#config-diff tr[data-key="{key}"] td.config-value')
            return [cells.nth(i).inner_text() for i in range(cells.count())]

        assert shown("HF_TOKEN") == [MASK, "—"]
        assert shown("db_url") == [f"postgresql://u:{MASK}@db/x", "—"]
        assert shown("secrets.db.pw") == [MASK, "—"]
        assert shown("notify") == [f"https://hooks.slack.com/{MASK}", "—"]
        assert page.locator('#compare-runs tr[data-job="sec-a"] .run-name').inner_text() == (
            f"leaky {MASK}"
        )
        # Nowhere on the page: not in a cell, a title, an attribute or a hidden element.
        assert_no_secret(page.content())
        assert_no_secret(page.locator("body").inner_text())
        # Leave the page before this test's own server stops: the view's live
        # sockets would otherwise retry against a closed port, and a browser
        # console error fails the test at teardown.
        page.goto("about:blank")
