"""Metric trackers: windowed statistics, GRPO group statistics, score distributions.

Each tracker is fed during a step and summarises into flat ``extra`` keys.
Every tracker is also a step contributor: pass it to
``PlatformCallback(..., contributors=[tracker])`` and its summary lands in
each step's record under ``extra``::

    rewards = MetricTracker(window=100, prefix="window")
    rewards.update({"reward": 0.71, "response_length": 312})
    rewards.summary()  # {"window/reward/mean": ..., "window/reward/p95": ..., ...}

Pure Python, no torch or numpy needed (tensors and arrays are accepted).
"""

from __future__ import annotations

import math
from array import array
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, overload

from training_platform.callbacks.profiling.stats import describe
from training_platform.callbacks.wire.schema import to_scalar


def _floats(values: Any) -> list[float]:
    """A flat list of floats from a list, a tuple, a numpy array or a torch tensor."""
    tolist = getattr(values, "tolist", None)
    if tolist is not None:  # numpy arrays and tensors (a CUDA tensor syncs once here)
        values = tolist()
    if isinstance(values, (int, float)):
        return [float(values)]
    return [float(to_scalar(v)) for v in values]


class _ExtraContributor:
    """Step contributor plumbing: the summary of each step goes to ``extra``."""

    def summary(self) -> dict[str, float]:
        raise NotImplementedError

    def on_step_begin(self, step: int) -> None:
        """Nothing to do: trackers are fed by the trainer during the step."""

    def on_step_end(self, step: int) -> dict[str, Any]:
        # NaN here means "no data" (e.g. no valid score), not a NaN metric: leave
        # it out so the NaN detectors do not take it for a diverging run.
        summary = {k: v for k, v in self.summary().items() if math.isfinite(v)}
        return {"extra": summary} if summary else {}


class WindowedStats:
    """The last `window` values of one metric: count, mean, std, min, max, p50, p95.

    Non-finite values are kept out of the statistics and counted in `nonfinite`
    (a NaN loss is an anomaly of its own, reported by the detectors).
    """

    def __init__(self, window: int = 100) -> None:
        if window < 1:
            raise ValueError("window must be >= 1")
        self.values: deque[float] = deque(maxlen=window)
        self.nonfinite = 0

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self.values.append(value)
        else:
            self.nonfinite += 1

    def summary(self) -> dict[str, float]:
        return describe(self.values)


class MetricSeries:
    """One metric's values with the step of each, for the whole run (or its last `keep`).

    Stored in two typed arrays (16 bytes a value): a million-step run of ten
    metrics is 160 MB. `keep` bounds it (the oldest values are dropped in
    batches, so an append stays cheap). Non-finite values are kept, so the
    history is what was logged, and left out of every statistic (`describe`).
    """

    __slots__ = ("count", "keep", "nonfinite", "steps", "values")

    def __init__(self, keep: int | None = None) -> None:
        if keep is not None and keep < 1:
            raise ValueError("keep must be >= 1 (or None: the whole run)")
        self.keep = keep
        self.steps = array("q")
        self.values = array("d")
        self.count = 0  # values ever added, dropped ones included
        self.nonfinite = 0

    def add(self, value: float, step: int | None = None) -> None:
        """Append `value`; without a step it is numbered by its position in the run."""
        self.steps.append(self.count if step is None else int(step))
        self.values.append(value)
        self.count += 1
        if not math.isfinite(value):
            self.nonfinite += 1
        keep = self.keep
        if keep is not None and len(self.values) >= 2 * keep:
            del self.values[:-keep]
            del self.steps[:-keep]

    def tail(self, window: int | None = None) -> Sequence[float]:
        """The last `window` values (None: all that are kept)."""
        if window is not None and window < 1:
            raise ValueError("window must be >= 1 (or None: the whole run)")
        size = self.keep if window is None else min(window, self.keep or window)
        return self.values[-size:] if size is not None else self.values


_UNSET: Any = object()


