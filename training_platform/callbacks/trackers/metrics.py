"""The metrics API of the Profiling & Metrics layer, on the kit's trackers.

Code written against that layer's ``metrics`` module runs with its import
changed to this one (docs/metrics-api.md)::

    from training_platform.callbacks.trackers.metrics import TrainingLogger

    logger = TrainingLogger("experiments/logs", "verifier_iter1")
    logger.log_step(step, {"loss": loss, "reward": reward}, scores=[1.0, 0.5, None])
    logger.save_checkpoint_metrics(f"step_{step}")
    logger.export_all()

Each name is a thin entry point: the statistics are `MetricTracker`'s, the
group statistics `grpo_group_stats`, the score counts `ScoreDistribution`'s.
Pure Python; importing it loads neither torch nor the server.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from training_platform.callbacks.profiling.stats import describe, finite_or_none
from training_platform.callbacks.trackers.metric_tracker import (
    MetricTracker,
    ScoreDistribution,
    _floats,
    grpo_group_stats,
)

if TYPE_CHECKING:
    from training_platform.callbacks.platform_callback import PlatformCallback

__all__ = [
    "GRPOMetricsTracker",
    "MetricTracker",
    "ScoreDistributionTracker",
    "TrainingLogger",
    "write_json_atomic",
]


def write_json_atomic(path: str | os.PathLike[str], payload: Any) -> Path:
    """Standard JSON (NaN and inf as null), replaced whole: a reader never sees half a file."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(finite_or_none(payload), indent=2) + "\n", encoding="utf-8")
    os.replace(temp, target)
    return target


class GRPOMetricsTracker(MetricTracker):
    """`MetricTracker` with GRPO's step fields and its groups of rewards.

    ``update_grpo_step`` records ``policy_loss``, ``mean_reward``,
    ``reward_<component>`` per reward component, ``kl_divergence`` and any
    further keyword as metrics at `step`. ``update_group_rewards`` stores one
    prompt's rewards; `get_reward_distribution` analyses the stored groups
    (the last `max_groups`, default all) with `grpo_group_stats`.
    """

    def __init__(
        self,
        window_size: int = 100,
        *,
        max_groups: int | None = None,
        prefix: str = "window",
        keep: int | None = None,
    ) -> None:
        super().__init__(window_size, prefix, keep=keep)
        self.group_rewards: deque[list[float]] = deque(maxlen=max_groups)
        self.reward_component_names: list[str] = []

    def update_grpo_step(
        self,
        step: int,
        policy_loss: float,
        mean_reward: float,
        reward_components: Mapping[str, float] | None = None,
        kl_divergence: float | None = None,
        **more: Any,
    ) -> None:
        """Record one GRPO step's figures at `step`."""
        metrics: dict[str, Any] = {"policy_loss": policy_loss, "mean_reward": mean_reward}
        for component, value in (reward_components or {}).items():
            if component not in self.reward_component_names:
                self.reward_component_names.append(component)
            metrics[f"reward_{component}"] = value
        if kl_divergence is not None:
            metrics["kl_divergence"] = kl_divergence
        metrics.update(more)
        self.update_batch(metrics, step=step)

    def update_group_rewards(self, group_rewards: Any) -> None:
        """Store the rewards of one group (one prompt's responses)."""
        values = _floats(group_rewards)
        if values:
            self.group_rewards.append(values)

    def get_reward_components(self) -> dict[str, dict[str, float]]:
        """Each reward component's `get_summary` over the run."""
        return {c: self.get_summary(f"reward_{c}") for c in self.reward_component_names}

    def get_reward_distribution(self) -> dict[str, Any]:
        """Rewards over the stored groups; {} before any group.

        ``rank_distribution``: ``rank_means`` (mean reward of the best, 2nd
        best, ... response of a group), ``spread_mean`` (best minus worst),
        ``zero_std_fraction`` (groups whose responses all scored the same:
        their advantages are zero, they teach nothing).
        """
        if not self.group_rewards:
            return {}
        rewards = [r for group in self.group_rewards for r in group]
        ids = [i for i, group in enumerate(self.group_rewards) for _ in group]
        groups = grpo_group_stats(rewards, group_ids=ids)
        overall = describe(rewards)
        return {
            "total_samples": len(rewards),
            "total_groups": len(self.group_rewards),
            "reward_mean": overall["mean"],
            "reward_std": overall["std"],
            "reward_min": overall["min"],
            "reward_max": overall["max"],
            "rank_distribution": {
                "rank_means": groups["rank_means"],
                "spread_mean": groups["spread_mean"],
                "zero_std_fraction": groups["zero_std_fraction"],
            },
            "group_std_mean": math.fsum(groups["group_stds"]) / groups["num_groups"],
        }


