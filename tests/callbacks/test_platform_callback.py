from __future__ import annotations

import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from tests.callbacks.helpers import read_records, read_status
from training_platform.callbacks import PlatformCallback, StopTraining
from training_platform.errors import InvalidJobIdError, MetricsDirError

STATUS_KEYS = {
    "job_id", "status", "current_step", "total_steps", "anomaly_detected",
    "anomaly_reason", "started_at", "updated_at",
}  # fmt: skip


def healthy(step: int) -> dict[str, Any]:
    return {
        "actor/pg_loss": 0.1,
        "critic/score/mean": 0.5,
        "actor/kl_loss": 0.01,
        "actor/grad_norm": 1.0 + 0.01 * (step % 3),
        "timing_s/gen": 1.5,
        "response_length/mean": 300.0,
    }


def run_steps(callback: PlatformCallback, steps: range, total: int | None = None) -> None:
    callback.on_train_begin(total)
    for step in steps:
        callback.on_step_begin(step)
        callback.on_step_end(step, healthy(step))
    callback.on_train_end()


def test_each_step_is_one_line_that_validates_against_the_contract(tmp_path: Path) -> None:
    callback = PlatformCallback("run-1", tmp_path)
    run_steps(callback, range(5))
    records = read_records(tmp_path / "run-1_metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4]
    first = records[0]
    assert isinstance(first["timestamp"], float)
    assert first["loss"] == {"actor_loss": 0.1}
    assert first["reward"] == {"mean": 0.5}
    assert first["kl"] == {"mean": 0.01}
    assert first["gradient"] == {"actor_norm": 1.0}
    assert first["timing"] == {"gen": 1.5}
    assert first["extra"] == {"response_length/mean": 300.0}
    assert "anomalies" not in first


def test_the_status_goes_pending_running_completed(tmp_path: Path) -> None:
    status_path = tmp_path / "job_status.json"
    callback = PlatformCallback("job", tmp_path)
    pending = read_status(status_path)
    assert pending["status"] == "pending"
    assert pending.keys() >= STATUS_KEYS
    callback.on_train_begin(total_steps=3)
    callback.flush()
    running = read_status(status_path)
    assert running["status"] == "running"
    assert running["total_steps"] == 3
    for step in range(3):
        callback.on_step_end(step, healthy(step))
    callback.on_train_end()
    done = read_status(status_path)
    assert done["status"] == "completed"
    assert done["current_step"] == 3  # steps 0, 1, 2 done: a completed run shows 3 / 3
    assert done["anomaly_detected"] is False
    assert done["anomaly_reason"] is None
    assert done["updated_at"] >= done["started_at"] == running["started_at"]


def test_on_exception_marks_the_run_failed_with_the_reason(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path)
    callback.on_train_begin()
    callback.on_step_end(0, healthy(0))
    callback.on_exception(RuntimeError("CUDA out of memory"))
    callback.on_train_end()
    status = read_status(tmp_path / "job_status.json")
    assert status["status"] == "failed"
    assert status["error"] == "RuntimeError: CUDA out of memory"
    assert len(read_records(tmp_path / "job_metrics.jsonl")) == 1


def test_a_resumed_run_appends_to_the_file_and_never_truncates_it(tmp_path: Path) -> None:
    run_steps(PlatformCallback("job", tmp_path), range(0, 10))
    run_steps(PlatformCallback("job", tmp_path), range(5, 15))  # resumed from step 5
    steps = [r["step"] for r in read_records(tmp_path / "job_metrics.jsonl")]
    assert steps == [*range(0, 10), *range(5, 15)]


def test_a_partial_line_left_by_a_crash_is_ended_before_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "job_metrics.jsonl"
    path.write_bytes(b'{"step": 0, "timestamp": 1.0}\n{"step": 1, "timest')
    run_steps(PlatformCallback("job", tmp_path), range(1, 3))
    lines = path.read_bytes().split(b"\n")
    assert lines[1] == b'{"step": 1, "timest'  # left alone, on its own line
    assert [r["step"] for r in read_records_from(lines[2:-1])] == [1, 2]


def read_records_from(lines: list[bytes]) -> list[dict[str, Any]]:
    from training_platform.callbacks.wire.lines import decode_line

    return [decode_line(line) for line in lines]


def test_numpy_and_torch_values_are_written_as_plain_numbers(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path)
    loss = torch.tensor(1.5)
    callback.on_step_end(
        0,
        {
            "loss": loss,
            "grad_norm": torch.tensor(2.0, requires_grad=True) * 1.0,
            "kl": np.float32(0.25),
            "perf/total_num_tokens": np.int64(4096),
            "reward": {"mean": np.float64(0.5), "max": torch.tensor(0.9, dtype=torch.float64)},
            "nan_metric": np.float64("nan"),
            "inf_metric": torch.tensor(float("inf")),
        },
    )
    loss.add_(100.0)  # the trainer reuses its tensors: the written value is the old one
    callback.on_train_end()
    raw = (tmp_path / "job_metrics.jsonl").read_bytes()
    assert b"NaN" in raw and b"Infinity" in raw
    (record,) = read_records(tmp_path / "job_metrics.jsonl")
    assert record["loss"] == {"total_loss": 1.5}
    assert record["gradient"] == {"actor_norm": 2.0}
    assert record["kl"] == {"mean": 0.25}
    assert record["reward"] == {"mean": 0.5, "max": 0.9}
    assert record["extra"]["perf/total_num_tokens"] == 4096
    assert math.isnan(record["extra"]["nan_metric"])
    assert record["extra"]["inf_metric"] == math.inf
    assert [a["type"] for a in record["anomalies"]] == ["nan_inf"]


@pytest.mark.parametrize("job_id", ["", "../etc/passwd", "a b", "-starts-with-dash", "x" * 129])
def test_an_invalid_job_id_is_refused_with_a_clear_error(tmp_path: Path, job_id: str) -> None:
    with pytest.raises(InvalidJobIdError, match="A-Z a-z 0-9"):
        PlatformCallback(job_id, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_output_dir_comes_from_the_environment_then_the_user_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PLATFORM_METRICS_DIR", str(tmp_path / "from-env"))
    assert PlatformCallback("a").status_path == tmp_path / "from-env" / "a_status.json"
    monkeypatch.delenv("PLATFORM_METRICS_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path / "from-env")  # the working directory plays no part
    callback = PlatformCallback("b")
    if os.name == "posix" and os.uname().sysname != "Darwin":
        assert callback.output_dir == tmp_path / "data" / "training-platform" / "metrics"
    assert (callback.output_dir / "b_status.json").exists()  # created, parents and all
    assert callback.output_dir.is_absolute()


def test_an_output_dir_that_cannot_be_created_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("a file, not a directory")
    with pytest.raises(MetricsDirError, match=r"taken.*PLATFORM_METRICS_DIR"):
        PlatformCallback("a", tmp_path / "taken")
    with pytest.raises(MetricsDirError, match="cannot be created"):
        PlatformCallback("b", tmp_path / "taken" / "metrics")


def test_only_the_rank_zero_process_writes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "3")
    run_steps(PlatformCallback("job", tmp_path), range(3))
    assert list(tmp_path.iterdir()) == []


class Timing:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, int]] = []
        self.fail = fail

    def on_step_begin(self, step: int) -> None:
        self.calls.append(("begin", step))
        if self.fail:
            raise RuntimeError("profiler broke")

    def on_step_end(self, step: int) -> Mapping[str, Any]:
        self.calls.append(("end", step))
        if self.fail:
            raise RuntimeError("profiler broke")
        return {
            "timing": {"rollout": 0.5},
            "performance": {"step_time": 0.75},
            "memory/rss_gb": 1.25,
            "anomalies": [{"type": "memory_leak", "severity": "warning", "message": "grows"}],
        }