class MetricTracker(_ExtraContributor):
    """Statistics per metric name, kept with their steps over the run.

    Two ways to feed it: ``update({"reward": r, ...})`` / ``update(reward=r)``
    (the step-contributor form) and ``update("reward", r, step=5)`` /
    ``update_batch({...}, step=5)``. `step` is always the step number, never a
    metric. Queries: ``get_mean(name, window=None)``, ``get_std``,
    ``get_summary(name)`` (whole run) and ``stats(name)`` (last `window`).
    As a step contributor its summary is ``{prefix}/{name}/{stat}`` over the
    last `window` values. `keep` bounds the history per metric (default: the
    whole run, as `MetricSeries` explains); `window_size` is `window`'s other name.
    """

    STATS = ("mean", "std", "min", "max", "p50", "p95")

    def __init__(
        self,
        window: int = 100,
        prefix: str = "window",
        *,
        keep: int | None = None,
        window_size: int | None = None,
    ) -> None:
        window = window_size if window_size is not None else window
        if window < 1:
            raise ValueError("window must be >= 1")
        self.window = window
        self.prefix = prefix
        self.keep = keep
        self.metrics: dict[str, MetricSeries] = {}

    @overload
    def update(self, name: str, value: Any, /, step: int | None = None) -> None: ...

    @overload
    def update(
        self, metrics: Mapping[str, Any] | None = None, /, *, step: int | None = None, **values: Any
    ) -> None: ...

    def update(
        self,
        metrics: Mapping[str, Any] | str | None = None,
        value: Any = _UNSET,
        /,
        step: int | None = None,
        **values: Any,
    ) -> None:
        """Add one value per metric (at `step` when given); non-numeric values are ignored."""
        if isinstance(metrics, str):
            if value is _UNSET:
                raise TypeError(f"update({metrics!r}, value, step=None): the value is missing")
            self._add(metrics, value, step)
            return
        if value is not _UNSET:
            raise TypeError("update(name, value, step=None) takes the metric's name first")
        for source in (metrics or {}, values):
            for name, raw in source.items():
                self._add(name, raw, step)

    def update_batch(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Add several metrics of one step (``update(metrics, step=step)``)."""
        self.update(metrics, step=step)

    def _add(self, name: str, raw: Any, step: int | None) -> None:
        value = to_scalar(raw)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        series = self.metrics.get(name)
        if series is None:
            series = self.metrics[name] = MetricSeries(self.keep)
        series.add(float(value), step)

    def stats(self, name: str) -> dict[str, float]:
        """All statistics of one metric over the last `window` values (KeyError if never seen)."""
        return describe(self.metrics[name].tail(self.window))

    def get_mean(self, name: str, window: int | None = None) -> float | None:
        """Mean over the run (or the last `window` values); None without finite data."""
        return self._described(name, window).get("mean")

    def get_std(self, name: str, window: int | None = None) -> float | None:
        """Population standard deviation over the run (or the last `window` values)."""
        return self._described(name, window).get("std")

    def get_latest(self, name: str) -> float | None:
        series = self.metrics.get(name)
        return series.values[-1] if series is not None and series.values else None

    def get_summary(self, name: str) -> dict[str, float]:
        """count, mean, std, min, max, p50, p95 and latest over the run; {} if never seen."""
        described = self._described(name, None)
        if described:
            described["latest"] = self.metrics[name].values[-1]
        return described

    def get_all_summaries(self) -> dict[str, dict[str, float]]:
        return {name: self.get_summary(name) for name in self.metrics}

    def get_history(self, name: str) -> list[tuple[int, float]]:
        """``(step, value)`` pairs as logged (the kept part of the run)."""
        series = self.metrics.get(name)
        return list(zip(series.steps, series.values, strict=True)) if series else []

    def _described(self, name: str, window: int | None) -> dict[str, float]:
        series = self.metrics.get(name)
        if series is None:
            return {}
        described = describe(series.tail(window))
        return described if described["count"] else {}

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, series in self.metrics.items():
            described = describe(series.tail(self.window))
            if not described["count"]:
                continue
            for stat in self.STATS:
                out[f"{self.prefix}/{name}/{stat}"] = described[stat]
        return out


def grpo_group_stats(
    rewards: Any, group_size: int | None = None, group_ids: Sequence[Any] | None = None
) -> dict[str, Any]:
    """Statistics of one GRPO batch, whose responses come in groups per prompt.

    Give either `group_size` (responses ``[0:G]`` are prompt 0's, ``[G:2G]``
    prompt 1's, ...) or one `group_ids` entry per response. Returns:

    - ``group_means`` / ``group_stds``: per group (population std, as GRPO's
      advantage normalisation uses);
    - ``zero_std_fraction``: groups whose responses all scored the same; their
      advantages are all zero, so they teach the policy nothing;
    - ``rank_means``: the mean reward of the best, 2nd best, ... response of a
      group (the gap from first to last is the signal GRPO learns from); only
      over groups of the most common size;
    - ``spread_mean``: mean of (best - worst) per group.
    """
    values = _floats(rewards)
    groups: dict[Any, list[float]] = {}
    if group_ids is not None:
        if len(group_ids) != len(values):
            raise ValueError("group_ids needs one entry per reward")
        for key, value in zip(group_ids, values, strict=True):
            groups.setdefault(key, []).append(value)
    elif group_size:
        if len(values) % group_size:
            raise ValueError(f"{len(values)} rewards do not split into groups of {group_size}")
        for start in range(0, len(values), group_size):
            groups[start // group_size] = values[start : start + group_size]
    else:
        raise ValueError("give group_size or group_ids")
    means, stds, spreads = [], [], []
    zero_std = 0
    for members in groups.values():
        described = describe(members)
        means.append(described["mean"])
        stds.append(described["std"])
        spreads.append(described["max"] - described["min"])
        if described["std"] == 0.0:
            zero_std += 1
    common_size = Counter(len(m) for m in groups.values()).most_common(1)[0][0] if groups else 0
    ranked = [sorted(m, reverse=True) for m in groups.values() if len(m) == common_size]
    rank_means = [math.fsum(g[rank] for g in ranked) / len(ranked) for rank in range(common_size)]
    return {
        "num_groups": len(groups),
        "group_means": means,
        "group_stds": stds,
        "zero_std_fraction": zero_std / len(groups) if groups else math.nan,
        "rank_means": rank_means,
        "spread_mean": math.fsum(spreads) / len(spreads) if spreads else math.nan,
    }


class GRPOGroupTracker(_ExtraContributor):
    """`grpo_group_stats` per batch, summarised as ``grpo/*`` extras.

    The summary covers the batches added since the last `summary()` (one step's
    rollouts), so each step's record carries that step's groups.
    """

    def __init__(self, group_size: int | None = None, prefix: str = "grpo") -> None:
        self.group_size = group_size
        self.prefix = prefix
        self._rewards: list[float] = []
        self._ids: list[Any] = []

    def update(self, rewards: Any, group_ids: Sequence[Any] | None = None) -> None:
        """Add one batch of rewards (grouped by `group_ids` or by `group_size`)."""
        values = _floats(rewards)
        if group_ids is None:
            if not self.group_size:
                raise ValueError("give group_ids, or a group_size to the tracker")
            if len(values) % self.group_size:
                raise ValueError(
                    f"{len(values)} rewards do not split into groups of {self.group_size}"
                )
            group_ids = [i // self.group_size for i in range(len(values))]
        batch = len(self._ids)
        self._rewards.extend(values)
        # Keys are made unique per batch so that group 0 of two batches stays two groups.
        self._ids.extend((batch, key) for key in group_ids)

    def summary(self) -> dict[str, float]:
        if not self._rewards:
            return {}
        stats = grpo_group_stats(self._rewards, group_ids=self._ids)
        self._rewards, self._ids = [], []
        p = self.prefix
        out = {
            f"{p}/num_groups": float(stats["num_groups"]),
            f"{p}/zero_std_fraction": stats["zero_std_fraction"],
            f"{p}/group_std_mean": math.fsum(stats["group_stds"]) / stats["num_groups"],
            f"{p}/group_mean_std": describe(stats["group_means"])["std"],
            f"{p}/spread_mean": stats["spread_mean"],
        }
        for rank, value in enumerate(stats["rank_means"], start=1):
            out[f"{p}/rank_{rank}_mean"] = value
        return out


class ScoreDistribution(_ExtraContributor):
    """Verifier / reward-model scores with invalid ones (None or NaN) counted apart.

    Over the last `window` scores: total, invalid rate, mean of the valid
    scores and how often each distinct value occurs (verifiers often score
    0 / 0.5 / 1). `summary()` flattens it into ``{prefix}/*`` extras.
    `window=None` keeps every score of the run.
    """

    def __init__(
        self, window: int | None = 1000, prefix: str = "scores", max_levels: int = 20
    ) -> None:
        self.prefix = prefix
        self.max_levels = max_levels
        self._scores: deque[float | None] = deque(maxlen=window)

    def update(self, scores: Iterable[Any]) -> None:
        for raw in scores:
            value = to_scalar(raw)
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                self._scores.append(None)
            else:
                self._scores.append(float(value) if math.isfinite(value) else None)

    def distribution(self) -> dict[str, Any]:
        valid = [s for s in self._scores if s is not None]
        total = len(self._scores)
        counts = Counter(valid)
        return {
            "total": total,
            "valid_count": len(valid),
            "invalid_count": total - len(valid),
            "invalid_rate": (total - len(valid)) / total if total else math.nan,
            "mean_score": math.fsum(valid) / len(valid) if valid else math.nan,
            "score_counts": {self.level_key(k): n for k, n in sorted(counts.items())},
        }

    @staticmethod
    def level_key(score: float) -> str:
        """How a distinct score is named in `score_counts` and the extra keys (``0.5``, ``1``)."""
        return f"{score:g}"

    def summary(self) -> dict[str, float]:
        dist = self.distribution()
        if not dist["total"]:
            return {}
        p = self.prefix
        out = {f"{p}/total": float(dist["total"]), f"{p}/invalid_rate": dist["invalid_rate"]}
        if dist["valid_count"]:
            out[f"{p}/mean"] = dist["mean_score"]
        # Per-level fractions only for discrete scores; continuous ones would
        # add a key per distinct float.
        levels = dist["score_counts"]
        if levels and len(levels) <= self.max_levels:
            for level, count in levels.items():
                out[f"{p}/fraction_{level}"] = count / dist["total"]
        return out
