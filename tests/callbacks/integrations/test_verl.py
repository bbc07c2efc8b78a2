"""verl's and TRL's real key names (captured samples) mapped onto the record groups."""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from tests.callbacks.helpers import SAMPLES, read_records, read_status, sample
from training_platform.callbacks import PlatformCallback, StopTraining
from training_platform.callbacks.integrations.verl import (
    VerlTrackingBackend,
    attach_to_tracking,
    job_id_from_name,
    register_verl_backend,
)
from training_platform.callbacks.wire.lines import decode_line
from training_platform.callbacks.wire.records import build_record


def scalars(record: dict[str, Any]) -> int:
    groups = ("loss", "reward", "kl", "gradient", "performance", "timing", "extra")
    return sum(len(record.get(group, {})) for group in groups)


def write_one(tmp_path: Path, metrics: dict[str, Any]) -> dict[str, Any]:
    backend = VerlTrackingBackend("verl-run", tmp_path)
    backend.log(data=metrics, step=120)
    backend.finish()
    (record,) = read_records(tmp_path / "verl-run_metrics.jsonl")
    return record


def test_a_verl_ppo_step_maps_onto_the_groups_and_keeps_every_other_key(tmp_path: Path) -> None:
    metrics = sample("verl_ppo_step_metrics.json")
    record = write_one(tmp_path, metrics)
    assert record["step"] == 120
    assert record["loss"] == {"actor_loss": -0.0123, "critic_loss": 0.213}
    assert record["reward"] == {"mean": 0.42, "max": 1.0, "min": 0.0}  # the score, not rewards/*
    assert record["kl"] == {"mean": 0.0041}  # KL to the reference beats ppo_kl
    assert record["gradient"] == {"actor_norm": 0.87, "critic_norm": 1.9}
    assert record["performance"] == {
        "tokens_per_second": 845.3, "step_time": 89.8, "gpu_memory_allocated": 61.4,
    }  # fmt: skip
    assert record["timing"]["gen"] == 41.2
    assert record["timing"]["update_actor"] == 14.2
    # timing_s/step is the whole step, not a stage: never in the stacked timing chart
    assert "step" not in record["timing"]
    assert len(record["timing"]) == 8
    extra = record["extra"]
    assert extra["actor/ppo_kl"] == 0.0009
    assert extra["critic/rewards/mean"] == 0.418
    assert extra["actor/entropy"] == 0.512
    assert extra["timing_per_token_ms/gen"] == 0.081
    assert scalars(record) == len(metrics)  # nothing dropped, nothing invented


def test_the_detectors_read_verl_entropy_and_response_length(tmp_path: Path) -> None:
    metrics = {**sample("verl_ppo_step_metrics.json"), "actor/entropy": 0.001}
    record = write_one(tmp_path, metrics)
    assert [a["type"] for a in record["anomalies"]] == ["entropy_collapse"]


def test_verl_file_logger_lines_decode_to_the_same_record(tmp_path: Path) -> None:
    lines = (SAMPLES / "verl_file_logger.jsonl").read_bytes().splitlines()
    records = [decode_line(line) for line in lines]
    assert [r["step"] for r in records] == list(range(1, len(lines) + 1))
    assert records[0]["loss"]["actor_loss"] == -0.0123
    assert records[0]["timestamp"] is None  # verl's file logger writes none
    assert records[0]["timing"]["gen"] == 41.2


def test_trl_grpo_logs_map_through_the_hf_adapter_path(tmp_path: Path) -> None:
    logs = sample("trl_grpo_log.json")
    callback = PlatformCallback("trl", tmp_path)
    callback.on_log(10, logs)
    callback.on_train_end()
    (record,) = read_records(tmp_path / "trl_metrics.jsonl")
    assert record["loss"] == {"total_loss": 0.0132}
    assert record["reward"] == {"mean": 1.35, "std": 0.61}
    assert record["kl"] == {"mean": 0.0021}
    assert record["gradient"] == {"actor_norm": 0.41}
    assert record["performance"] == {"step_time": 12.4}
    assert record["extra"]["entropy"] == 0.66
    assert record["extra"]["completions/mean_length"] == 233.1
    assert scalars(record) == len(logs)


def test_trl_ppo_logs_map_policy_and_value_losses(tmp_path: Path) -> None:
    logs = sample("trl_ppo_log.json")
    callback = PlatformCallback("trl", tmp_path)
    callback.on_log(12, logs)
    callback.on_train_end()
    (record,) = read_records(tmp_path / "trl_metrics.jsonl")
    assert record["loss"] == {"actor_loss": -0.011, "critic_loss": 0.092}
    assert record["reward"] == {"mean": 1.25}
    assert record["kl"] == {"mean": 0.84}
    assert record["extra"]["policy/approxkl_avg"] == 0.0031
    assert record["extra"]["objective/rlhf_reward"] == 1.21
    assert scalars(record) == len(logs)


