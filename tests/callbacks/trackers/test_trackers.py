"""Windowed statistics, GRPO group statistics and score distributions."""

from __future__ import annotations

import math

import pytest

from training_platform.callbacks.profiling.stats import describe, linear_trend, percentile
from training_platform.callbacks.trackers.metric_tracker import (
    GRPOGroupTracker,
    MetricTracker,
    ScoreDistribution,
    WindowedStats,
    grpo_group_stats,
)


def test_percentiles_interpolate_like_numpy() -> None:
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    assert percentile(values, 50) == 3.0
    assert percentile(values, 95) == pytest.approx(8.8)
    assert percentile(values, 0) == 1.0 and percentile(values, 100) == 10.0
    assert math.isnan(percentile([], 50))


def test_linear_trend_gives_slope_and_fit() -> None:
    slope, r_squared = linear_trend([1.0, 3.0, 5.0, 7.0])
    assert slope == pytest.approx(2.0) and r_squared == pytest.approx(1.0)
    assert linear_trend([4.0, 4.0, 4.0]) == (0.0, 0.0)


def test_windowed_stats_keep_only_the_last_values() -> None:
    stats = WindowedStats(window=3)
    for value in (100.0, 1.0, 2.0, 3.0):
        stats.add(value)
    summary = stats.summary()
    assert summary["count"] == 3
    assert summary["mean"] == pytest.approx(2.0)
    assert summary["min"] == 1.0 and summary["max"] == 3.0
    assert summary["std"] == pytest.approx(math.sqrt(2 / 3))
    assert summary["p50"] == 2.0 and summary["p95"] == pytest.approx(2.9)


def test_non_finite_values_are_counted_apart_not_averaged() -> None:
    stats = WindowedStats(window=10)
    for value in (1.0, math.nan, 3.0, math.inf):
        stats.add(value)
    assert stats.nonfinite == 2
    assert stats.summary()["mean"] == pytest.approx(2.0)


def test_metric_tracker_summarises_each_metric_into_flat_extra_keys() -> None:
    tracker = MetricTracker(window=2, prefix="window")
    tracker.update({"reward": 1.0, "note": "text"}, loss=4.0)
    tracker.update(reward=3.0, loss=2.0)
    tracker.update(reward=5.0)
    summary = tracker.summary()
    assert summary["window/reward/mean"] == pytest.approx(4.0)
    assert summary["window/loss/max"] == 4.0
    assert "window/note/mean" not in summary
    assert set(tracker.stats("reward")) == {"count", "mean", "std", "min", "max", "p50", "p95"}
    tracker.on_step_begin(3)
    assert tracker.on_step_end(3) == {"extra": summary}


def test_metric_tracker_accepts_tensors() -> None:
    torch = pytest.importorskip("torch")
    tracker = MetricTracker()
    tracker.update(kl=torch.tensor(0.25))
    assert tracker.stats("kl")["mean"] == pytest.approx(0.25)


def test_grpo_group_stats_by_group_size() -> None:
    rewards = [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    stats = grpo_group_stats(rewards, group_size=4)
    assert stats["num_groups"] == 3
    assert stats["group_means"] == [0.5, 1.0, 0.0]
    assert stats["group_stds"] == [0.5, 0.0, 0.0]
    # Two groups where every response scored the same: no learning signal there.
    assert stats["zero_std_fraction"] == pytest.approx(2 / 3)
    assert stats["rank_means"] == pytest.approx([2 / 3, 2 / 3, 1 / 3, 1 / 3])
    assert stats["spread_mean"] == pytest.approx(1 / 3)


def test_grpo_group_stats_by_group_ids_in_any_order() -> None:
    stats = grpo_group_stats([0.2, 0.9, 0.4, 0.1], group_ids=["a", "b", "a", "b"])
    assert stats["group_means"] == pytest.approx([0.3, 0.5])
    assert stats["rank_means"] == pytest.approx([0.65, 0.15])


def test_grpo_group_stats_refuses_ragged_input() -> None:
    with pytest.raises(ValueError, match="groups of 4"):
        grpo_group_stats([1.0, 2.0, 3.0], group_size=4)
    with pytest.raises(ValueError, match="one entry per reward"):
        grpo_group_stats([1.0, 2.0], group_ids=["a"])
    with pytest.raises(ValueError):
        grpo_group_stats([1.0])


def test_grpo_tracker_summarises_one_step_of_batches_then_starts_over() -> None:
    tracker = GRPOGroupTracker(group_size=2)
    tracker.update([1.0, 1.0])  # batch 1: group 0 all the same
    tracker.update([1.0, 0.0])  # batch 2: its group 0 is another group
    result = tracker.on_step_end(0)["extra"]
    assert result["grpo/num_groups"] == 2.0
    assert result["grpo/zero_std_fraction"] == 0.5
    assert result["grpo/rank_1_mean"] == 1.0 and result["grpo/rank_2_mean"] == 0.5
    assert tracker.on_step_end(1) == {}


def test_grpo_tracker_accepts_a_tensor_of_rewards() -> None:
    torch = pytest.importorskip("torch")
    tracker = GRPOGroupTracker(group_size=3)
    tracker.update(torch.tensor([0.0, 0.5, 1.0]))
    assert tracker.summary()["grpo/spread_mean"] == pytest.approx(1.0)


def test_score_distribution_counts_invalid_scores() -> None:
    scores = ScoreDistribution(window=100)
    scores.update([1.0, 0.5, None, 1.0, 0.0, math.nan])
    dist = scores.distribution()
    assert dist["total"] == 6
    assert dist["invalid_count"] == 2
    assert dist["invalid_rate"] == pytest.approx(1 / 3)
    assert dist["mean_score"] == pytest.approx(0.625)
    assert dist["score_counts"] == {"0": 1, "0.5": 1, "1": 2}
    extra = scores.on_step_end(0)["extra"]
    assert extra["scores/fraction_1"] == pytest.approx(2 / 6)
    assert extra["scores/invalid_rate"] == pytest.approx(1 / 3)


def test_score_distribution_without_valid_scores_logs_no_nan() -> None:
    scores = ScoreDistribution()
    scores.update([None, None])
    extra = scores.on_step_end(0)["extra"]
    assert extra == {"scores/total": 2.0, "scores/invalid_rate": 1.0}
    assert describe([])["count"] == 0