class ScoreDistributionTracker(ScoreDistribution):
    """Verifier scores over the whole run (`ScoreDistribution` with ``window=None``).

    ``get_distribution()`` adds ``score_percentages`` (of the valid scores);
    the distinct scores are named as floats are written (``"1.0"``, ``"0.5"``).
    """

    def __init__(self, window: int | None = None, prefix: str = "scores") -> None:
        super().__init__(window=window, prefix=prefix)

    @staticmethod
    def level_key(score: float) -> str:
        return repr(score)

    def get_distribution(self) -> dict[str, Any]:
        dist = self.distribution()
        valid = dist["valid_count"]
        dist["score_percentages"] = {
            level: 100.0 * count / valid for level, count in dist["score_counts"].items()
        }
        return dist


class TrainingLogger:
    """Metrics and verifier scores of one experiment, exported as JSON.

    Files go to ``{log_dir}/{experiment_name}/``. With a `callback`
    (`PlatformCallback`), each `log_step` is also that step's record on the
    platform: the metrics, plus the step's score figures in ``extra``
    (``scores/mean``, ``scores/invalid_rate``, ...), so the run is live there.
    """

    def __init__(
        self,
        log_dir: str | os.PathLike[str],
        experiment_name: str = "experiment",
        *,
        callback: PlatformCallback | None = None,
        window_size: int = 100,
    ) -> None:
        self.log_dir = Path(log_dir)
        self.experiment_name = experiment_name
        self.experiment_dir = self.log_dir / experiment_name
        self.experiment_dir.mkdir(parents=True, exist_ok=True)
        self.metric_tracker = MetricTracker(window_size)
        self.score_tracker = ScoreDistributionTracker()
        self.callback = callback
        self.start_time = time.time()

    def log_step(
        self, step: int, metrics: Mapping[str, Any], scores: Iterable[Any] | None = None
    ) -> None:
        """Record one step's metrics (and its verifier scores, None = invalid)."""
        self.metric_tracker.update_batch(metrics, step=step)
        step_scores: Sequence[Any] = list(scores) if scores is not None else []
        if scores is not None:
            self.score_tracker.update(step_scores)
        if self.callback is not None:
            record: dict[str, Any] = dict(metrics)
            if step_scores:
                step_dist = ScoreDistribution(window=None)
                step_dist.update(step_scores)
                extra = step_dist.on_step_end(step).get("extra")
                if extra:
                    record["extra"] = {**record.get("extra", {}), **extra}
            self.callback.on_step_end(step, record)

    def save_checkpoint_metrics(self, checkpoint_name: str) -> Path:
        """``{checkpoint_name}_metrics.json`` in the experiment's folder."""
        return self.export_all(self.experiment_dir / f"{checkpoint_name}_metrics.json")

    def export_all(self, output_path: str | os.PathLike[str] | None = None) -> Path:
        """Write the metrics JSON (default ``metrics_<timestamp>.json``); returns its path.

        ``raw_metrics`` holds each metric's values as logged, ``raw_steps``
        their steps (same order).
        """
        if output_path is None:
            stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
            output_path = self.experiment_dir / f"metrics_{stamp}.json"
        tracker = self.metric_tracker
        payload = {
            "experiment_name": self.experiment_name,
            "timestamp": datetime.now().isoformat(),
            "total_runtime_sec": time.time() - self.start_time,
            "metric_summaries": tracker.get_all_summaries(),
            "score_distribution": self.score_tracker.get_distribution(),
            "raw_metrics": {name: list(s.values) for name, s in tracker.metrics.items()},
            "raw_steps": {name: list(s.steps) for name, s in tracker.metrics.items()},
        }
        return write_json_atomic(output_path, payload)