def test_a_second_log_for_the_same_verl_step_merges_into_it(tmp_path: Path) -> None:
    backend = VerlTrackingBackend("verl-run", tmp_path, total_steps=2)
    backend.log({"actor/pg_loss": 0.1}, step=1)
    backend.log({"val-core/acc": 0.7}, step=1)
    backend.log({"actor/pg_loss": 0.2}, step=2)
    backend.finish()
    records = read_records(tmp_path / "verl-run_metrics.jsonl")
    assert [r["step"] for r in records] == [1, 1, 2]
    assert records[1]["loss"] == {"actor_loss": 0.1}
    assert records[1]["extra"] == {"val-core/acc": 0.7}
    status = read_status(tmp_path / "verl-run_status.json")
    assert (status["status"], status["total_steps"]) == ("completed", 2)


def test_stop_on_anomaly_leaves_verl_log_as_stop_training(tmp_path: Path) -> None:
    backend = VerlTrackingBackend("verl-run", tmp_path, stop_on_anomaly=True)
    backend.log({"actor/kl_loss": 0.01}, step=1)
    with pytest.raises(StopTraining):
        backend.log({"actor/kl_loss": 7.5}, step=2)
    assert read_status(tmp_path / "verl-run_status.json")["status"] == "stopped"


@pytest.fixture
def verl_tracking() -> Iterator[type[Any]]:
    """verl's own `Tracking` class (verl 0.9, installed for the tests), given back as
    it was: `register_verl_backend` teaches the class itself a backend."""
    tracking_module = pytest.importorskip("verl.utils.tracking")
    cls = tracking_module.Tracking
    names = ("__init__", "__del__", "supported_backend", "_training_platform_options")
    saved = {name: vars(cls)[name] for name in names if name in vars(cls)}
    yield cls
    for name in names:
        if name in saved:
            setattr(cls, name, saved[name])
        elif name in vars(cls):
            delattr(cls, name)


def test_registering_the_backend_lets_verl_config_select_it(
    tmp_path: Path, verl_tracking: type[Any]
) -> None:
    register_verl_backend(output_dir=tmp_path)
    register_verl_backend(output_dir=tmp_path)  # idempotent
    config = OmegaConf.create(
        {"trainer": {"total_training_steps": 2, "wandb_api_key": "k"},
         "actor": {"lr": 1e-6, "ppo_lr": "${actor.lr}"}}
    )  # fmt: skip
    tracking = verl_tracking("proj", "grpo qwen/7b", ["console", "platform"], config)
    tracking.log(data=sample("verl_ppo_step_metrics.json"), step=1)
    run = json.loads((tmp_path / "grpo_qwen_7b_run.json").read_text())
    assert (run["project"], run["name"], run["framework"]["name"]) == (
        "proj", "grpo qwen/7b", "verl",
    )  # fmt: skip
    assert run["config"] == {
        "trainer": {"total_training_steps": 2, "wandb_api_key": "***"},
        "actor": {"lr": 1e-6, "ppo_lr": 1e-6},
    }
    tracking.log(data=sample("verl_ppo_step_metrics.json"), step=2)
    del tracking  # verl drops its Tracking when fit() returns
    gc.collect()
    status = read_status(tmp_path / "grpo_qwen_7b_status.json")
    assert (status["status"], status["current_step"], status["total_steps"]) == ("completed", 2, 2)
    untouched = verl_tracking("proj", "other", "console")
    assert "platform" not in untouched.logger


def test_attaching_to_an_existing_tracking_object_takes_one_line(
    tmp_path: Path, verl_tracking: type[Any]
) -> None:
    tracking = verl_tracking("proj", "exp")
    backend = attach_to_tracking(tracking, "exp7", tmp_path)
    tracking.log(data={"critic/score/mean": 0.3}, step=5)
    backend.finish()
    (record,) = read_records(tmp_path / "exp7_metrics.jsonl")
    assert record["reward"] == {"mean": 0.3}


@pytest.mark.parametrize(
    ("name", "job_id"),
    [("qwen2.5-7b_grpo", "qwen2.5-7b_grpo"), ("a b/c", "a_b_c"), ("__x", "x"), ("??", "verl")],
)
def test_experiment_names_become_valid_job_ids(name: str, job_id: str) -> None:
    assert job_id_from_name(name) == job_id


def test_verl_timing_s_step_is_the_step_time_when_perf_time_per_step_is_missing() -> None:
    record = build_record(
        1, {"timing_s/gen": 2.0, "timing_s/update_actor": 1.0, "timing_s/step": 3.5}
    )
    assert record["performance"] == {"step_time": 3.5}
    assert record["timing"] == {"gen": 2.0, "update_actor": 1.0}  # no double counting
    both = build_record(1, {"timing_s/step": 3.5, "perf/time_per_step": 3.4})
    assert both["performance"] == {"step_time": 3.4}
    assert both["extra"] == {"timing_s/step": 3.5}  # the weaker source is kept, not dropped
    assert "timing" not in both
