"""A real TRL GRPO run, recorded by the one-liner, browsed in the Samples panel (Chromium).

The run is `trl.GRPOTrainer` on a tiny GPT-2 (tests/callbacks/integrations/test_trl_samples.py's),
its reward functions wrapped by `record_samples`; nothing is written by hand.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.web.conftest import ARTIFACTS, LiveServer
from tests.web.test_samples_view import _rows, _wait_step

trl_samples = pytest.importorskip("tests.callbacks.integrations.test_trl_samples")

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def test_a_trl_grpo_run_shows_its_completions_and_rewards(
    live_server: LiveServer, page: Any, tmp_path: Path
) -> None:
    from training_platform.callbacks.integrations.hf import PlatformTrainerCallback
    from training_platform.callbacks.integrations.trl import record_samples

    job = "trl-grpo"
    calls = trl_samples.Calls()
    callback = PlatformTrainerCallback(job, live_server.metrics_dir, project="trl-demo")
    funcs = record_samples(callback, [calls.length_reward(), calls.format_reward()])
    prompts = ["w1 w2", "w3 w4 w5", "w6", "w7 w8 w9 w10"]
    trainer = trl_samples.make_trainer(tmp_path, funcs, prompts, callback)
    trainer.train()
    live_server.sync(job)

    samples = trl_samples.read_samples(live_server.metrics_dir / f"{job}_samples.jsonl")
    last = max(samples)
    page.goto(f"{live_server.url}/#/run/{job}")
    _wait_step(page, last)
    rows = _rows(page)
    expected = samples[last]
    assert [row["index"] for row in rows] == [str(s["index"]) for s in expected]
    assert [row["preview"] for row in rows] == [s["completion"].split("\n")[0] for s in expected]
    assert [float(row["reward"]) for row in rows] == pytest.approx(
        [s["reward"] for s in expected], abs=1e-3
    )
    # Each reward function is a component column, under the name TRL gave it.
    assert all("length_reward" in row["components"] for row in rows)
    assert {row["group"] for row in rows} == {s["group"] for s in expected}
    page.locator("#samples-panel").screenshot(path=str(ARTIFACTS / "samples_panel_trl.png"))
    job_answer = json.loads(page.evaluate(f"fetch('/api/jobs/{job}').then((r) => r.text())"))
    assert job_answer["project"] == "trl-demo" and job_answer["run"]["framework"]["name"] == "trl"
