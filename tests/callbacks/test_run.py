from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.callbacks.helpers import read_records, read_status
from training_platform.callbacks import Callback, StopTraining, platform_run
from training_platform.callbacks.base import Metrics


def test_a_plain_loop_writes_one_line_per_step_and_completes(tmp_path: Path) -> None:
    with platform_run("loop", tmp_path, total_steps=4) as run:
        for step in range(4):
            run.log(step, {"loss": 1.0 / (step + 1), "reward": 0.1 * step})
    assert not run.stopped
    records = read_records(tmp_path / "loop_metrics.jsonl")
    assert [r["loss"]["total_loss"] for r in records] == [1.0, 0.5, 1 / 3, 0.25]
    status = read_status(tmp_path / "loop_status.json")
    # steps 0..3 done: a completed run shows 4 / 4
    assert (status["status"], status["current_step"], status["total_steps"]) == ("completed", 4, 4)


def test_an_exception_in_the_loop_marks_the_run_failed_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(ZeroDivisionError), platform_run("loop", tmp_path) as run:
        run.log(0, {"loss": 1.0})
        _ = 1 / 0
    status = read_status(tmp_path / "loop_status.json")
    assert status["status"] == "failed"
    assert status["error"] == "ZeroDivisionError: division by zero"


def test_ctrl_c_marks_the_run_stopped_and_propagates(tmp_path: Path) -> None:
    with pytest.raises(KeyboardInterrupt), platform_run("loop", tmp_path) as run:
        run.log(0, {"loss": 1.0})
        raise KeyboardInterrupt
    assert read_status(tmp_path / "loop_status.json")["status"] == "stopped"


def test_stop_on_anomaly_stops_a_real_torch_loop_cleanly(tmp_path: Path) -> None:
    # Gradient descent on a quadratic with a learning rate far past 2/L: the loss
    # grows geometrically until it overflows to inf and then NaN.
    torch.manual_seed(0)
    weight = torch.randn(8, requires_grad=True)
    optimizer = torch.optim.SGD([weight], lr=3.0)
    steps_run = 0
    with platform_run("diverges", tmp_path, total_steps=1000, stop_on_anomaly=True) as run:
        for step in range(1000):
            loss = (weight**2).sum() * 1e30
            optimizer.zero_grad()
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_([weight], float("inf"))
            optimizer.step()
            steps_run = step + 1
            run.log(step, {"loss": loss.detach(), "grad_norm": grad_norm})
    assert run.stopped
    assert run.stop_reason is not None and run.stop_reason.startswith("nan_inf")
    assert steps_run < 20
    records = read_records(tmp_path / "diverges_metrics.jsonl")
    assert len(records) == steps_run  # the stopping step is on disk too
    assert records[-1]["anomalies"][0]["type"] == "nan_inf"
    status = read_status(tmp_path / "diverges_status.json")
    assert status["status"] == "stopped"
    assert status["anomaly_reason"] == run.stop_reason


def test_a_stop_raised_by_another_callback_stops_the_run(tmp_path: Path) -> None:
    class Budget(Callback):
        def on_step_end(self, step: int, metrics: Metrics | None = None) -> None:
            if step == 2:
                raise StopTraining("budget spent")

    with platform_run("loop", tmp_path, callbacks=[Budget()]) as run:
        for step in range(10):
            run.log(step, {"loss": 1.0})
    assert run.stop_reason == "budget spent"
    status = read_status(tmp_path / "loop_status.json")
    assert status["status"] == "stopped"
    assert status["error"] == "StopTraining: budget spent"
    assert len(read_records(tmp_path / "loop_metrics.jsonl")) == 3


class StepClock:
    def __init__(self) -> None:
        self.begun: list[int] = []

    def on_step_begin(self, step: int) -> None:
        self.begun.append(step)

    def on_step_end(self, step: int) -> Mapping[str, Any]:
        return {"timing": {"step": 0.25}}


def test_a_bracketed_step_gathers_logs_and_contributors_into_one_line(tmp_path: Path) -> None:
    clock = StepClock()
    with platform_run("loop", tmp_path, contributors=[clock]) as run:
        for step in range(3):
            with run.step(step):
                run.log(step, {"critic/score/mean": 0.5})
                run.log(step, {"actor/pg_loss": 0.1})
            run.evaluate(step, {"eval_reward": 0.7})  # late: rewrites the step
            run.save(step, tmp_path / f"ckpt-{step}")
    assert clock.begun == [0, 1, 2]
    records = read_records(tmp_path / "loop_metrics.jsonl")
    assert [r["step"] for r in records] == [0, 0, 1, 1, 2, 2]
    newest = records[-1]
    assert newest["reward"] == {"mean": 0.5}
    assert newest["loss"] == {"actor_loss": 0.1}
    assert newest["timing"] == {"step": 0.25}
    assert newest["extra"] == {"eval_reward": 0.7}
    assert run.job_id == "loop"
