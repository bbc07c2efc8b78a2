"""The reward-hacking trend of the sample detectors: reward up while completions collapse.

`CollapseTrend` keeps the reward of a job's recent steps whose completions
were varied, and of the collapsed ones since; `update(step)` says, for one
step's samples, whether the mean reward rose while the completions collapsed
to one text across prompts (`live/sample_detectors.py` turns that into a
``reward_hacking`` finding). `collapsed_now` says whether the step just seen
had collapsed: while it stays so, an open incident goes on (hysteresis), even
on the steps whose reward did not rise.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from dataclasses import dataclass, field

from training_platform.live.sample_step import (
    SampleDetectorConfig,
    Step,
    StepSample,
    share_text,
    snippet,
)


@dataclass(frozen=True)
class _RewardSummary:
    step: int
    mean: float
    variance: float


@dataclass(frozen=True)
class _Dominant:
    """The step's most common completion text and who wrote it."""

    carriers: list[StepSample]
    prompts: int
    """How many different prompts (groups) it answers."""
    share: float


def _dominant(step: Step) -> _Dominant:
    text, _ = Counter(s.normalised for s in step.samples).most_common(1)[0]
    carriers = [s for s in step.samples if s.normalised == text]
    prompts = len({s.prompt if s.group is None else s.group for s in carriers})
    return _Dominant(carriers, prompts, len(carriers) / len(step.samples))


@dataclass
class CollapseTrend:
    """Reward up while completions collapse: the reward of varied steps, then of collapsed ones."""

    config: SampleDetectorConfig
    varied: deque[_RewardSummary] = field(init=False)
    collapsed: deque[_RewardSummary] = field(init=False)
    collapsed_now: bool = False
    """Whether the last step updated had collapsed to one text across prompts."""

    def __post_init__(self) -> None:
        self.varied = deque(maxlen=self.config.trend_window)
        self.collapsed = deque(maxlen=max(1, self.config.trend_window // 2))

    def rewind(self, step: int) -> None:
        """A resumed run rewrites `step` and later: forget what they said before."""
        for window in (self.varied, self.collapsed):
            while window and window[-1].step >= step:
                window.pop()

    def update(self, step: Step) -> tuple[str, list[int]] | None:
        self.collapsed_now = False
        rewards = step.rewards()
        if len(rewards) < self.config.min_rewarded_samples:
            return None
        mean = statistics.fmean(rewards)
        # By hand: statistics.pvariance computes exactly, with fractions, and is slow.
        variance = statistics.fmean((reward - mean) ** 2 for reward in rewards)
        summary = _RewardSummary(step.step, mean, variance)
        dominant = _dominant(step)
        if (
            dominant.share < self.config.collapse_share
            or dominant.prompts < self.config.collapse_min_prompts
        ):
            self.varied.append(summary)
            self.collapsed.clear()  # a varied step ends the collapse
            return None
        self.collapsed_now = True
        self.collapsed.append(summary)
        if len(self.varied) < self.config.trend_min_steps:
            return None  # collapsed from the start: no earlier reward to compare with
        before = statistics.fmean(s.mean for s in self.varied)
        sigma = math.sqrt(statistics.fmean(s.variance for s in self.varied))
        now = statistics.fmean(s.mean for s in self.collapsed)
        # The 1e-9 floor: with a constant baseline (sigma 0) rounding is no rise.
        if now - before < max(self.config.trend_min_rise * sigma, 1e-9):
            return None
        return self._explain(step, dominant, before, now)

    def _explain(
        self, step: Step, dominant: _Dominant, before: float, now: float
    ) -> tuple[str, list[int]]:
        count = len(dominant.carriers)
        message = (
            f"the mean reward rose from {before:.4g} (last {len(self.varied)} steps with "
            f"varied completions) to {now:.4g} while completions collapsed to one text: "
            f"{snippet(dominant.carriers[0].text)} is {share_text(count, len(step.samples))}, "
            f"across {dominant.prompts} prompts"
        )
        return message, [s.index for s in dominant.carriers]