def test_contributor_metrics_and_anomalies_land_in_the_step_record(tmp_path: Path) -> None:
    contributor = Timing()
    callback = PlatformCallback("job", tmp_path, contributors=[contributor])
    run_steps(callback, range(2))
    assert contributor.calls == [("begin", 0), ("end", 0), ("begin", 1), ("end", 1)]
    record = read_records(tmp_path / "job_metrics.jsonl")[0]
    assert record["timing"] == {"gen": 1.5, "rollout": 0.5}
    assert record["performance"] == {"step_time": 0.75}
    assert record["extra"]["memory/rss_gb"] == 1.25
    assert record["anomalies"] == [
        {"type": "memory_leak", "severity": "warning", "message": "grows"}
    ]
    status = read_status(tmp_path / "job_status.json")
    assert status["anomaly_reason"] == "memory_leak: grows"


def test_a_failing_contributor_is_logged_once_and_training_goes_on(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    callback = PlatformCallback("job", tmp_path, contributors=[Timing(fail=True)])
    run_steps(callback, range(20))
    assert len(read_records(tmp_path / "job_metrics.jsonl")) == 20
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert logged == [  # once for each of its two hooks, not once per step
        "Timing.on_step_begin failed; training continues (further failures of this hook "
        "are not logged)",
        "Timing.on_step_end failed; training continues (further failures of this hook "
        "are not logged)",
    ]


def test_late_logs_rewrite_the_written_step_with_everything(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, background=False)
    callback.on_step_end(1, {"loss": math.nan})
    callback.on_log(1, {"eval_loss": 2.0})
    callback.on_train_end()
    first, newest = read_records(tmp_path / "job_metrics.jsonl")
    assert first["step"] == newest["step"] == 1
    assert newest["extra"] == {"eval_loss": 2.0}
    assert math.isnan(newest["loss"]["total_loss"])
    assert newest["anomalies"] == first["anomalies"]  # carried, not detected twice
    assert len(newest["anomalies"]) == 1


def test_a_step_held_open_collects_later_metrics_into_one_line(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path)
    callback.on_step_begin(7)
    callback.on_rollout_end(7, {"critic/score/mean": 0.5})
    callback.on_step_end(7, {"actor/pg_loss": 0.2}, commit=False)
    callback.on_log(7, {"loss": 1.0})
    callback.on_evaluate(7, {"eval_loss": 1.5})
    callback.commit_step()
    callback.on_train_end()
    (record,) = read_records(tmp_path / "job_metrics.jsonl")
    assert record["reward"] == {"mean": 0.5}
    assert record["loss"] == {"actor_loss": 0.2, "total_loss": 1.0}
    assert record["extra"] == {"eval_loss": 1.5}


def test_an_open_step_is_written_when_the_next_one_begins(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path)
    callback.on_log(1, {"loss": 1.0})  # a loop that only ever logs
    callback.on_log(2, {"loss": 0.9})
    callback.flush()
    assert [r["step"] for r in read_records(tmp_path / "job_metrics.jsonl")] == [1]
    callback.on_train_end()
    assert [r["step"] for r in read_records(tmp_path / "job_metrics.jsonl")] == [1, 2]


def test_stop_on_anomaly_raises_once_at_the_step_that_tripped(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, stop_on_anomaly=True)
    callback.on_train_begin(100)
    for step in range(5):
        callback.on_step_end(step, healthy(step))
    with pytest.raises(StopTraining, match="kl_explosion") as stopped:
        callback.on_step_end(5, {**healthy(5), "actor/kl_loss": 4.0})
    assert stopped.value.anomalies[0]["severity"] == "critical"
    callback.on_step_end(6, healthy(6))  # told once; the loop may still wind down
    callback.on_train_end()
    status = read_status(tmp_path / "job_status.json")
    assert status["status"] == "stopped"
    assert status["anomaly_detected"] is True
    assert status["anomaly_reason"].startswith("kl_explosion: kl.mean 4 > threshold 1")


def test_stop_severity_critical_lets_warnings_pass(tmp_path: Path) -> None:
    callback = PlatformCallback(
        "job", tmp_path, stop_on_anomaly=True, stop_severity="critical", loss_patience=3
    )
    for step in range(10):
        callback.on_step_end(step, {"loss": 1.0})  # a plateau: a warning
    with pytest.raises(StopTraining):
        callback.on_step_end(10, {"loss": math.inf})
    callback.on_train_end()


def test_anomaly_detection_can_be_turned_off(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, enable_anomaly_detection=False)
    callback.on_step_end(0, {"loss": math.nan})
    callback.on_train_end()
    assert "anomalies" not in read_records(tmp_path / "job_metrics.jsonl")[0]
    assert read_status(tmp_path / "job_status.json")["anomaly_detected"] is False


def test_the_background_and_inline_writers_write_identical_files(tmp_path: Path) -> None:
    for background in (True, False):
        callback = PlatformCallback(
            "job", tmp_path / str(background), background=background, clock=lambda: 1.7e9
        )
        run_steps(callback, range(200))
        callback.on_step_end(200, {"loss": math.nan})  # after the end: still written
        callback.flush()
    threaded = (tmp_path / "True" / "job_metrics.jsonl").read_bytes()
    assert threaded == (tmp_path / "False" / "job_metrics.jsonl").read_bytes()
    assert threaded.count(b"\n") == 201


@pytest.mark.parametrize(
    ("policy", "per_line", "at_end"),
    [("always", True, True), ("end", False, True), ("never", False, False)],
)
def test_the_fsync_policy_decides_when_lines_are_synced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, policy: str, per_line: bool, at_end: bool
) -> None:
    synced: list[int] = []
    callback = PlatformCallback("job", tmp_path, fsync=policy, background=False)  # type: ignore[arg-type]
    callback.on_train_begin()
    monkeypatch.setattr(os, "fsync", synced.append)
    for step in range(5):
        callback.on_step_end(step, healthy(step))
    assert len(synced) == (5 if per_line else 0)
    callback.on_train_end()
    assert (len(synced) > (5 if per_line else 0)) is at_end


