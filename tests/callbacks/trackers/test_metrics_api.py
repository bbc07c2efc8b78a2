"""The metrics API of the Profiling & Metrics layer, run as its users write it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from training_platform.callbacks import PlatformCallback
from training_platform.callbacks.trackers.metrics import (
    GRPOMetricsTracker,
    MetricTracker,
    ScoreDistributionTracker,
    TrainingLogger,
)


def test_metric_tracker_takes_a_name_a_value_and_a_step() -> None:
    tracker = MetricTracker()
    for step, loss in enumerate([0.9, 0.5, 0.3, 0.1]):
        tracker.update("loss", loss, step=step * 10)
    assert tracker.get_mean("loss") == pytest.approx(0.45)
    assert tracker.get_mean("loss", window=2) == pytest.approx(0.2)
    assert tracker.get_std("loss", window=2) == pytest.approx(0.1)
    assert tracker.get_std("loss") == pytest.approx(math.sqrt(0.0875))
    assert tracker.get_history("loss") == [(0, 0.9), (10, 0.5), (20, 0.3), (30, 0.1)]
    summary = tracker.get_summary("loss")
    assert {"count", "mean", "std", "min", "max", "p50", "p95"} <= set(summary)
    assert summary["count"] == 4 and summary["min"] == 0.1 and summary["max"] == 0.9
    assert tracker.get_mean("never_logged") is None
    assert tracker.get_summary("never_logged") == {}


def test_the_whole_run_is_kept_beyond_the_records_window() -> None:
    tracker = MetricTracker(window=2)
    tracker.update_batch({"loss": 4.0, "reward": 0.0}, step=1)
    tracker.update_batch({"loss": 2.0, "reward": 1.0}, step=2)
    tracker.update_batch({"loss": 0.0}, step=3)
    assert tracker.get_mean("loss") == pytest.approx(2.0)  # the run
    assert tracker.summary()["window/loss/mean"] == pytest.approx(1.0)  # the window
    assert tracker.get_history("reward") == [(1, 0.0), (2, 1.0)]


def test_both_forms_of_update_work_side_by_side() -> None:
    tracker = MetricTracker()
    tracker.update({"reward": 1.0}, kl=0.5)
    tracker.update("reward", 3.0, 7)
    tracker.update(reward=5.0, step=8)  # `step` is the step, never a metric
    assert "step" not in tracker.metrics
    assert tracker.get_history("reward") == [(0, 1.0), (7, 3.0), (8, 5.0)]
    with pytest.raises(TypeError, match="value is missing"):
        tracker.update("reward")


def test_keep_bounds_the_history() -> None:
    tracker = MetricTracker(keep=3)
    for step in range(10):
        tracker.update("x", float(step), step=step)
    assert tracker.get_mean("x") == pytest.approx(8.0)  # 7, 8, 9
    assert tracker.metrics["x"].count == 10
    assert len(tracker.get_history("x")) <= 6


def test_grpo_tracker_records_steps_components_and_groups() -> None:
    grpo = GRPOMetricsTracker()
    grpo.update_grpo_step(
        step=100,
        policy_loss=0.45,
        mean_reward=0.72,
        reward_components={"format": 1.0, "score": 0.68, "meta": 0.85},
        kl_divergence=0.012,
        entropy=2.5,
    )
    grpo.update_grpo_step(101, 0.40, 0.80, {"format": 0.0, "score": 0.7, "meta": 0.9}, 0.02)
    assert grpo.get_history("policy_loss") == [(100, 0.45), (101, 0.40)]
    assert grpo.get_latest("entropy") == 2.5
    components = grpo.get_reward_components()
    assert list(components) == ["format", "score", "meta"]
    assert components["format"]["mean"] == pytest.approx(0.5)
    assert grpo.get_mean("kl_divergence") == pytest.approx(0.016)

    assert grpo.get_reward_distribution() == {}
    grpo.update_group_rewards([0.9, 0.7, 0.5, 0.3])
    grpo.update_group_rewards([1.0, 1.0, 1.0, 1.0])
    dist = grpo.get_reward_distribution()
    assert dist["total_groups"] == 2 and dist["total_samples"] == 8
    assert dist["reward_mean"] == pytest.approx(0.8)
    assert dist["reward_std"] == pytest.approx(math.sqrt(0.065))
    ranks = dist["rank_distribution"]
    assert ranks["rank_means"] == pytest.approx([0.95, 0.85, 0.75, 0.65])
    assert ranks["zero_std_fraction"] == 0.5  # the all-1.0 group teaches nothing


def test_score_tracker_counts_scores_as_they_are_written() -> None:
    score_tracker = ScoreDistributionTracker()
    score_tracker.update([1.0, 0.5, None, 1.0, 0.0])
    dist = score_tracker.get_distribution()
    assert dist["total"] == 5
    assert dist["valid_count"] == 4 and dist["invalid_count"] == 1
    assert dist["invalid_rate"] == pytest.approx(0.2)
    assert dist["score_counts"] == {"0.0": 1, "0.5": 1, "1.0": 2}
    assert dist["score_percentages"]["1.0"] == pytest.approx(50.0)
    assert dist["mean_score"] == pytest.approx(0.625)


def test_training_logger_exports_the_metrics_json(tmp_path: Path) -> None:
    logger = TrainingLogger(log_dir=tmp_path / "logs", experiment_name="verifier_iter1")
    for step in range(5):
        logger.log_step(
            step=step,
            metrics={"loss": 1.0 / (step + 1), "reward": 0.1 * step},
            scores=[1.0, 0.5, 1.0, 0.0] if step else [None, 1.0],
        )
        if step % 2 == 0:
            logger.save_checkpoint_metrics(f"step_{step}")
    final = logger.export_all()
    assert final.parent == tmp_path / "logs" / "verifier_iter1"
    assert (final.parent / "step_4_metrics.json").exists()
    data = json.loads(final.read_text())
    assert data["experiment_name"] == "verifier_iter1"
    assert data["metric_summaries"]["loss"]["max"] == 1.0
    assert data["raw_metrics"]["loss"] == [1.0, 0.5, pytest.approx(1 / 3), 0.25, 0.2]
    assert data["raw_steps"]["reward"] == [0, 1, 2, 3, 4]
    scores = data["score_distribution"]
    assert scores["total"] == 18 and scores["invalid_count"] == 1
    assert scores["score_counts"]["1.0"] == 9
    checkpoint = json.loads((final.parent / "step_0_metrics.json").read_text())
    assert checkpoint["raw_metrics"]["loss"] == [1.0]


def test_training_logger_feeds_the_platform_callback(tmp_path: Path) -> None:
    callback = PlatformCallback("seed-run", tmp_path / "platform", background=False)
    logger = TrainingLogger(tmp_path / "logs", "seed-run", callback=callback)
    logger.log_step(0, {"loss": 0.5, "reward": 0.2}, scores=[1.0, None])
    logger.log_step(1, {"loss": 0.4, "reward": 0.3})
    callback.on_train_end()
    lines = (tmp_path / "platform" / "seed-run_metrics.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert [r["step"] for r in records] == [0, 1]
    assert "0.5" in lines[0] and "0.4" in lines[1]
    assert records[0]["extra"]["scores/invalid_rate"] == 0.5
    assert "scores/invalid_rate" not in records[1].get("extra", {})