def test_an_fsync_interval_in_seconds_syncs_that_often(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    now = [0.0]
    callback = PlatformCallback("job", tmp_path, fsync=2.0, background=False, clock=lambda: now[0])
    monkeypatch.setattr(os, "fsync", synced.append)
    for step in range(10):
        now[0] += 1.0
        callback.on_step_end(step, healthy(step))
    assert len(synced) == 5


def test_an_unknown_fsync_policy_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="fsync"):
        PlatformCallback("job", tmp_path, fsync="sometimes")  # type: ignore[arg-type]


def test_a_checkpoint_makes_the_lines_so_far_durable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    callback = PlatformCallback("job", tmp_path, background=False)
    callback.on_step_end(0, healthy(0))
    monkeypatch.setattr(os, "fsync", synced.append)
    callback.on_save(0, "/ckpt/0")
    assert len(synced) == 1


def test_the_status_is_rewritten_at_most_every_status_interval(tmp_path: Path) -> None:
    now = [1000.0]
    callback = PlatformCallback(
        "job", tmp_path, background=False, status_interval=10.0, clock=lambda: now[0]
    )
    callback.on_train_begin()
    for step in range(5):
        now[0] += 1.0
        callback.on_step_end(step, healthy(step))
    assert read_status(tmp_path / "job_status.json")["current_step"] == 0
    now[0] += 10.0
    callback.on_step_end(5, healthy(5))
    status = read_status(tmp_path / "job_status.json")
    assert status["current_step"] == 5
    assert status["updated_at"] == now[0]


def test_the_writer_waits_instead_of_dropping_when_its_queue_is_full(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path, queue_size=2)
    handle = callback.writer.handle

    def slow(command: tuple[Any, ...]) -> None:
        import time

        time.sleep(0.001)
        handle(command)

    callback.writer.handle = slow  # type: ignore[method-assign]
    run_steps(callback, range(60))
    assert len(read_records(tmp_path / "job_metrics.jsonl")) == 60


def test_a_failing_disk_is_logged_once_and_never_reaches_training(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "job_metrics.jsonl").mkdir()  # os.open will fail on every line
    with caplog.at_level(logging.ERROR):
        run_steps(PlatformCallback("job", tmp_path), range(10))
    failures = [r for r in caplog.records if "RecordWriter.step failed" in r.getMessage()]
    assert len(failures) == 1
    assert read_status(tmp_path / "job_status.json")["status"] == "completed"


def test_the_epoch_is_recorded_when_the_loop_reports_it(tmp_path: Path) -> None:
    callback = PlatformCallback("job", tmp_path)
    callback.on_epoch_begin(2)
    callback.on_step_end(0, {"loss": 1.0})
    callback.on_step_end(1, {"loss": 1.0, "epoch": 2.5})
    callback.on_train_end()
    first, second = read_records(tmp_path / "job_metrics.jsonl")
    assert first["extra"]["epoch"] == 2
    assert second["extra"]["epoch"] == 2.5
